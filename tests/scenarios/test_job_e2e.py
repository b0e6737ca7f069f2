"""End to end: real broker, real consumer groups, the real Spark job, its real /metrics."""

from __future__ import annotations

import io
import json
import time

import pytest

from streaming.advisor.command import advise_command
from streaming.decode.checkpoint import checkpoint_offsets
from streaming.decode.tasks import batch_ranges
from streaming.groups.store import load_snapshot
from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until
from tests.support.exposition import series, value
from tests.support.monitor_helpers import owner_changes, wait_for, wait_generation

pytestmark = pytest.mark.slow


def _topics(admin: Admin, prefix: str, count: int, partitions: int) -> tuple[list[str], list[tuple[str, int]]]:
    names = [f"{prefix}-t{i}" for i in range(count)]
    for name in names:
        admin.create_topic(name, partitions)
    return names, [(t, p) for t in names for p in range(partitions)]


def _per_client(samples, group: str) -> dict[str, float]:
    return {dict(ls)["client_id"]: v for ls, v in
            series(samples, "kafka_consumergroup_member_assigned_partitions", group=group).items()}


def _start(members, bootstrap, group, topics, names, **kwargs) -> list[Member]:
    crew = [Member(bootstrap, group, topics, name, **kwargs) for name in names]
    members.extend(crew)
    return start_members(crew)


def test_seed_range_example_then_join_and_crash(kafka_broker, admin, monitor, members, unique):
    """Two range consumers on t0, t1 (3 partitions each): C0 gets 4, C1 gets 2."""
    group = f"range-{unique}"
    topics, parts = _topics(admin, f"range-{unique}", 2, 3)
    crew = _start(members, kafka_broker.bootstrap, group, topics, ["C0", "C1"])
    before = wait_balanced(crew, parts)
    generation = crew[0].generation
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_generation", group=group) == generation
                       and value(s, "kafka_consumergroup_current_members", group=group) == 2, "range group baseline")
    assert _per_client(samples, group) == {"C0": 4, "C1": 2}
    assert value(samples, "kafka_consumergroup_assignment_imbalance_ratio", group=group) == pytest.approx(4 / 3)
    assert value(samples, "kafka_consumergroup_assigned_partitions", group=group) == 6
    assert value(samples, "kafka_consumergroup_info", group=group, group_type="classic", protocol="range",
                 protocol_type="consumer") == 1
    assert value(samples, "kafka_consumergroup_state", group=group, state="Stable") == 1
    rebalances = value(samples, "kafka_consumergroup_rebalances_total", group=group)
    moved = value(samples, "kafka_consumergroup_partitions_moved_total", group=group)
    advanced = value(samples, "kafka_consumergroup_generations_advanced_total", group=group)
    # The advisor reads the group from the running job's checkpoint, as of the last batch Spark
    # committed (a batch behind /metrics at most): range gives 4/2, round-robin 3/3.
    def advice() -> str:
        out = io.StringIO()
        advise_command(["--group", group, "--checkpoint-dir", str(monitor.options.driver.checkpoint_dir)],
                       load=load_snapshot, out=out)
        return out.getvalue()

    wait_until(lambda: "2 member(s)" in advice(), 30, "the checkpoint to hold the two-member generation")
    rows = {line.split()[0]: line for line in advice().splitlines() if line.split()}
    assert "1.33" in rows["range"] and "1.00" in rows["roundrobin"], advice()

    crew += _start(members, kafka_broker.bootstrap, group, topics, ["C2"])
    after = wait_balanced(crew, parts)
    new_generation = crew[0].generation
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_generation", group=group) == new_generation,
                       "the join's generation")
    # One rebalance per completed assignment (each an event in the log); Kafka's raw steps go to their own counter.
    joined = [e for e in monitor.event_log.read(group) if e.new_generation > generation]
    assert value(samples, "kafka_consumergroup_rebalances_total", group=group) == rebalances + len(joined)
    assert joined
    assert "members_joined" in joined[0].causes
    assert value(samples, "kafka_consumergroup_generations_advanced_total", group=group) - advanced == (
        new_generation - generation)
    assert value(samples, "kafka_consumergroup_partitions_moved_total", group=group) == moved + owner_changes(
        before, after)
    assert value(samples, "kafka_consumergroup_current_members", group=group) == 3
    assert _per_client(samples, group) == {c: len(p) for c, p in after.items()}

    rebalances = value(samples, "kafka_consumergroup_rebalances_total", group=group)
    crew[0].crash()  # no LeaveGroup: only the 10 s session timeout notices
    survivors = wait_balanced(crew[1:], parts, timeout=60)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 2,
                       "the crashed member's removal")
    assert value(samples, "kafka_consumergroup_rebalances_total", group=group) >= rebalances + 1
    assert _per_client(samples, group) == {c: len(p) for c, p in survivors.items()}


