"""Prometheus exposition: names, labels, HELP, values, removal, serving, concurrency."""

from __future__ import annotations

import threading
import urllib.request
from collections import defaultdict

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from decoders.records import Record, Struct
from streaming.exporter import MetricsStore
from streaming.state import OffsetCommit, apply_offset_commits, apply_record, summarize

T0 = 1_700_000_000_000


def member(member_id: str, assigned: dict[str, list[int]], instance: str | None = None) -> Struct:
    return Struct(
        memberId=member_id, groupInstanceId=instance, clientId=f"client-{member_id}", clientHost="/10.0.0.7",
        rebalanceTimeout=300000, sessionTimeout=45000, subscription=b"", assignment=b"",
        decodedSubscription=Struct(version=0, topics=tuple(assigned), userData=None),
        decodedAssignment=Struct(
            version=0, userData=None,
            assignedPartitions=tuple(Struct(topic=t, partitions=tuple(p)) for t, p in assigned.items()),
        ),
        payloadError=None,
    )


def classic(group: str, generation: int, members: list[Struct], ts: int) -> Record:
    value = Struct(protocolType="consumer", generation=generation, protocol="range",
                   leader=members[0]["memberId"], currentStateTimestamp=ts, members=tuple(members))
    return Record(2, Struct(group=group), 3, value)


def orders_summary():
    """Group ``orders``: a rebalance from 2 to 3 members, and two committed offsets."""
    first = [member("C0", {"t0": [0, 1]}), member("C1", {"t0": [2]})]
    snap, _ = apply_record(None, classic("orders", 1, first, T0), T0)
    snap, events = apply_record(snap, classic("orders", 2, [
        member("C0", {"t0": [0]}), member("C1", {"t0": [2]}), member("C2", {"t0": [1]}, instance="i-2"),
    ], T0 + 60_000), T0 + 60_000)
    assert len(events) == 1
    snap = apply_offset_commits(snap, "orders", [OffsetCommit("t0", 0, 150, T0, None, T0),
                                                 OffsetCommit("t0", 1, 200, T0, None, T0)], 5)
    return summarize(snap, T0 + 61_000)


def kip848_summary():
    """Group ``kip``: a KIP-848 group whose member has not reconciled yet."""
    key = Struct(groupId="kip", memberId="m1")
    records = [
        Record(5, key, 0, Struct(instanceId=None, clientId="cli", clientHost="/h",
                                 subscribedTopicNames=("t0",), serverAssignor="range")),
        Record(3, Struct(groupId="kip"), 0, Struct(epoch=4)),
        Record(7, key, 0, Struct(topicPartitions=(Struct(topicId="id0", partitions=(0, 1)),))),
        Record(6, Struct(groupId="kip"), 0, Struct(assignmentEpoch=4)),
        Record(8, key, 0, Struct(memberEpoch=3, previousMemberEpoch=2, state=0,
                                 assignedPartitions=(Struct(topicId="id0", partitions=(0,)),),
                                 partitionsPendingRevocation=())),
    ]
    snap = None
    for r in records:
        snap, _ = apply_record(snap, r, T0)
    return summarize(snap, T0)


def scrape(store: MetricsStore):
    """(samples by exposed name → [(labels, value)], HELP by family name, raw text)."""
    text = generate_latest(store.registry).decode()
    samples, helps = defaultdict(list), {}
    for family in text_string_to_metric_families(text):
        helps[family.name] = family.documentation
        for s in family.samples:
            samples[s.name].append((s.labels, s.value))
    return samples, helps, text


def value(samples, name: str, **labels) -> float:
    matches = [v for lab, v in samples[name] if all(lab.get(k) == str(x) for k, x in labels.items())]
    assert len(matches) == 1, (name, labels, samples[name])
    return matches[0]


