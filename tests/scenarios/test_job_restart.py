"""Stopping the job and restarting it from its checkpoint: nothing duplicated, nothing lost."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator

import pytest

from benchmarks.synthetic import Workload, backlog, produce
from decoders import decode
from streaming.decode.config import JOB_GROUP_PREFIX
from streaming.driver.fold_mode import FoldModeMismatch
from streaming.driver.state_query import SESSION_SETTINGS
from streaming.logs.dead_letters import print_dead_letters
from testbed.workload import Member, wait_balanced, wait_until
from tests.support.decoder_encoder import encode_key
from tests.support.exposition import series, value
from tests.support.monitor_helpers import busy_and_idle, scrape, start_monitor, wait_for

pytestmark = pytest.mark.slow


SHOWN = ("kafka_consumergroup_generation", "kafka_consumergroup_rebalances_total",
         "kafka_consumergroup_current_members", "kafka_consumergroup_assigned_partitions",
         "kafka_consumergroup_empty_transitions_total", "kafka_consumergroup_partitions_moved_total")


@pytest.fixture
def session_conf(spark) -> Iterator[None]:
    """The shared session's settings the state-store fold sets, put back for the tests after this one."""
    before = {name: spark.conf.get(name, None) for name in SESSION_SETTINGS}
    yield
    for name, was in before.items():
        if was is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, was)


@pytest.mark.parametrize("fold", ["driver", "state-store"])
def test_restart_from_checkpoint(spark, kafka_broker, admin, members, unique, tmp_path, session_conf, fold):
    """Groups rebalance while the job runs and while it is down; after the restart every group is shown
    before the first batch and nothing is counted twice. With the state-store fold the groups are read back
    from Spark's state store, the checkpoint refuses the driver fold, and a driver fold over the same records
    shows the same and logs the same events."""
    prefix = f"restart-{fold}-{unique}"
    busy, idle = f"{prefix}-busy", f"{prefix}-idle"
    topic, parts, crew = busy_and_idle(kafka_broker.bootstrap, admin, members, prefix)
    fold_args = ("--fold", fold)
    job_args = ("--include-groups", f"^{prefix}-", *fold_args)

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, *job_args)
    try:
        wait_for(job, lambda s: all(value(s, "kafka_consumergroup_generation", group=g) == crew[g][0].generation
                                    for g in (busy, idle)), "both groups' baselines", timeout=180)
        if fold == "state-store":
            assert spark.conf.get("spark.sql.shuffle.partitions") == "50"  # one per offsets-topic partition
        crew[busy].append(Member(kafka_broker.bootstrap, busy, [topic], f"{busy}-C2").start())
        members.append(crew[busy][-1])
        wait_balanced(crew[busy], parts)
        samples = wait_for(job, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == crew[busy][0].generation, "a rebalance before the stop")
        rebalances_before = value(samples, "kafka_consumergroup_rebalances_total", group=busy)
        idle_generation = value(samples, "kafka_consumergroup_generation", group=idle)
    finally:
        job.stop()
    events_before = job.event_log.read(busy)
    assert len(events_before) == rebalances_before >= 1

    # While the job is down, the busy group rebalances again.
    crew[busy].pop(0).leave()
    wait_balanced(crew[busy], parts)
    generation_after_downtime = crew[busy][0].generation

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, *job_args)
    try:
        # The idle group wrote nothing new, yet its gauges are there as soon as the job serves.
        first = scrape(job)
        assert value(first, "kafka_consumergroup_generation", group=idle) == idle_generation
        samples = wait_for(job, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == generation_after_downtime, "the rebalance that happened while down")
        assert value(samples, "kafka_consumergroup_rebalances_total", group=busy) == rebalances_before + 1
        assert value(samples, "kafka_consumergroup_generation", group=idle) == idle_generation
        after_restart = {(name, g): value(samples, name, group=g) for name in SHOWN for g in (busy, idle)}
    finally:
        job.stop()
    events = job.event_log.read(busy)
    transitions = [(e.old_generation, e.new_generation) for e in events]
    assert len(transitions) == len(set(transitions)) == rebalances_before + 1
    assert transitions[-1][1] == generation_after_downtime
    assert events[: len(events_before)] == events_before

    # Restarted with a narrower filter (Java regex, as rlike runs it): the restored idle group is left out.
    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--include-groups", f"^\\Q{busy}\\E$", *fold_args)
    try:
        restored = scrape(job)
        assert value(restored, "kafka_consumergroup_generation", group=busy) == generation_after_downtime
        assert value(restored, "kafka_consumergroup_generation", group=idle) is None
    finally:
        job.stop()
    if fold == "driver":
        return

    with pytest.raises(FoldModeMismatch, match="--fold state-store"):  # the checkpoint keeps its fold
        start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--include-groups", f"^{prefix}-")
    driver = start_monitor(spark, kafka_broker.bootstrap, tmp_path / "driver", "--include-groups", f"^{prefix}-")
    try:
        samples = wait_for(driver, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == generation_after_downtime, "the driver fold's catch-up")
        assert {(name, g): value(samples, name, group=g) for name in SHOWN for g in (busy, idle)} == after_restart
        assert None not in after_restart.values()
    finally:
        driver.stop()
    assert driver.event_log.read(busy) == events