def test_seed_roundrobin_is_even(kafka_broker, admin, monitor, members, unique):
    group = f"rr-{unique}"
    topics, parts = _topics(admin, f"rr-{unique}", 2, 3)
    crew = _start(members, kafka_broker.bootstrap, group, topics, ["C0", "C1"], assignor="roundrobin")
    wait_balanced(crew, parts)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 2
                       and value(s, "kafka_consumergroup_assigned_partitions", group=group) == 6, "roundrobin group")
    assert _per_client(samples, group) == {"C0": 3, "C1": 3}
    assert value(samples, "kafka_consumergroup_assignment_imbalance_ratio", group=group) == 1.0


@pytest.mark.parametrize("assignor", ["sticky", "roundrobin"])
def test_seed_sticky_example_member_leaves(kafka_broker, admin, monitor, members, unique, assignor):
    """3 consumers, 4 topics x 2 partitions; C1 leaves. Sticky moves exactly C1's partitions."""
    group = f"{assignor}-leave-{unique}"
    topics, parts = _topics(admin, f"{assignor}-leave-{unique}", 4, 2)
    crew = _start(members, kafka_broker.bootstrap, group, topics, ["C0", "C1", "C2"], assignor=assignor)
    before = wait_balanced(crew, parts)
    samples = wait_generation(monitor, group, crew[0], f"{assignor} group", members=3)
    moved = value(samples, "kafka_consumergroup_partitions_moved_total", group=group)
    generation = crew[0].generation

    crew[1].leave()
    after = wait_balanced([crew[0], crew[2]], parts)
    after["C1"] = frozenset()
    samples = wait_generation(monitor, group, crew[0], "the leave's generation", members=2)
    moved_now = value(samples, "kafka_consumergroup_partitions_moved_total", group=group) - moved
    assert moved_now == owner_changes(before, after)
    if assignor == "sticky":
        assert moved_now == len(before["C1"])
    else:
        assert moved_now > len(before["C1"])
    assert crew[0].generation == generation + 1


def test_cooperative_sticky_join(kafka_broker, admin, monitor, members, unique):
    group = f"coop-{unique}"
    topics, parts = _topics(admin, f"coop-{unique}", 1, 6)
    crew = _start(members, kafka_broker.bootstrap, group, topics, ["C0", "C1"], assignor="cooperative-sticky")
    before = wait_balanced(crew, parts)
    samples = wait_generation(monitor, group, crew[0], "cooperative group")
    moved = value(samples, "kafka_consumergroup_partitions_moved_total", group=group)
    rebalances = value(samples, "kafka_consumergroup_rebalances_total", group=group)
    generation = crew[0].generation
    crew += _start(members, kafka_broker.bootstrap, group, topics, ["C2"], assignor="cooperative-sticky")
    after = wait_balanced(crew, parts, settle=3)
    samples = wait_generation(monitor, group, crew[0], "cooperative join")
    # Incremental rebalancing: revoke first, assign in a follow-up generation; only real owner changes count.
    assert value(samples, "kafka_consumergroup_partitions_moved_total", group=group) - moved == owner_changes(
        before, after) == 2
    # The revoke round and the assign round are two completed assignments: two rebalances.
    events = [e for e in monitor.event_log.read(group) if e.new_generation > generation]
    assert value(samples, "kafka_consumergroup_rebalances_total", group=group) - rebalances == len(events) == (
        crew[0].generation - generation)


