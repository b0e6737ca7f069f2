"""Timestamps of the records at committed offsets: lag in seconds measured, not estimated.

The age of the next record a group will read is what an operator means by "how far
behind": it keeps growing while a consumer is stuck, however long, and is 0 once nothing
is left to read. One kafka-python consumer (no group, no commits) is assigned the
partitions to look up, seeks each to its committed offset and fetches with a small
per-partition byte limit: the broker returns the first record batch at that offset and
little more, so a round costs about one small fetch per partition. Transaction markers
are control records that no consumer returns; skipping them finds the first real record.
Reading is ``read_committed``, as transactional applications read: records of aborted
transactions are skipped (a caught-up consumer whose only unread records were aborted is
caught up, not ever further behind), and a partition held by an open transaction is not
answered (its lag in seconds is then interpolated from the log-end history until it ends).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import TopicPartition as KafkaTopicPartition

from streaming.cluster.client import LazyClient, consumer_without_topic_creation
from streaming.lag.tracker import RecordTime
from streaming.protocol import TopicPartition

log = logging.getLogger(__name__)


class RecordTimestamps:
    """Looks up record timestamps with one long-lived consumer; not thread-safe (the
    poller's thread owns it)."""

    def __init__(self, client_config: Mapping[str, Any], max_wait_s: float = 5.0,
                 partition_fetch_bytes: int = 1024,
                 consumer_factory: Callable[..., Any] = consumer_without_topic_creation) -> None:
        self._config = {
            "client_id": "rebalance-monitor-timestamps",
            "group_id": None,
            "enable_auto_commit": False,
            "isolation_level": "read_committed",
            # The broker still returns a whole first batch when it is larger (KIP-74).
            "max_partition_fetch_bytes": partition_fetch_bytes,
            "fetch_max_wait_ms": 100,
            # A committed offset that retention removed meanwhile: read the first record
            # left, the one the group reads next if it resets to the earliest offset.
            "auto_offset_reset": "earliest",
            **client_config,
        }
        self._max_wait_s = max_wait_s
        self._consumer = LazyClient(consumer_factory, self._config, "timestamp consumer")

    def lookup(self, wanted: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, RecordTime]:
        """``{partition: (committed, log_end)}`` → what lies at each committed offset.

        Partitions not answered within ``max_wait_s`` are left out (retried by the caller
        later). Errors propagate; the consumer is then rebuilt on the next call.
        """
        if not wanted:
            return {}
        try:
            return self._lookup(wanted)
        except Exception:
            self.close()
            raise

    def _lookup(self, wanted: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, RecordTime]:
        consumer = self._consumer.get()
        tps = {tp: KafkaTopicPartition(*tp) for tp in wanted}
        consumer.assign(list(tps.values()))
        for tp, (committed, _) in wanted.items():
            consumer.seek(tps[tp], committed)
        found: dict[TopicPartition, RecordTime] = {}
        deadline = time.monotonic() + self._max_wait_s
        while len(consumer.paused()) < len(wanted) and time.monotonic() < deadline:
            for ktp, records in consumer.poll(timeout_ms=200).items():
                tp = (ktp.topic, ktp.partition)
                committed, log_end = wanted[tp]
                first = next((r for r in records if r.offset >= committed), None)
                if tp not in found and first is not None:
                    consumer.pause(ktp)
                    if first.timestamp >= 0:  # magic v0 records have none: left to interpolation
                        found[tp] = RecordTime(first.timestamp, log_end)
            paused = set(consumer.paused())
            for tp, (_, log_end) in wanted.items():
                if tps[tp] not in paused and consumer.position(tps[tp]) >= log_end:
                    found[tp] = RecordTime(None, log_end)  # markers only, up to the log end
                    consumer.pause(tps[tp])
        consumer.resume(*consumer.paused())
        return found

    def close(self) -> None:
        self._consumer.close()