def test_restart_after_a_w1_shaped_topic_reports_exactly_what_it_did(spark, kafka_broker, admin, tmp_path, unique):
    """200 groups x 50 partitions, a generation every 100 commits, written in two halves (the second
    batch compacts the state into a snapshot); a restart serves the same offsets and counters at once."""
    topic = f"w1-shaped-{unique}"
    admin.create_topic(topic, 50)
    shape = Workload(groups=200, partitions=50, records=40_000, generation_every=100)
    records = list(backlog(shape, int(time.time() * 1000)))
    expected_offsets: dict[tuple[str, str, str], float] = {}
    generations: dict[str, int] = {}
    for _, key, raw in records:
        decoded = decode(key, raw)
        if decoded.record_type == 2:
            generations[decoded.group] = decoded.value.generation
        else:
            k = decoded.key
            expected_offsets[(decoded.group, k.topic, str(k.partition))] = decoded.value.offset
    half = len(records) // 2
    # Hostile records in the second half: counted and kept as dead letters; every valid one still applies.
    hostile = [(0, b"\x00\x63junk", b"x"), (1, b"\x00", b"y"),
               (2, encode_key(2, {"group": "bench-group-0"}), b"\x00\x03\xff")]
    records[half:half] = hostile
    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--topic", topic)
    # snapshot at every chance: the restart reads a snapshot and the deltas after it
    job.runner.state_store.compact_min_rows, job.runner.state_store.compact_factor = 0, 0.0
    try:
        produce(kafka_broker.bootstrap, topic, iter(records[:half]))
        wait_for(job, lambda s: (value(s, "rebalance_monitor_records_total", record_type="OffsetCommit") or 0)
                 + (value(s, "rebalance_monitor_records_total", record_type="GroupMetadata") or 0) == half,
                 "the first half")
        produce(kafka_broker.bootstrap, topic, iter(records[half:]))
        before = wait_for(job, lambda s: _committed(s) == expected_offsets, "every commit of the topic")
    finally:
        job.stop()
    assert any(p.name.startswith("snapshot-") for p in (tmp_path / "checkpoint" / "monitor" / "state").iterdir())
    assert series(before, "rebalance_monitor_decode_errors_total") == {
        frozenset({("cluster", "test"), ("reason", reason)}): 1.0
        for reason in ("unknown_record_type", "truncated_key", "truncated_value")}
    printed = io.StringIO()
    assert print_dead_letters(tmp_path / "checkpoint" / "monitor" / "dead-letters", printed) == 3
    assert f"{topic}-0@" in printed.getvalue() and "key=00636a756e6b" in printed.getvalue()
    for group, generation in generations.items():
        assert value(before, "kafka_consumergroup_generation", group=group) == generation
        assert value(before, "kafka_consumergroup_rebalances_total", group=group) == generation - 1
    counters = ("kafka_consumergroup_rebalances_total", "kafka_consumergroup_partitions_moved_total",
                "kafka_consumergroup_offset_commits_total", "kafka_consumergroup_generation",
                "kafka_consumergroup_current_members")

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--topic", topic)
    try:
        restored = scrape(job)  # served from the checkpoint before any batch runs
        assert _committed(restored) == expected_offsets
        for name in counters:
            assert series(restored, name) == series(before, name), name
        time.sleep(5)  # triggers come and go: nothing is read again, nothing counted twice
        later = scrape(job)
        for name in counters:
            assert series(later, name) == series(before, name), name
    finally:
        job.stop()
    events = job.event_log.read()
    assert len(events) == len({(e.group, e.new_generation) for e in events}) == sum(
        generation - 1 for generation in generations.values())


