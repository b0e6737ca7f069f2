"""``--fold state-store``: the group fold in Spark's state store, on a real broker, against the driver fold.

Real consumer groups rebalance while the job runs and while it is down; the job keeps its groups in the
RocksDB state store, one state partition per offsets-topic partition. After a restart it shows every group
before the first batch (read back from the checkpoint's state store), and its counts and event log are the
driver fold's over the same records.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streaming.driver.fold_mode import FoldModeMismatch
from testbed.workload import Member, start_members, wait_balanced
from tests.support.exposition import Samples, value
from tests.support.monitor_helpers import scrape, start_monitor, wait_for

pytestmark = pytest.mark.slow

STATE_STORE = ("--fold", "state-store")
SHOWN = ("kafka_consumergroup_generation", "kafka_consumergroup_rebalances_total",
         "kafka_consumergroup_current_members", "kafka_consumergroup_assigned_partitions",
         "kafka_consumergroup_empty_transitions_total", "kafka_consumergroup_partitions_moved_total")


@pytest.fixture
def session_conf(spark) -> Iterator[None]:
    """The shared session's settings the state-store runner sets, put back for the tests after this one."""
    names = ("spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.providerClass")
    before = {name: spark.conf.get(name, None) for name in names}
    yield
    for name, was in before.items():
        if was is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, was)


def shown(samples: Samples, groups: tuple[str, ...]) -> dict[tuple[str, str], float | None]:
    return {(name, g): value(samples, name, group=g) for name in SHOWN for g in groups}


def test_state_store_fold_restarts_and_counts_as_the_driver_fold(spark, kafka_broker, admin, members, unique,
                                                                 tmp_path, session_conf):
    prefix = f"tws-{unique}"
    topic = f"{prefix}-t"
    admin.create_topic(topic, 4)
    parts = [(topic, p) for p in range(4)]
    busy, idle = f"{prefix}-busy", f"{prefix}-idle"
    crew = {g: [Member(kafka_broker.bootstrap, g, [topic], f"{g}-C{i}") for i in range(2)] for g in (busy, idle)}
    members.extend(m for ms in crew.values() for m in ms)
    for ms in crew.values():
        start_members(ms)
    for ms in crew.values():
        wait_balanced(ms, parts)
    job_args = ("--include-groups", f"^{prefix}-", *STATE_STORE)

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, *job_args)
    try:
        assert spark.conf.get("spark.sql.shuffle.partitions") == "50"  # one per offsets-topic partition
        wait_for(job, lambda s: all(value(s, "kafka_consumergroup_generation", group=g) == crew[g][0].generation
                                    for g in (busy, idle)), "both groups' baselines", timeout=180)
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

    crew[busy].pop(0).leave()  # while the job is down
    wait_balanced(crew[busy], parts)
    generation_after_downtime = crew[busy][0].generation

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, *job_args)
    try:
        # Read back from the state store before the first batch: the idle group wrote nothing since.
        first = scrape(job)
        assert value(first, "kafka_consumergroup_generation", group=idle) == idle_generation
        samples = wait_for(job, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == generation_after_downtime, "the rebalance that happened while down")
        assert value(samples, "kafka_consumergroup_rebalances_total", group=busy) == rebalances_before + 1
        by_state_store = shown(samples, (busy, idle))
    finally:
        job.stop()
    events = job.event_log.read(busy)
    transitions = [(e.old_generation, e.new_generation) for e in events]
    assert len(transitions) == len(set(transitions)) == rebalances_before + 1
    assert events[: len(events_before)] == events_before

    # The same checkpoint with the other fold is refused, naming both.
    with pytest.raises(FoldModeMismatch, match="--fold state-store"):
        start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--include-groups", f"^{prefix}-")

    # The driver fold over the same records, from a checkpoint of its own, shows the same.
    driver = start_monitor(spark, kafka_broker.bootstrap, tmp_path / "driver", "--include-groups", f"^{prefix}-")
    try:
        samples = wait_for(driver, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == generation_after_downtime, "the driver fold's catch-up")
        assert shown(samples, (busy, idle)) == by_state_store
        assert None not in by_state_store.values()
    finally:
        driver.stop()
    assert driver.event_log.read(busy) == events
