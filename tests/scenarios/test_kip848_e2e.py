"""KIP-848 groups on Kafka 4.1+ (no record maps a topic id to its name any more): real broker (4.3.1),
real confluent-kafka members with ``group.protocol=consumer``, the real job, Kafka's own tool as the oracle.

Second scenario: a member that stops polling cannot revoke what a newcomer's target takes from it;
the monitor must name it (epoch lag) and the newcomer waiting for its partitions, as Kafka's tool does.

Two members share a 4-partition topic: one stops polling before it has read anything (a slow
consumer that never committed: its partitions are measured from the log start), the other reads
everything and is then killed with SIGKILL (only the session timeout removes it). The monitor must
show each member's lag as the sum over its own partitions, export the never-committed partitions'
lag, classify the kill as a session timeout, and its lag poller must never be handed a topic id.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from decoders import coordinator_partition
from decoders.batch import decode_batch
from decoders.reader import uuid_text
from streaming.cluster.metadata import TopicMetadata
from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.lag_helpers import describe_group, describe_members
from tests.support.monitor_helpers import scrape, wait_for

pytestmark = pytest.mark.slow

RECORDS_PER_PARTITION = 200


def _poll_errors(samples: Samples) -> float:
    return sum(series(samples, "rebalance_monitor_log_end_poll_errors_total").values())


def _member_lag(samples: Samples, group: str, client_id: str) -> float | None:
    return value(samples, "kafka_consumergroup_member_lag", group=group, client_id=client_id)


def test_kip848_member_lag_uncommitted_lag_and_a_killed_members_departure(
        kafka_broker, admin: Admin, monitor, members: list[Member], unique: str, kip848) -> None:
    group, topic = f"kip848-lag-{unique}", f"kip848-lag-{unique}"
    admin.create_topic(topic, 4)
    errors_before = _poll_errors(scrape(monitor))
    crew = [Member(kafka_broker.bootstrap, group, [topic], client_id, protocol="consumer")
            for client_id in ("slow", "doomed")]
    members.extend(crew)
    slow, doomed = start_members(crew)
    owned = wait_balanced(crew, [(topic, p) for p in range(4)])
    assert len(owned["slow"]) == len(owned["doomed"]) == 2

    # The slow member stops before there is anything to read: it never commits.
    slow.stop_polling()
    wait_until(lambda: slow.stalled, 30, "the slow member's poll loop to stop")
    for partition in range(4):
        admin.produce(topic, RECORDS_PER_PARTITION, partition=partition)
    ends = admin.end_offsets([(topic, p) for p in range(4)])

    def read_all() -> bool:
        committed = admin.group_offsets(group)
        return all(committed.get(tp) == ends[tp] for tp in owned["doomed"])

    wait_until(read_all, 60, "the other member to read its partitions")

    def lag_shown(s: Samples) -> bool:
        return (_member_lag(s, group, "slow") == 2 * RECORDS_PER_PARTITION
                and _member_lag(s, group, "doomed") == 0)

    samples = wait_for(monitor, lag_shown, "each member's lag")
    # Kafka's own tool: the doomed member's partitions are committed at the log end; the slow
    # member's have no committed offset ("-"), and their lag counts from the log start (0 here).
    described = describe_group(kafka_broker.bootstrap, group)
    assert {described[tp][0] for tp in owned["slow"]} == {"-"}
    assert _member_lag(samples, group, "slow") == sum(int(described[tp][1]) for tp in owned["slow"])
    assert _member_lag(samples, group, "doomed") == sum(int(described[tp][2]) for tp in owned["doomed"])
    for _, partition in owned["slow"]:
        assert value(samples, "kafka_consumergroup_partition_lag_uncommitted", group=group, topic=topic,
                     partition=str(partition)) == RECORDS_PER_PARTITION
    for _, partition in owned["doomed"]:
        assert value(samples, "kafka_consumergroup_partition_lag", group=group, topic=topic,
                     partition=str(partition)) == 0
    polled = {dict(labels)["topic"] for labels in series(samples, "kafka_topic_partition_log_end_offset")}
    assert topic in polled

    # SIGKILL: no leave; the broker removes the member a session timeout after its last heartbeat.
    generation = value(samples, "kafka_consumergroup_generation", group=group)
    doomed_id = doomed.member_id
    doomed.crash()
    samples = wait_for(monitor, lambda s: (value(s, "kafka_consumergroup_member_departures_total", group=group,
                                                 how="session_timeout") or 0) >= 1, "the killed member's departure")
    assert value(samples, "kafka_consumergroup_member_departures_total", group=group, how="unknown") is None
    [event] = [e for e in monitor.event_log.read(group) if e.members_left]
    assert event.new_generation > generation and event.members_left == (doomed_id,)
    assert event.departures == ("session_timeout",)
    assert {t for t, _ in event.moved_partitions} <= {topic}

    # Over the whole run the poller was never handed a topic id (nor anything else it could not poll).
    assert _poll_errors(scrape(monitor)) == errors_before
    assert not series(samples, "rebalance_monitor_unresolved_topic_ids_total")

    # What names the topics without a metadata request: on 4.1+ each commit carries its topic's id
    # (OffsetCommitValue v4), the one Kafka's metadata gives the topic.
    metadata = TopicMetadata(kafka_broker.bootstrap)
    try:
        [topic_id] = metadata.topic_names([topic])
    finally:
        metadata.stop()
    partition = coordinator_partition(group, len(admin.partitions("__consumer_offsets")))
    records = admin.read_all("__consumer_offsets", [partition])
    table = decode_batch(pa.array([r.key for r in records], pa.binary()), pa.array([r.value for r in records],
                                                                                   pa.binary()))
    commits = [row for row in table.to_pylist() if row["group"] == group and row["record_type"] == 1
               and not row["is_tombstone"]]
    assert commits and {(row["value_version"], uuid_text(row["topic_id"])) for row in commits} == {(4, topic_id)}


def _behind(samples: Samples, group: str, client_id: str) -> tuple[float | None, float | None]:
    return (value(samples, "kafka_consumergroup_member_epoch_lag", group=group, client_id=client_id),
            value(samples, "kafka_consumergroup_member_unreconciled_partitions", group=group, client_id=client_id))


def test_a_member_that_does_not_revoke_is_named_behind_its_target(
        kafka_broker, admin: Admin, monitor, members: list[Member], unique: str, kip848) -> None:
    group, topic = f"kip848-behind-{unique}", f"kip848-behind-{unique}"
    admin.create_topic(topic, 4)
    holder = Member(kafka_broker.bootstrap, group, [topic], "holder", protocol="consumer")
    members.append(holder)
    start_members([holder])
    wait_balanced([holder], [(topic, p) for p in range(4)])
    wait_for(monitor, lambda s: _behind(s, group, "holder") == (0, 0), "the holder reconciled on all 4")

    holder.stop_polling()
    wait_until(lambda: holder.stalled, 30, "the holder's poll loop to stop")
    waiter = Member(kafka_broker.bootstrap, group, [topic], "waiter", protocol="consumer")
    members.append(waiter)
    start_members([waiter])
    # The new target gives the waiter two of the holder's partitions; the holder, not polling, never
    # revokes them: it stays at its old epoch, the waiter at the new one without its partitions.
    samples = wait_for(monitor, lambda s: (_behind(s, group, "holder")[0] or 0) >= 1
                       and _behind(s, group, "waiter") == (0, 2), "the holder behind and the waiter waiting")
    assert _behind(samples, group, "holder") == (1, 2)
    assert value(samples, "kafka_consumergroup_state", group=group, state="Reconciling") == 1
    kafka = describe_members(kafka_broker.bootstrap, group)
    assert int(kafka["holder"]["TARGET-EPOCH"]) - int(kafka["holder"]["CURRENT-EPOCH"]) == 1, kafka
    assert kafka["waiter"]["TARGET-EPOCH"] == kafka["waiter"]["CURRENT-EPOCH"], kafka
    assert kafka["waiter"]["CURRENT-ASSIGNMENT"] != kafka["waiter"]["TARGET-ASSIGNMENT"], kafka

    # Released (the holder leaves), the waiter takes its target: nobody behind.
    holder.leave()
    wait_for(monitor, lambda s: _behind(s, group, "waiter") == (0, 0)
             and _behind(s, group, "holder") == (None, None), "the waiter reconciled, the holder gone")
