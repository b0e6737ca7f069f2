"""Groups and topics come and go, and the offsets topic really compacts, under the real job.

Its own broker: one offsets-topic partition rolled every second and cleaned as soon as it can
be, tombstones kept 20 seconds, offsets retained one minute (Kafka's minimum). On it: a group
deleted (Kafka writes tombstones), a group whose offsets the broker expires, a topic deleted and
created again with fewer partitions. The job is then stopped while a burst of commits rolls and
compacts the range it has not read, and resumed from its checkpoint: it spans the compaction
gaps (``rebalance_monitor_skipped_offsets_total``) and still ends on the right state. A second
job started from an empty checkpoint on the compacted topic serves the same live state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from streaming.job import Monitor
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.monitor_helpers import scrape, start_monitor, wait_for

pytestmark = pytest.mark.slow

COMPACTING = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": str(1 << 20),
    "log.roll.ms": "1000",  # a new segment at the first append a second after the last roll
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "200",
    # Tombstones go 20 s after their segment is first cleaned. The job must read them to drop what they delete;
    # at one second a CI run lost an expired group's: written at :47.8, cleaned away at :49.1, and the batch
    # that read their offsets ended at :49.3 without them.
    "log.cleaner.delete.retention.ms": "20000",
    "log.cleaner.dedupe.buffer.size": str(16 << 20),
    "offsets.retention.minutes": "1",
    "offsets.retention.check.interval.ms": "1000",
}
LIVE_FAMILIES = ("kafka_consumergroup_committed_offset", "kafka_consumergroup_generation",
                 "kafka_consumergroup_current_members", "kafka_consumergroup_state")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path / "kafka", extra_config=COMPACTING)
    kafka.start()
    yield kafka
    kafka.stop()


def committed(samples: Samples, group: str) -> dict[tuple[str, str], float]:
    return {(d["topic"], d["partition"]): v for labels, v in
            series(samples, "kafka_consumergroup_committed_offset", group=group).items() for d in [dict(labels)]}


def skipped(samples: Samples) -> float:
    return value(samples, "rebalance_monitor_skipped_offsets_total") or 0


def group_series(samples: Samples, group: str) -> int:
    return sum(1 for (name, labels) in samples if ("group", group) in labels)


def live_state(samples: Samples) -> dict[tuple[str, frozenset], float]:
    return {(name, labels): v for (name, labels), v in samples.items()
            if name in LIVE_FAMILIES and any(k == "group" and g.startswith("lc-") for k, g in labels)}


def wait_state(job: Monitor, check: Callable[[Samples], bool], what: str, timeout: float = 90) -> Samples:
    """``wait_for``, failing with what the job serves for the test's groups."""
    try:
        return wait_for(job, check, what, timeout)
    except AssertionError as exc:
        state = sorted((name, sorted(labels), v) for (name, labels), v in scrape(job).items()
                       if any(k == "group" and g.startswith("lc-") for k, g in labels)
                       and name in (*LIVE_FAMILIES, "kafka_consumergroup_partition_lag"))
        raise AssertionError(f"{exc}; the job serves {state}") from None


def offsets_topic_gaps(admin: Admin) -> int:
    """Offsets of the offsets topic with no record left: what compaction removed."""
    records = admin.read_all("__consumer_offsets")
    tp = TopicPartition("__consumer_offsets", 0)
    with KafkaConsumer(bootstrap_servers=admin.bootstrap) as consumer:
        start, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    return (end - start) - len(records)