def test_static_member_restart_is_not_a_rebalance(kafka_broker, admin, monitor, members, unique):
    group = f"static-{unique}"
    topics, parts = _topics(admin, f"static-{unique}", 1, 4)
    crew = [Member(kafka_broker.bootstrap, group, topics, f"S{i}", instance_id=f"instance-{i}",
                   session_timeout_ms=20000) for i in range(2)]
    members.extend(crew)
    start_members(crew)
    before = wait_balanced(crew, parts)
    samples = wait_generation(monitor, group, crew[0], "static group")
    rebalances = value(samples, "kafka_consumergroup_rebalances_total", group=group)
    moved = value(samples, "kafka_consumergroup_partitions_moved_total", group=group)
    generation = crew[0].generation
    old_member_id = crew[1].member_id

    crew[1].crash()  # well inside the 20 s session timeout, the same instance id comes back
    restarted = Member(kafka_broker.bootstrap, group, topics, "S1", instance_id="instance-1",
                       session_timeout_ms=20000).start()
    members.append(restarted)
    wait_until(lambda: restarted.member_id is not None and restarted.member_id != old_member_id, 60,
               "the static member's return")
    assert wait_balanced([crew[0], restarted], parts) == before
    samples = wait_for(monitor, lambda s: any(
        dict(ls)["member"] == "instance-1" for ls in
        series(s, "kafka_consumergroup_member_assigned_partitions", group=group)), "static member series")
    # Same generation, nothing moved; the member keeps its instance-id series.
    assert value(samples, "kafka_consumergroup_generation", group=group) == generation
    assert value(samples, "kafka_consumergroup_rebalances_total", group=group) == rebalances
    assert value(samples, "kafka_consumergroup_partitions_moved_total", group=group) == moved
    assert restarted.generation == generation


def test_kip848_group_epochs_members_and_topic_names(kafka_broker, admin, monitor, members, unique, kip848):
    group = f"kip848-{unique}"
    topics, parts = _topics(admin, f"kip848-{unique}", 1, 4)
    crew = _start(members, kafka_broker.bootstrap, group, topics, ["K0", "K1"], protocol="consumer")
    wait_balanced(crew, parts)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 2
                       and value(s, "kafka_consumergroup_assigned_partitions", group=group) == 4
                       and value(s, "kafka_consumergroup_state", group=group, state="Stable") == 1, "KIP-848 group")
    assert value(samples, "kafka_consumergroup_info", group=group, group_type="consumer") == 1
    assert _per_client(samples, group) == {"K0": 2, "K1": 2}
    epoch = value(samples, "kafka_consumergroup_generation", group=group)
    rebalances = value(samples, "kafka_consumergroup_rebalances_total", group=group)

    crew += _start(members, kafka_broker.bootstrap, group, topics, ["K2"], protocol="consumer")
    after = wait_balanced(crew, parts)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_current_members", group=group) == 3
                       and value(s, "kafka_consumergroup_state", group=group, state="Stable") == 1
                       and _per_client(s, group) == {c: len(p) for c, p in after.items()}, "KIP-848 join")
    new_epoch = value(samples, "kafka_consumergroup_generation", group=group)
    assert new_epoch > epoch
    # Kafka 4.3 may merge epoch bumps: count completed target assignments (events), not the epoch delta.
    events = [e for e in monitor.event_log.read(group) if e.new_generation > epoch]
    assert value(samples, "kafka_consumergroup_rebalances_total", group=group) == rebalances + len(events) >= (
        rebalances + 1)
    moved = [tp for e in events for tp in e.moved_partitions]
    assert moved, "a third member must take partitions over"
    assert all(topic == topics[0] for topic, _ in moved)


