"""Consumer lag: offset lag, lag in seconds from log-end history, and a log-end poller.

Lag in seconds is estimated without reading any data: the poller samples each
partition's log-end offset periodically, and the age of a committed offset is the time
since the log end was at that offset (when the first unconsumed record was appended),
interpolated linearly between the samples around it.
"""

from __future__ import annotations

import base64
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import OffsetSpec

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Sample = tuple[float, int]  # (time in seconds, log-end offset)

DEFAULT_MAX_SAMPLES = 60


def offset_lag(log_end: int, committed: int) -> int:
    """Records between the committed offset and the log end; never negative."""
    return max(0, log_end - committed)


def lag_seconds(samples: Iterable[Sample], committed: int) -> float | None:
    """Seconds between the latest sample and the time the log end was at ``committed``.

    ``samples`` are ``(time_s, log_end)`` in time order. 0 when caught up. Inside the
    window the time is interpolated between the two samples around ``committed`` (the
    last sample at or below it and the next one). When ``committed`` is older than the
    oldest sample, the time is extrapolated back from the oldest sample at the window's
    mean produce rate; with no measurable rate (one sample, or a log end that did not
    move) the age of the oldest sample is returned, a lower bound. Only the samples
    since the log end last went down (truncation, topic re-created) are used. Returns
    None without samples; never negative, never NaN.
    """
    window = _monotonic_suffix(samples)
    if not window:
        return None
    t_last, end_last = window[-1]
    if committed >= end_last:
        return 0.0
    t0, end0 = window[0]
    if committed < end0:
        span, produced = t_last - t0, end_last - end0
        at = t0 - (end0 - committed) * span / produced if span > 0 and produced > 0 else t0
    else:
        i = max(k for k, (_, end) in enumerate(window) if end <= committed)
        (t_a, end_a), (t_b, end_b) = window[i], window[i + 1]
        at = t_a + (committed - end_a) * (t_b - t_a) / (end_b - end_a)
    result = t_last - at
    return result if math.isfinite(result) and result > 0 else 0.0


def _monotonic_suffix(samples: Iterable[Sample]) -> list[Sample]:
    window: list[Sample] = []
    for sample in samples:
        if window and sample[1] < window[-1][1]:
            window = []
        window.append(sample)
    return window


class LogEndHistory:
    """A bounded ring of log-end samples per partition (not thread-safe: guard it)."""

    def __init__(self, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        self._max_samples = max_samples
        self._samples: dict[TopicPartition, deque[Sample]] = {}

    def record(self, log_ends: Mapping[TopicPartition, int], time_s: float) -> None:
        for tp, end in log_ends.items():
            ring = self._samples.setdefault(tp, deque(maxlen=self._max_samples))
            if ring and ring[-1][0] >= time_s:
                continue  # keep samples strictly increasing in time
            ring.append((time_s, int(end)))

    def latest(self, tp: TopicPartition) -> int | None:
        ring = self._samples.get(tp)
        return ring[-1][1] if ring else None

    def samples(self, tp: TopicPartition) -> list[Sample]:
        return list(self._samples.get(tp, ()))

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._samples)

    def lag_seconds(self, tp: TopicPartition, committed: int) -> float | None:
        return lag_seconds(self._samples.get(tp, ()), committed)

    def retain(self, keep: Iterable[TopicPartition]) -> None:
        """Forget partitions no group tracks any more, so the history stays bounded."""
        keep = set(keep)
        for tp in [tp for tp in self._samples if tp not in keep]:
            del self._samples[tp]


def kafka_uuid_text(value: uuid.UUID) -> str:
    """Kafka's text form of a uuid (url-safe base64, no padding), as the decoder prints it."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


class LogEndPoller:
    """A daemon thread fetching log-end offsets every ``interval_s`` with kafka-python.

    Each round asks the cluster metadata for the tracked topics (unknown topics and
    partitions are logged and skipped), then kafka-python's
    ``KafkaAdminClient.list_partition_offsets`` sends one ListOffsets request per
    partition leader. The result goes to ``on_log_ends(log_ends, sampled_at_s)``, whose
    owner keeps the samples (``MetricsStore.set_log_end_offsets`` keeps the ring used
    for lag in seconds). Errors are logged and the round is retried at the next
    interval; they never end the thread. ``client_config`` passes extra
    ``KafkaAdminClient`` settings (``security_protocol``, ``sasl_*``, ``ssl_*``, ...).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        partitions: Callable[[], Iterable[TopicPartition]],
        on_log_ends: Callable[[dict[TopicPartition, int], float], None],
        interval_s: float = 10.0,
        client_config: Mapping[str, Any] | None = None,
        admin_factory: Callable[..., Any] | None = None,
    ) -> None:
        self._config = {"bootstrap_servers": bootstrap_servers, "client_id": "rebalance-monitor-lag"}
        self._config.update(client_config or {})
        self._partitions = partitions
        self._on_log_ends = on_log_ends
        self._interval_s = interval_s
        self._admin_factory = admin_factory or KafkaAdminClient
        self._admin: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-end-poller", daemon=True)

    def start(self) -> LogEndPoller:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the current round; the thread closes its client on the way out."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        else:
            self._close_admin()  # poll_once may have been called without the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                log.exception("log-end poll failed; retrying in %.0f s", self._interval_s)
                self._close_admin()  # reconnect from scratch next round
            self._stop.wait(self._interval_s)
        self._close_admin()

    def poll_once(self) -> dict[TopicPartition, int]:
        """One round: fetch the tracked partitions' log ends and hand them to ``on_log_ends``."""
        wanted = set(self._partitions())
        if not wanted:
            return {}
        admin = self._client()
        known = self._known_partitions(admin, {topic for topic, _ in wanted})
        present = wanted & known
        if wanted - present:
            log.warning("skipping unknown partitions: %s", sorted(wanted - present)[:20])
        if not present:
            return {}
        sampled_at = time.time()
        specs = {KafkaTopicPartition(t, p): OffsetSpec.LATEST for t, p in present}
        result = admin.list_partition_offsets(specs)
        log_ends = {(tp.topic, tp.partition): int(o.offset) for tp, o in result.items()}
        self._on_log_ends(log_ends, sampled_at)
        return log_ends

    def topic_names(self, topics: Iterable[str] | None = None) -> dict[str, str]:
        """Topic id (Kafka text uuid) → name from cluster metadata (all topics when None).

        kafka-python 3 returns topic ids in Metadata responses (v10+, as hyphenated uuid
        text), which resolves KIP-848 assignments when neither type 4 records nor offset
        commits name a topic. Topics without an id (older brokers) are left out.
        """
        admin = self._client()
        names = {}
        for topic in admin.describe_topics(list(topics) if topics is not None else None):
            topic_id = topic.get("topic_id")
            if topic.get("error_code") != 0 or not topic_id:
                continue
            parsed = topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))
            if parsed.int:
                names[kafka_uuid_text(parsed)] = topic["name"]
        return names

    @staticmethod
    def _known_partitions(admin: Any, topics: set[str]) -> set[TopicPartition]:
        known = set()
        for topic in admin.describe_topics(sorted(topics)):
            if topic.get("error_code") != 0:
                log.warning("topic %s: metadata error code %s", topic.get("name"), topic.get("error_code"))
                continue
            for partition in topic.get("partitions", ()):
                if partition.get("error_code", 0) == 0:
                    known.add((topic["name"], partition["partition_index"]))
        return known

    def _client(self) -> Any:
        if self._admin is None:
            self._admin = self._admin_factory(**self._config)
        return self._admin

    def _close_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:
                log.debug("closing the admin client failed", exc_info=True)

