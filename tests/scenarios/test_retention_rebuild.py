"""A checkpoint older than the offsets topic's delete.retention.ms: the member that left meanwhile left
only tombstones, which the cleaner has dropped; the job rebuilds group state from the topic's beginning.

The broker here compacts __consumer_offsets within seconds: one offsets partition, a segment rolled
every second while a committer keeps writing, the cleaner looking every 250 ms at anything 1% dirty,
and delete.retention.ms (the broker default, which the offsets topic inherits) at 3 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from decoders import decode
from streaming.logs.events import EventLog
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until
from tests.support.exposition import value
from tests.support.monitor_helpers import scrape, start_monitor, wait_for

pytestmark = pytest.mark.slow

DELETE_RETENTION_MS = 3000
COMPACTING = {
    "offsets.topic.num.partitions": "1",
    "log.roll.ms": "1000",
    "log.cleaner.delete.retention.ms": str(DELETE_RETENTION_MS),
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "250",
}


def logged_rows(log: EventLog, run: str) -> list[dict[str, Any]]:
    """The rows of one run's files, batch files or segments, by batch (a batch's rows in their order)."""
    rows = [row for path in log.files() if path.parent.name == f"run={run}"
            for row in pq.ParquetFile(path).read().to_pylist()]
    return sorted(rows, key=lambda row: row["batch_id"])


@pytest.fixture(scope="module")
def compacting_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    broker = LocalKafka(tmp_path_factory.mktemp("compacting-kafka"), extra_config=COMPACTING)
    broker.start()
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        heartbeat = client.api_versions().get(68)  # ConsumerGroupHeartbeat; confluent-kafka needs v1
    finally:
        client.close()
    try:
        if heartbeat is None or heartbeat[1] < 1:
            pytest.skip(f"Kafka {broker.version}: confluent-kafka's KIP-848 consumer needs ConsumerGroupHeartbeat v1")
        yield broker
    finally:
        broker.stop()


class Committer(threading.Thread):
    """Commits an offset of ``topic`` for a group of its own every 200 ms: the offsets topic keeps rolling
    segments and stays dirty enough for the cleaner to run."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name="committer")
        self.bootstrap = bootstrap
        self.topic = topic
        self.done = threading.Event()

    def run(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id="committer", enable_auto_commit=False)
        try:
            offset = 0
            while not self.done.wait(0.2):
                offset += 1
                consumer.commit({TopicPartition(self.topic, 0): OffsetAndMetadata(offset, "", -1)})
        finally:
            consumer.close()


def member_keys(admin: Admin, member_id: str) -> list[tuple[int, int, bool]]:
    """(offset, record type, tombstone) of every record in __consumer_offsets about ``member_id``."""
    found = []
    for record in admin.read_all("__consumer_offsets"):
        decoded = decode(record.key, record.value)
        if member_id in repr(decoded.key):
            found.append((record.offset, decoded.record_type, record.value is None))
    return found


def test_a_checkpoint_older_than_delete_retention_rebuilds_group_state(spark, compacting_broker, members, tmp_path,
                                                                        caplog):
    bootstrap = compacting_broker.bootstrap
    admin = Admin(bootstrap)
    topic, group = "orders", "ghosts"
    committer = Committer(bootstrap, topic)
    parts = [(topic, 0), (topic, 1)]
    # The offsets-topic view is what a rebuild repairs: the live poll (which would show Kafka's own
    # state for the group whatever the checkpoint missed) is off, so the state asserted is the log's.
    args = ("--include-groups", f"^{group}$", "--live-poll-seconds", "0")
    stable = "Stable"
    try:
        admin.create_topic(topic, 2)
        committer.start()
        crew = [Member(bootstrap, group, [topic], f"K{i}", protocol="consumer") for i in range(2)]
        members.extend(crew)
        start_members(crew[:1])
        wait_balanced(crew[:1], parts)

        job = start_monitor(spark, bootstrap, tmp_path, *args)
        try:
            wait_for(job, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 1
                     and value(s, "kafka_consumergroup_state", group=group, state=stable) == 1, "K0 alone")
            start_members(crew[1:])  # a rebalance the event log keeps
            wait_balanced(crew, parts)
            before = wait_for(job, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 2
                              and value(s, "kafka_consumergroup_state", group=group, state=stable) == 1, "two members")
            assert value(before, "rebalance_monitor_checkpoint_age_seconds") == 0  # no checkpoint yet
        finally:
            job.stop()
        epoch = value(before, "kafka_consumergroup_generation", group=group)
        first_run = job.event_log.run_id
        history = logged_rows(job.event_log, first_run)
        assert history, "the first run logged the group's rebalances"

        # While the job is down, K1 leaves: tombstones for its records, then the cleaner drops them.
        gone = crew[1].member_id
        assert gone and member_keys(admin, gone), "K1's records are in the offsets topic"
        crew[1].leave()
        wait_balanced(crew[:1], parts)
        wait_until(lambda: not member_keys(admin, gone), 90, "K1's tombstones to be compacted away", interval=1)

        # Resumed without a rebuild, the job never learns that K1 left: a ghost member, Reconciling.
        job = start_monitor(spark, bootstrap, tmp_path, *args, "--rebuild-after-seconds", "0")
        try:
            wait_for(job, lambda s: (value(s, "kafka_consumergroup_generation", group=group) or 0) > epoch,
                     "the epoch K1's departure started")
            time.sleep(3)  # a few more triggers: what stays is the ghost
            ghost = scrape(job)
        finally:
            job.stop()
        assert value(ghost, "kafka_consumergroup_current_members", group=group) == 2
        assert value(ghost, "kafka_consumergroup_state", group=group, state="Reconciling") == 1
        assert value(ghost, "rebalance_monitor_state_rebuilds_total", reason="checkpoint_age") == 0

        # Resumed with the default, the topic's delete.retention.ms (3 s), once the checkpoint is older.
        time.sleep(DELETE_RETENTION_MS / 1000 + 1)
        caplog.set_level(logging.INFO, logger="rebalance_monitor")
        job = start_monitor(spark, bootstrap, tmp_path, *args)
        try:
            healed = wait_for(job, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 1
                              and value(s, "kafka_consumergroup_state", group=group, state=stable) == 1,
                              "the group rebuilt with its one member")
        finally:
            job.stop()
    finally:
        committer.done.set()
        committer.join(10)
        admin.close()
    assert value(healed, "kafka_consumergroup_state", group=group, state="Reconciling") is None
    generation = "kafka_consumergroup_generation"
    assert value(healed, generation, group=group) >= value(ghost, generation, group=group)
    assert value(healed, "rebalance_monitor_state_rebuilds_total", reason="checkpoint_age") == 1
    assert (DELETE_RETENTION_MS / 1000 <= value(healed, "rebalance_monitor_checkpoint_age_seconds") < 120)
    assert "group state is rebuilt from its beginning" in caplog.text
    assert "delete.retention.ms of topic __consumer_offsets" in caplog.text
    # The event log keeps the earlier runs' history untouched (the resumed run merged its batch files into a
    # segment at its first batch, rows unchanged); the rebuilt query writes a new run.
    assert job.event_log.run_id != first_run
    batches = {row["batch_id"] for row in history}
    assert [row for row in logged_rows(job.event_log, first_run) if row["batch_id"] in batches] == history