def test_a_checkpoint_begun_by_subscribe_resumes_by_assign_and_joins_no_group(spark, kafka_broker, admin, tmp_path,
                                                                               unique, caplog):
    """The topic is not there at the first start: the source subscribes (its consumer joins a group) and waits
    for it. The restart finds the topic's partitions and assigns them, resuming the same checkpoint: every
    record counted once, and no consumer group of the source's own."""
    topic = f"assign-{unique}"
    shape = Workload(groups=30, partitions=4, records=900, generation_every=6, topic_partitions=1)
    records = list(backlog(shape, int(time.time() * 1000)))
    generations = {d.group: d.value.generation for d in (decode(k, v) for _, k, v in records) if d.record_type == 2}
    halves = records[:450], records[450:]

    def job_groups() -> set[str]:
        return {g["group_id"] for g in admin.client.list_groups() if g["group_id"].startswith(JOB_GROUP_PREFIX)}

    def counted(samples) -> float:
        return sum(value(samples, "rebalance_monitor_records_total", record_type=kind) or 0
                   for kind in ("OffsetCommit", "GroupMetadata"))

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--topic", topic)
    try:
        # The subscribing consumer's metadata request makes the topic, with one partition (the broker's
        # auto.create.topics.enable and num.partitions).
        wait_until(lambda: topic in admin.client.list_topics(), 60, f"the source to make {topic}")
        produce(kafka_broker.bootstrap, topic, iter(halves[0]))
        before = wait_for(job, lambda s: counted(s) == len(halves[0]), "the first half")
        subscribed = job_groups()
        assert subscribed, "the subscribed source's consumer group, listed while it runs"
    finally:
        job.stop()
    produce(kafka_broker.bootstrap, topic, iter(halves[1]))  # while the job is down

    caplog.set_level(logging.INFO, logger="rebalance_monitor")
    present = job_groups()
    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--topic", topic)
    try:
        # The records counter is the process's own (it starts at 0); the groups' counters carry on.
        after = wait_for(job, lambda s: counted(s) == len(halves[1]), "the second half")
        time.sleep(3)  # more triggers: nothing read again
        later = scrape(job)
        assert job_groups() <= present, "the assigned source joined a group"
    finally:
        job.stop()
    assert f"reading topic {topic} by assign (1 partitions" in caplog.text
    assert counted(later) == len(halves[1]) and counted(before) == len(halves[0])
    for group, generation in generations.items():
        assert value(later, "kafka_consumergroup_generation", group=group) == generation
        assert value(later, "kafka_consumergroup_rebalances_total", group=group) == generation - 1
    assert sum(value(after, "kafka_consumergroup_offset_commits_total", group=g) or 0 for g in generations) == \
        sum(1 for _, k, v in records if decode(k, v).record_type == 1)


def _committed(samples) -> dict[tuple[str, str, str], float]:
    committed = series(samples, "kafka_consumergroup_committed_offset")
    rows = ((dict(labels), v) for labels, v in committed.items())
    return {(labels["group"], labels["topic"], labels["partition"]): v
            for labels, v in rows if labels["group"].startswith("bench-group-")}
