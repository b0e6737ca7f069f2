"""The live group state on a real broker with real clients, seen by a real Prometheus.

A classic group of two kafka-python members (max.poll.interval.ms 30 s, shortened from the
issue's 90 s to keep the run short: the rebalance timeout scales the wait and the alert's
threshold alike); one stops polling while its heartbeat thread lives on, a third joins. Kafka
holds the whole group in PreparingRebalance until the stalled member's rebalance timeout runs
out. The monitor must show PreparingRebalance within 30 s of the join and for the rest of the
wait, then Stable; the shipped GroupRebalanceStuck rule must fire in Prometheus meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.broker import LocalKafka
from testbed.prometheus import LocalPrometheus
from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until
from tests.support.exposition import series, value
from tests.support.lag_helpers import record_timestamp
from tests.support.monitor_helpers import scrape, start_monitor, wait_for

pytestmark = pytest.mark.slow

MAX_POLL_MS = 30_000
LIVE_POLL_SECONDS = 2


@pytest.fixture(scope="module")
def live_scene(spark: Any, kafka_broker: LocalKafka, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[Any, LocalPrometheus, str]]:
    work = tmp_path_factory.mktemp("live-e2e")
    prefix = f"live-{work.name.replace('_', '-')}"
    monitor = start_monitor(spark, kafka_broker.bootstrap, work, "--cluster", "live",
                            "--include-groups", f"^{prefix}-.*", "--live-poll-seconds", str(LIVE_POLL_SECONDS))
    prometheus = LocalPrometheus(work / "prometheus", [f"127.0.0.1:{monitor.metrics_port}"],
                                 scrape_interval="1s", evaluation_interval="1s")
    try:
        prometheus.start()
        yield monitor, prometheus, prefix
    finally:
        monitor.stop()
        prometheus.stop()


def state_of(samples: dict, group: str) -> list[str]:
    return sorted(dict(labels)["state"] for labels in series(samples, "kafka_consumergroup_state", group=group))


def stable_group(kafka_broker: LocalKafka, admin: Admin, members: list[Member], group: str, topic: str,
                 size: int) -> list[Member]:
    """``size`` classic members (rebalance timeout MAX_POLL_MS) balanced over ``2 * size`` partitions of
    ``topic``, which holds records."""
    admin.create_topic(topic, 2 * size)
    admin.produce(topic, 100 * size)
    started = start_members(Member(kafka_broker.bootstrap, group, [topic], f"{group}-c{i}",
                                   max_poll_interval_ms=MAX_POLL_MS) for i in range(size))
    members += started
    wait_balanced(started, [(topic, p) for p in range(2 * size)])
    return started


def long_rebalances(samples: dict, group: str) -> float:
    """Observed rebalances of ``group`` longer than 10 s (the histogram's +Inf count minus its 10 s bucket)."""
    name = "kafka_consumergroup_observed_rebalance_duration_seconds_bucket"
    return (value(samples, name, group=group, le="+Inf") or 0) - (value(samples, name, group=group, le="10.0") or 0)


def test_a_stuck_classic_rebalance_is_shown_live_and_alerted(live_scene, kafka_broker: LocalKafka, admin: Admin,
                                                             members: list[Member]) -> None:
    monitor, prometheus, prefix = live_scene
    group, topic = f"{prefix}-stuck", f"{prefix}-t"
    first = stable_group(kafka_broker, admin, members, group, topic, 2)
    wait_for(monitor, lambda s: state_of(s, group) == ["Stable"]
             and value(s, "kafka_consumergroup_rebalance_timeout_seconds", group=group) == MAX_POLL_MS / 1000,
             "the group Stable, with its rebalance timeout")

    # The group's forming may itself be observed as a (short) rebalance, and only at the live poll after the
    # offsets topic's generation showed Stable (which can come after this scrape): what is looked for below
    # is an observation longer than 10 s, which the forming is not.
    before = scrape(monitor)
    long_before = long_rebalances(before, group)
    sum_before = value(before, "kafka_consumergroup_observed_rebalance_duration_seconds_sum", group=group) or 0
    first[1].stop_polling()
    # Only once its poll in flight has returned does it miss the rebalance the joiner starts.
    wait_until(lambda: first[1].stalled, 30, "the member to stop polling")
    joiner = Member(kafka_broker.bootstrap, group, [topic], f"{group}-c2", max_poll_interval_ms=MAX_POLL_MS).start()
    members.append(joiner)
    joined_at = time.monotonic()
    seen: list[tuple[float, list[str]]] = []
    fired_at = None
    verdicts: set[tuple[str, str]] = set()
    while time.monotonic() - joined_at < 3 * MAX_POLL_MS / 1000:
        samples = scrape(monitor)
        states = state_of(samples, group)
        seen.append((time.monotonic() - joined_at, states))
        verdicts |= {(dict(labels)["status"], dict(labels)["reason"])
                     for labels in series(samples, "kafka_consumergroup_health", group=group)}
        if fired_at is None and any(a["labels"].get("group") == group and a["state"] == "firing"
                                    for a in prometheus.alerts("GroupRebalanceStuck")):
            fired_at = time.monotonic() - joined_at
        if joiner.joined and states == ["Stable"] and fired_at is not None:
            break
        time.sleep(0.5)
    rebalancing = [t for t, states in seen if states == ["PreparingRebalance"]]
    completed_at = next((t for t, states in seen if states == ["Stable"] and rebalancing and t > rebalancing[0]),
                        None)
    assert all(len(states) == 1 for _, states in seen), f"two states shown at once: {seen}"
    assert rebalancing and rebalancing[0] <= 30, f"PreparingRebalance not shown within 30 s of the join: {seen}"
    assert completed_at is not None and joiner.joined, f"never Stable again: {seen}"
    # From its first sight to the completion, nothing but the rebalance's own states.
    during = [states[0] for t, states in seen if rebalancing[0] <= t < completed_at]
    assert set(during) <= {"PreparingRebalance", "CompletingRebalance"}, seen
    assert completed_at - rebalancing[0] > MAX_POLL_MS / 1000 / 2, f"the wait was not seen whole: {seen}"
    print(f"join +{rebalancing[0]:.1f}s PreparingRebalance shown, +{fired_at}s GroupRebalanceStuck firing, "
          f"+{completed_at:.1f}s Stable")
    since = prometheus.query(f'kafka_consumergroup_rebalancing_since_timestamp_seconds{{group="{group}"}}')
    assert fired_at is not None and fired_at < completed_at + 5, (
        f"GroupRebalanceStuck did not fire during the stuck rebalance (fired at {fired_at}, completed at "
        f"{completed_at}): {since}")
    # The verdict follows the live state: nothing arrives on the topic, so a rebalance is a WARN, not an ERR.
    assert ("WARN", "rebalancing") in verdicts and ("OK", "ok") in verdicts, verdicts
    # The part of the rebalance the offsets topic cannot see, measured from the live view.
    samples = wait_for(monitor, lambda s: long_rebalances(s, group) >= long_before + 1,
                       "the stuck rebalance's observed duration (over 10 s)")
    observed = value(samples, "kafka_consumergroup_observed_rebalance_duration_seconds_sum", group=group)
    assert observed is not None and observed - sum_before > MAX_POLL_MS / 1000 / 2
    assert value(samples, "kafka_consumergroup_rebalancing_since_timestamp_seconds", group=group) is None
    assert (value(samples, "rebalance_monitor_live_requests_total", api="ListGroups") or 0) >= 1
    assert (value(samples, "rebalance_monitor_live_requests_total", api="DescribeGroups") or 0) >= 1


def test_records_deleted_below_a_commit_are_counted_lost_and_alerted(live_scene, kafka_broker: LocalKafka,
                                                                      admin: Admin) -> None:
    """A group committed at 10 of 100 records of a topic kept one hour; kafka-delete-records' API moves the log start
    to 60: 50 records the group never read are gone, counted once, and GroupRecordsLost fires in Prometheus. Before
    that, the margin: 10 records, and retention.ms may delete record 10 one hour after it was written."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import NewTopic

    monitor, prometheus, prefix = live_scene
    group, topic = f"{prefix}-lossy", f"{prefix}-retained"
    admin.client.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "3600000"})])
    admin.produce(topic, 100)
    admin.commit(group, {(topic, 0): 10})
    deadline = record_timestamp(kafka_broker.bootstrap, topic, 0, 10) / 1000 + 3600
    wait_for(monitor, lambda s: value(s, "kafka_consumergroup_retention_margin_records", group=group, topic=topic,
                                      partition="0") == 10
             and value(s, "kafka_consumergroup_records_lost_total", group=group, topic=topic) == 0
             and abs((value(s, "kafka_consumergroup_retention_deadline_timestamp_seconds", group=group) or 0)
                     - deadline) < 0.001,
             "a margin of 10 records and one hour, nothing lost")
    # The alert is an increase(): Prometheus must hold the counter's 0 before the loss, as it does
    # between regular scrapes (the job writes 0 at a committed topic's first sight).
    lost_query = f'kafka_consumergroup_records_lost_total{{group="{group}",topic="{topic}"}}'
    wait_until(lambda: [r["value"][1] for r in prometheus.query(lost_query)] == ["0"], 30,
               "Prometheus to scrape the counter at 0")
    client = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        client.delete_records({KafkaTopicPartition(topic, 0): 60})
    finally:
        client.close()
    samples = wait_for(monitor, lambda s: value(s, "kafka_consumergroup_records_lost_total", group=group,
                                                topic=topic) == 50, "50 records counted lost")
    assert value(samples, "kafka_consumergroup_min_retention_margin_records", group=group) == -50
    deadline = time.monotonic() + 60
    while not any(a["labels"].get("group") == group and a["state"] == "firing"
                  for a in prometheus.alerts("GroupRecordsLost")):
        assert time.monotonic() < deadline, "GroupRecordsLost did not fire"
        time.sleep(1)
    time.sleep(3)  # more log-start samples of the same loss: still counted once
    assert value(scrape(monitor), "kafka_consumergroup_records_lost_total", group=group, topic=topic) == 50


def test_a_rebalance_that_starts_again_after_a_completed_generation_stays_shown(
        live_scene, kafka_broker: LocalKafka, admin: Admin, members: list[Member]) -> None:
    """Issue 28, item 3: two rebalances back to back. The first (a joiner, a stalled member) completes and
    its generation reaches the offsets topic, which then says Stable; a second one starts at once (another
    joiner, another member stalled) and Kafka holds the group in PreparingRebalance for the stalled member's
    rebalance timeout. The live view must win over the offsets topic's Stable for the whole second wait, so
    GroupRebalanceStuck's series stays in Prometheus (it once showed Stable, with no series)."""
    monitor, prometheus, prefix = live_scene
    group, topic = f"{prefix}-twice", f"{prefix}-twice-t"
    first = stable_group(kafka_broker, admin, members, group, topic, 3)
    wait_for(monitor, lambda s: state_of(s, group) == ["Stable"], "the group Stable")
    _, survivor, stalled_first = first

    stalled_first.stop_polling()
    wait_until(lambda: stalled_first.stalled, 30, "the first member to stop polling")
    generation_before = survivor.generation or 0
    members.append(Member(kafka_broker.bootstrap, group, [topic], f"{group}-j1",
                          max_poll_interval_ms=MAX_POLL_MS).start())
    started = time.monotonic()
    # The first rebalance ends once Kafka drops the stalled member (its rebalance timeout): the survivor then
    # has the new generation. At once the survivor stops polling and a second joiner starts the next one.
    wait_until(lambda: (survivor.generation or 0) > generation_before, 3 * MAX_POLL_MS / 1000,
               "the first rebalance to complete")
    completed_generation = survivor.generation or 0
    first_took = time.monotonic() - started
    survivor.stop_polling()
    wait_until(lambda: survivor.stalled, 30, "the survivor to stop polling")
    joiner = Member(kafka_broker.bootstrap, group, [topic], f"{group}-j2", max_poll_interval_ms=MAX_POLL_MS).start()
    members.append(joiner)
    second_at = time.monotonic()
    # (t, states, generation, since exported, since in Prometheus, Prometheus' last scrape of the job succeeded)
    seen: list[tuple[float, list[str], float | None, bool, bool, bool]] = []
    fired = False
    since_name = "kafka_consumergroup_rebalancing_since_timestamp_seconds"
    since_query = f'{since_name}{{group="{group}"}}'
    while time.monotonic() - second_at < 3 * MAX_POLL_MS / 1000:
        samples = scrape(monitor)
        states = state_of(samples, group)
        in_prometheus = bool(prometheus.query(since_query))
        scraped = [r["value"][1] for r in prometheus.query("up")] == ["1"]
        seen.append((time.monotonic() - second_at, states, value(samples, "kafka_consumergroup_generation",
                                                                   group=group),
                     value(samples, since_name, group=group) is not None, in_prometheus, scraped))
        fired = fired or any(a["labels"].get("group") == group and a["state"] == "firing"
                             for a in prometheus.alerts("GroupRebalanceStuck"))
        if joiner.joined and states == ["Stable"]:
            break
        time.sleep(0.5)
    # The second rebalance as the monitor shows it: rebalancing once it has folded the first one's generation
    # (its first polls can still show the first rebalance, not yet completed in its view, then Stable).
    began = next((t for t, states, g, *_ in seen if states != ["Stable"] and (g or 0) >= completed_generation),
                 None)
    assert began is not None and began <= 10, f"the second rebalance was not shown within 10 s: {seen}"
    ended = next((t for t, states, *_ in seen if states == ["Stable"] and t > began), None)
    print(f"first rebalance {first_took:.1f}s; second: {[(round(t, 1), s, g) for t, s, g, *_ in seen]}")
    assert ended is not None and joiner.joined, f"never Stable again: {seen}"
    assert ended > MAX_POLL_MS / 1000 / 2, f"the second rebalance did not wait for the stalled member: {seen}"
    # Settled: a live poll (2 s) and Prometheus' scrape (1 s) after it was first shown.
    settled = [entry for entry in seen if began + 3 <= entry[0] < ended]
    assert settled, seen
    assert all(states in (["PreparingRebalance"], ["CompletingRebalance"]) for _, states, *_ in settled), seen
    assert all(exported for *_, exported, _, _ in settled), f"rebalancing_since left the exposition: {seen}"
    # A scrape Prometheus gave up on (its timeout is the 1 s interval here, which a loaded two-core machine can
    # exceed) marks every series of the job stale at once: that is the target's failure, told apart from the
    # series leaving while the job was scraped (a CI run of 2026-11-29 failed on the former alone).
    assert all(in_prometheus or not scraped for *_, in_prometheus, scraped in settled), (
        f"rebalancing_since left Prometheus while its scrapes succeeded: {seen}")
    assert any(in_prometheus for *_, in_prometheus, _ in settled), f"rebalancing_since never in Prometheus: {seen}"
    # The case the issue is about: the offsets topic had shown the completed generation during that wait.
    assert any((g or 0) >= completed_generation for t, _, g, *_ in seen if t < ended - 5), (
        f"generation {completed_generation} was not folded during the second wait: {seen}")
    assert fired, "GroupRebalanceStuck did not fire"
