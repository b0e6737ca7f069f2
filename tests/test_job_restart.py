"""Stopping the job and restarting it from its checkpoint: nothing duplicated, nothing lost."""

from __future__ import annotations

import pytest

from testbed.workload import Member, start_members, wait_balanced
from tests.monitor_helpers import start_monitor, value, wait_for

pytestmark = pytest.mark.slow


def test_restart_from_checkpoint(spark, kafka_broker, admin, members, unique, tmp_path):
    prefix = f"restart-{unique}"
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
    job_args = ("--include-groups", f"^{prefix}-")

    job = start_monitor(spark, kafka_broker.bootstrap, tmp_path, *job_args)
    try:
        wait_for(job, lambda s: all(value(s, "kafka_consumergroup_generation", group=g) == crew[g][0].generation
                                    for g in (busy, idle)), "both groups' baselines")
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
        first = wait_for(job, lambda s: value(s, "kafka_consumergroup_generation", group=idle) is not None,
                         "restored series")
        assert value(first, "kafka_consumergroup_generation", group=idle) == idle_generation
        samples = wait_for(job, lambda s: value(s, "kafka_consumergroup_generation", group=busy)
                           == generation_after_downtime, "the rebalance that happened while down")
        assert value(samples, "kafka_consumergroup_rebalances_total", group=busy) == rebalances_before + 1
        assert value(samples, "kafka_consumergroup_generation", group=idle) == idle_generation
    finally:
        job.stop()
    events = job.event_log.read(busy)
    transitions = [(e.old_generation, e.new_generation) for e in events]
    assert len(transitions) == len(set(transitions)) == rebalances_before + 1
    assert transitions[-1][1] == generation_after_downtime
    assert events[: len(events_before)] == events_before