def test_lag_matches_log_end_minus_committed(kafka_broker, admin, monitor, unique):
    group, topic = f"lag-{unique}", f"lag-{unique}"
    admin.create_topic(topic, 3)
    for partition, count in enumerate((30, 20, 10)):
        admin.produce(topic, count, partition=partition)
    admin.commit(group, {(topic, 0): 5, (topic, 1): 20, (topic, 2): 0})

    def lag_complete(s) -> bool:
        # Time lag needs the timestamp of the record at the committed offset, read at a scrape: a scrape can
        # show the offset lag before it (seen once in a whole run), so wait for the time lag asserted below too.
        return len(series(s, "kafka_consumergroup_partition_lag", group=group)) == 3 and all(
            value(s, "kafka_consumergroup_partition_lag_seconds", group=group, topic=topic, partition=p) is not None
            for p in ("0", "1"))

    samples = wait_for(monitor, lag_complete, "lag series")
    ends = admin.end_offsets([(topic, p) for p in range(3)])
    committed = admin.group_offsets(group)
    for partition in range(3):
        expected = ends[(topic, partition)] - committed[(topic, partition)]
        assert value(samples, "kafka_consumergroup_partition_lag", group=group, topic=topic,
                     partition=str(partition)) == expected
        assert value(samples, "kafka_topic_partition_log_end_offset", topic=topic,
                     partition=str(partition)) == ends[(topic, partition)]
    assert value(samples, "kafka_consumergroup_partition_lag_seconds", group=group, topic=topic, partition="1") == 0
    assert value(samples, "kafka_consumergroup_partition_lag_seconds", group=group, topic=topic, partition="0") >= 0

    admin.produce(topic, 7, partition=1)
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_partition_lag", group=group, topic=topic,
                                                partition="1") == 7, "lag after producing 7 more")
    assert value(samples, "kafka_consumergroup_committed_offset", group=group, topic=topic, partition="1") == 20


def test_job_reports_its_own_progress(monitor, admin, unique):
    """Each micro-batch feeds the job's own metrics: duration, time of the last batch, input lag."""
    topic = f"progress-{unique}"
    admin.create_topic(topic, 1)
    admin.commit(topic, {(topic, 0): 0})  # a record for the job to read, whatever ran before
    samples = wait_for(monitor, lambda s: (value(s, "rebalance_monitor_batch_duration_seconds_count") or 0) > 0
                       and value(s, "rebalance_monitor_input_lag_records") is not None, "batch progress metrics")
    assert value(samples, "rebalance_monitor_last_batch_timestamp_seconds") > time.time() - 120
    assert value(samples, "rebalance_monitor_input_lag_records") >= 0
    assert value(samples, "rebalance_monitor_records_total", record_type="OffsetCommit") > 0


def test_each_batch_is_sized_from_the_offset_ranges_spark_reads(monitor, admin, unique):
    """The decode's task count is chosen from the offset ranges Spark's checkpoint says a batch reads: the ranges
    Spark's own progress reports for the same batch, and never fewer than the records it read."""
    topic = f"sizing-{unique}"
    admin.create_topic(topic, 1)
    checkpoint = monitor.options.driver.checkpoint_dir / "spark"
    deadline = time.monotonic() + 90
    while True:
        admin.commit(topic, {(topic, 0): 0})
        time.sleep(2)
        progress = monitor.query.lastProgress
        if progress is not None and progress.sources[0].numInputRows > 0:
            break
        assert time.monotonic() < deadline, "no batch read a record"
    source = progress.sources[0]
    start, end = json.loads(source.startOffset), json.loads(source.endOffset)
    ranges = sum(offset - start.get(t, {}).get(p, 0) for t, parts in end.items() for p, offset in parts.items())
    sized = batch_ranges(checkpoint, progress.batchId)
    assert sized is not None and (sum(sized), len(sized)) == (ranges, sum(len(parts) for parts in end.values()))
    assert source.numInputRows <= ranges
    # A checkpoint's first batch starts at the source's initial offsets, in their own file's format.
    assert {topic for topic, _ in checkpoint_offsets(checkpoint, None) or {}} == {"__consumer_offsets"}