EXPOSED = {
    "kafka_consumergroup_generation", "kafka_consumergroup_rebalances_total",
    "kafka_consumergroup_last_rebalance_timestamp_seconds", "kafka_consumergroup_members",
    "kafka_consumergroup_info", "kafka_consumergroup_state", "kafka_consumergroup_assigned_partitions",
    "kafka_consumergroup_member_assigned_partitions", "kafka_consumergroup_assignment_imbalance_ratio",
    "kafka_consumergroup_partitions_moved_total", "kafka_consumergroup_committed_offset",
    "kafka_consumergroup_offset_commits_total", "kafka_consumergroup_lag", "kafka_consumergroup_lag_seconds",
    "kafka_topic_partition_log_end_offset", "rebalance_monitor_records_total",
    "rebalance_monitor_decode_errors_total", "rebalance_monitor_skipped_offsets_total",
    "rebalance_monitor_batch_duration_seconds_bucket", "rebalance_monitor_batch_duration_seconds_count",
    "rebalance_monitor_batch_duration_seconds_sum", "rebalance_monitor_input_lag_records",
    "rebalance_monitor_last_batch_timestamp_seconds",
}


@pytest.fixture
def store() -> MetricsStore:
    store = MetricsStore("prod-eu")
    store.update_groups([orders_summary(), kip848_summary()])
    store.set_log_end_offsets({("t0", 0): 100, ("t0", 1): 180}, 1000.0)
    store.set_log_end_offsets({("t0", 0): 200, ("t0", 1): 190}, 1010.0)
    store.add_records({1: 5, 2: 2})
    store.add_records({1: 1, "ConsumerGroupMetadata": 1})
    store.add_decode_errors({"truncated_value": 2})
    store.add_skipped_offsets(3)
    store.observe_batch(0.3, 42, 1_700_000_000.5)
    store.observe_batch(7.0, 40, 1_700_000_010.5)
    return store


def test_every_series_is_named_labelled_and_documented(store):
    samples, helps, text = scrape(store)
    assert set(samples) == EXPOSED
    assert all(doc.strip() for doc in helps.values())
    assert text.count("# HELP ") == len(helps)
    for name, series in samples.items():
        assert all(labels.get("cluster") == "prod-eu" for labels, _ in series), name


def test_group_series(store):
    samples, _, _ = scrape(store)
    g = {"group": "orders"}
    assert value(samples, "kafka_consumergroup_generation", **g) == 2
    assert value(samples, "kafka_consumergroup_rebalances_total", **g) == 1
    assert value(samples, "kafka_consumergroup_last_rebalance_timestamp_seconds", **g) == (T0 + 60_000) / 1000
    assert value(samples, "kafka_consumergroup_members", **g) == 3
    assert value(samples, "kafka_consumergroup_info", group="orders", group_type="classic",
                 protocol_type="consumer", protocol="range", leader="C0") == 1
    assert value(samples, "kafka_consumergroup_state", group="orders", state="Stable") == 1
    assert value(samples, "kafka_consumergroup_assigned_partitions", **g) == 3
    assert value(samples, "kafka_consumergroup_member_assigned_partitions", group="orders", member="i-2",
                 client_id="client-C2", client_host="/10.0.0.7") == 1
    assert value(samples, "kafka_consumergroup_assignment_imbalance_ratio", **g) == 1.0
    assert value(samples, "kafka_consumergroup_partitions_moved_total", **g) == 1
    assert value(samples, "kafka_consumergroup_offset_commits_total", **g) == 5
    k = {"group": "kip"}
    assert value(samples, "kafka_consumergroup_generation", **k) == 4
    assert value(samples, "kafka_consumergroup_state", group="kip", state="Reconciling") == 1
    assert value(samples, "kafka_consumergroup_info", group="kip", group_type="consumer",
                 protocol_type="consumer", protocol="range", leader="") == 1
    assert value(samples, "kafka_consumergroup_assigned_partitions", **k) == 1
    # Never rebalanced since first seen: no timestamp series rather than a fake one.
    assert not [lab for lab, _ in samples["kafka_consumergroup_last_rebalance_timestamp_seconds"]
                if lab["group"] == "kip"]
    assert len([lab for lab, _ in samples["kafka_consumergroup_state"] if lab["group"] == "orders"]) == 1