class Keeper(threading.Thread):
    """Re-commits groups' offsets every second: memberless groups whose offsets must outlive
    the one-minute retention (the same offsets: their series do not change)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True, name="offset-keeper")
        self.bootstrap = bootstrap
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._consumers: dict[str, KafkaConsumer] = {}
        self._lock = threading.Lock()  # held while committing: once keep() returns, a dropped group is not committed
        self._stop_event = threading.Event()
        self.errors: list[str] = []

    def keep(self, group: str, offsets: dict[tuple[str, int], int] | None) -> None:
        """Commit ``offsets`` for ``group`` from the next round on (None: no more commits for it)."""
        with self._lock:
            if offsets is None:
                self._offsets.pop(group, None)
            else:
                self._offsets[group] = offsets

    def run(self) -> None:
        while not self._stop_event.wait(1.0):
            with self._lock:
                for group, offsets in self._offsets.items():
                    consumer = self._consumers.get(group)
                    if consumer is None:
                        consumer = self._consumers[group] = KafkaConsumer(
                            bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False)
                    try:
                        consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                         for (t, p), o in offsets.items()})
                    except KafkaError as exc:  # a coordinator moving or loading: the next round retries
                        self.errors.append(f"{group}: {exc!r}")

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(30)
        for consumer in self._consumers.values():
            consumer.close()


@pytest.fixture
def admin(broker: LocalKafka) -> Iterator[Admin]:
    client = Admin(broker.bootstrap)
    yield client
    client.close()


@pytest.fixture
def keeper(broker: LocalKafka) -> Iterator[Keeper]:
    thread = Keeper(broker.bootstrap)
    yield thread
    thread.stop()


def test_groups_and_topics_come_and_go_while_the_offsets_topic_compacts(spark, broker, admin, keeper, tmp_path,
                                                                       unique):
    data, moving = f"lc-data-{unique}", f"lc-moving-{unique}"
    for topic, partitions in ((data, 4), (moving, 4)):
        admin.create_topic(topic, partitions)
        for p in range(partitions):
            admin.produce(topic, 10, partition=p)
    keeper.keep("lc-steady", {(data, p): 7 for p in range(4)})
    keeper.keep("lc-topic", {(moving, p): 5 for p in range(4)})
    keeper.start()
    member = Member(broker.bootstrap, "lc-deleted", [data], "lc-client").start()
    job = start_monitor(spark, broker.bootstrap, tmp_path / "job1")
    # Offsets the broker expires: a group without members, its commits older than the retention.
    expires_by = time.monotonic() + 60 + 30
    admin.commit("lc-expiring", {(data, p): 3 for p in range(4)})
    try:
        wait_until(lambda: member.joined, 60, "the member to join")
        first = wait_state(job, lambda s: (value(s, "kafka_consumergroup_generation", group="lc-deleted") or 0) >= 1
                           and all(len(committed(s, g)) == 4 for g in ("lc-expiring", "lc-steady", "lc-topic")),
                           "every group")
        assert committed(first, "lc-expiring") == {(data, str(p)): 3 for p in range(4)}

        # A group deleted: its members gone, Kafka writes tombstones for its metadata and offsets.
        member.leave()
        admin.commit("lc-deleted", {(data, 0): 9})
        wait_state(job, lambda s: value(s, "kafka_consumergroup_current_members", group="lc-deleted") == 0
                   and committed(s, "lc-deleted").get((data, "0")) == 9, "the deleted group's last state")
        admin.client.delete_groups(["lc-deleted"])
        wait_state(job, lambda s: group_series(s, "lc-deleted") == 0, "the deleted group's series to go")

        # A topic deleted (Kafka drops the offsets of its partitions) and created with fewer partitions.
        wait_state(job, lambda s: len(series(s, "kafka_consumergroup_partition_lag", group="lc-topic")) == 4,
                   "lag on 4 partitions")
        keeper.keep("lc-topic", None)
        admin.client.delete_topics([moving])
        wait_state(job, lambda s: group_series(s, "lc-topic") == 0, "the deleted topic's offsets to go")
        wait_until(lambda: _recreated(admin, moving), 60, "the topic to be created again")
        for p in range(2):
            admin.produce(moving, 4, partition=p)
        keeper.keep("lc-topic", {(moving, 0): 1, (moving, 1): 3})
        after = wait_state(job, lambda s: {dict(labels)["partition"]: v for labels, v in series(
            s, "kafka_consumergroup_partition_lag", group="lc-topic").items()} == {"0": 3, "1": 1},
                           "lag on the new partitions")
        assert committed(after, "lc-topic") == {(moving, "0"): 1, (moving, "1"): 3}

        # Offsets expired by the broker: tombstones, and the group (known by its offsets alone) goes.
        wait_state(job, lambda s: group_series(s, "lc-expiring") == 0, "the expired offsets to go",
                   timeout=max(0.0, expires_by - time.monotonic()))
        assert committed(scrape(job), "lc-steady") == {(data, str(p)): 7 for p in range(4)}
        skipped_before = skipped(scrape(job))
    finally:
        job.stop()

    # Compaction under the job: a burst of commits it has not read rolls segments and is cleaned.
    gaps_before = offsets_topic_gaps(admin)
    keeper.keep("lc-steady", None)
    last, written = _commit_burst(broker.bootstrap, "lc-steady", data, seconds=4)
    keeper.keep("lc-steady", last)
    wait_until(lambda: offsets_topic_gaps(admin) > gaps_before + 1000, 90, "the cleaner to compact the burst")
    gaps = offsets_topic_gaps(admin)
    expected = {(data, str(p)): o for (_, p), o in last.items()}

    # This broker keeps tombstones 20 s, so a job resumed later than that would rebuild its state from the
    # topic's beginning (--rebuild-after-seconds, test_retention_rebuild.py); here the point is resuming
    # from the checkpoint across compaction gaps, so the rebuild is turned off.
    job = start_monitor(spark, broker.bootstrap, tmp_path / "job1", "--rebuild-after-seconds", "0")
    try:
        # the counter is the resumed process's own: the burst's compacted range is read after the restart
        resumed = wait_state(job, lambda s: committed(s, "lc-steady") == expected and skipped(s) >= written // 2,
                             f"the burst's last commits, its {written} records mostly skipped", timeout=120)
        resumed_skipped = skipped(resumed)
        resumed_state = live_state(scrape(job))
    finally:
        job.stop()

    fresh = start_monitor(spark, broker.bootstrap, tmp_path / "job2")
    try:
        # Its first batch reads from the earliest offsets, for which Spark reports no start offset:
        # the gaps it spans are not counted (only those of later batches would be).
        wait_state(fresh, lambda s: committed(s, "lc-steady") == expected, "the compacted topic's state", timeout=120)
        fresh_state = live_state(scrape(fresh))
    finally:
        fresh.stop()
    assert job.query.exception() is None and fresh.query.exception() is None
    assert fresh_state == resumed_state
    assert {dict(labels)["group"] for (_, labels) in fresh_state} == {"lc-steady", "lc-topic"}
    print(f"\nlifecycle: {gaps} offsets of __consumer_offsets compacted away ({gaps_before} before a burst of "
          f"{written} commit records); skipped offsets: first job {skipped_before:.0f} before the burst, "
          f"{resumed_skipped:.0f} once resumed from its checkpoint")


def _recreated(admin: Admin, topic: str) -> bool:
    try:
        admin.create_topic(topic, 2)
    except Exception:  # still being deleted
        return False
    return admin.partitions(topic) == [0, 1]


def _commit_burst(bootstrap: str, group: str, topic: str, seconds: float) -> tuple[dict[tuple[str, int], int], int]:
    """Commit ever higher offsets on the topic's four partitions for ``seconds``; the last ones, the records written."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    offset = 100
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            offset += 1
            consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(offset, "", -1) for p in range(4)})
    finally:
        consumer.close()
    return {(topic, p): offset for p in range(4)}, (offset - 100) * 4