def test_offset_and_lag_series(store):
    samples, _, _ = scrape(store)
    p0 = {"group": "orders", "topic": "t0", "partition": 0}
    p1 = {"group": "orders", "topic": "t0", "partition": 1}
    assert value(samples, "kafka_consumergroup_committed_offset", **p0) == 150
    assert value(samples, "kafka_consumergroup_lag", **p0) == 50
    # the log end was at 150 at t=1005, half way between the samples
    assert value(samples, "kafka_consumergroup_lag_seconds", **p0) == pytest.approx(5.0)
    assert value(samples, "kafka_consumergroup_lag", **p1) == 0  # committed ahead of the sampled log end
    assert value(samples, "kafka_consumergroup_lag_seconds", **p1) == 0
    assert value(samples, "kafka_topic_partition_log_end_offset", topic="t0", partition=0) == 200
    assert {lab["group"] for lab, _ in samples["kafka_consumergroup_lag"]} == {"orders"}


def test_job_series(store):
    samples, _, _ = scrape(store)
    assert value(samples, "rebalance_monitor_records_total", record_type="OffsetCommit") == 6
    assert value(samples, "rebalance_monitor_records_total", record_type="GroupMetadata") == 2
    assert value(samples, "rebalance_monitor_records_total", record_type="ConsumerGroupMetadata") == 1
    assert value(samples, "rebalance_monitor_decode_errors_total", reason="truncated_value") == 2
    assert value(samples, "rebalance_monitor_skipped_offsets_total") == 3
    assert value(samples, "rebalance_monitor_batch_duration_seconds_count") == 2
    assert value(samples, "rebalance_monitor_batch_duration_seconds_sum") == pytest.approx(7.3)
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="0.5") == 1
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="10.0") == 2
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="+Inf") == 2
    assert value(samples, "rebalance_monitor_input_lag_records") == 40
    assert value(samples, "rebalance_monitor_last_batch_timestamp_seconds") == 1_700_000_010.5


def test_removed_groups_vanish(store):
    assert store.tracked_partitions() == {("t0", 0), ("t0", 1)}
    store.remove_groups(["orders", "never-seen"])
    samples, _, text = scrape(store)
    assert "orders" not in text
    assert not samples["kafka_topic_partition_log_end_offset"]  # nobody tracks t0 any more
    assert store.tracked_partitions() == set()
    assert [s.group for s in store.group_summaries()] == ["kip"]
    assert value(samples, "kafka_consumergroup_generation", group="kip") == 4


def test_updates_replace_a_groups_summary(store):
    updated = orders_summary()
    store.update_groups([type(updated)(**{**updated.__dict__, "rebalances_total": 9})])
    samples, _, _ = scrape(store)
    assert value(samples, "kafka_consumergroup_rebalances_total", group="orders") == 9


def test_empty_store_still_documents_its_families():
    samples, helps, _ = scrape(MetricsStore("c"))
    assert "kafka_consumergroup_rebalances" in helps and "rebalance_monitor_batch_duration_seconds" in helps
    assert value(samples, "rebalance_monitor_skipped_offsets_total") == 0


def test_serve_on_any_port(store):
    port = store.serve("127.0.0.1", 0)
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
        assert 'kafka_consumergroup_rebalances_total{cluster="prod-eu",group="orders"} 1.0' in body
    finally:
        store.close()


def test_concurrent_writers_and_scrapes():
    store = MetricsStore("c")
    summary = orders_summary()
    errors: list[BaseException] = []

    def run(fn):
        try:
            for i in range(200):
                fn(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writers = [
        lambda i: store.update_groups([summary]),
        lambda i: store.remove_groups(["orders"]) if i % 3 == 0 else None,
        lambda i: store.set_log_end_offsets({("t0", 0): 100 + i}, 1000.0 + i),
        lambda i: store.observe_batch(0.01, i, float(i)),
        lambda i: generate_latest(store.registry),
    ]
    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
