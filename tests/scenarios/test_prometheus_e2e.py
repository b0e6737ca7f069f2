"""The job seen where operators look: a real Prometheus scrapes a running monitor while real
groups churn, evaluates the shipped rules, and answers every dashboard query; and the lag alerts
fire at both --lag-granularity settings. Each scene is scraped by both Prometheus majors side by
side (Debian's 2.x and Prometheus 3, whose range selectors changed), and every check holds on each.

The rules are the shipped expressions with every ``for:`` cut to 10 s and MonitorStalled's
5-minute threshold cut to STALL_SECONDS (testbed.prometheus.fast_rules): the production durations
would make this test take an hour. Everything else, thresholds included, is as shipped.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed.broker import LocalKafka
from testbed.prometheus import LocalPrometheus, fast_rules
from testbed.workload import Admin, Member, RateProducer, start_members, wait_balanced
from tests.conftest import PROMETHEUS_MAJORS, prometheus_tool
from tests.deploy.test_ops_files import DASHBOARD, dashboard_expressions, metric_names
from tests.support.lag_helpers import produce
from tests.support.monitor_helpers import start_monitor

pytestmark = pytest.mark.slow

CLUSTER = "prom-e2e"
# MonitorStalled's threshold here: late in a whole run (this process has run dozens of monitors) one batch
# was seen still "Processing new data" after 23 s, with scrapes healthy (the stall test's evidence).
STALL_SECONDS = 60
STORM_SECONDS = 300  # the storm loop's bound: RebalanceStorm needs > 10 rebalances in 10m
# Families that stay empty on a healthy cluster: nothing undecodable, no truncated log, no
# failed poll (lag or live), no open transaction on __consumer_offsets, every assigned partition
# committed, no limit hit, every KIP-848 topic id resolved, and (but while a member joins or
# leaves) no rebalance in progress. Its groups are classic (no KIP-848 member epochs) and keep up
# (so mostly no unread record for a retention deadline).
MAY_BE_EMPTY = ("rebalance_monitor_decode_errors_total", "kafka_consumergroup_lag_truncations_total",
                "rebalance_monitor_log_end_poll_errors_total", "rebalance_monitor_offsets_topic_unstable_seconds",
                "kafka_consumergroup_partition_lag_uncommitted", "rebalance_monitor_limit_hits_total",
                "rebalance_monitor_live_poll_errors_total", "rebalance_monitor_unresolved_topic_ids_total",
                "kafka_consumergroup_rebalancing_since_timestamp_seconds", "kafka_consumergroup_member_epoch_lag",
                "kafka_consumergroup_member_unreconciled_partitions",
                "kafka_consumergroup_retention_deadline_timestamp_seconds",
                # Groups without members only, and committed topics outside an assignment: none here.
                "kafka_consumergroup_last_commit_timestamp_seconds",
                "kafka_consumergroup_last_member_timestamp_seconds",
                "kafka_consumergroup_topic_assigned")


@dataclass
class Scene:
    prometheuses: dict[str, LocalPrometheus]  # major -> server, all scraping the one monitor
    monitor: Any
    groups: dict[str, str]  # role -> group name
    members: list[Member] = field(default_factory=list)
    monitor_running: bool = True

    def stop_monitor(self) -> None:
        if self.monitor_running:
            self.monitor_running = False
            self.monitor.stop()


def wait(check: Callable[[], Any], timeout: float, what: str, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def alert_states(prometheus: LocalPrometheus, name: str) -> dict[str, str]:
    """group (or cluster) -> pending/firing, for the active alerts named ``name``."""
    return {a["labels"].get("group", a["labels"].get("cluster", "")): a["state"] for a in prometheus.alerts(name)}


def side_by_side(work: Path, targets: list[str], rules: Path) -> dict[str, LocalPrometheus]:
    """One Prometheus of each major, scraping ``targets`` every 2 s with ``rules``.

    Not every second: a scrape's timeout is its interval, and on a loaded machine a scrape of the in-process
    job (which fetches fresh lag from Kafka) took 0.6-1.0 s, so 1 s scrapes failed about a third of the time;
    each failure left every series stale, and RebalanceStorm's ``for:`` started again."""
    return {major: LocalPrometheus(work / f"prometheus{major}", targets, rules=rules, scrape_interval="2s",
                                   evaluation_interval="1s", binary=prometheus_tool("prometheus", major))
            for major in PROMETHEUS_MAJORS}


@pytest.fixture(scope="module")
def scene(spark: Any, kafka_broker: LocalKafka, admin: Admin,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """The seeds' range and round-robin groups (two consumers, t0 and t1 with three partitions
    each) consuming steadily, a storm group, one monitor of their own, and Prometheus."""
    work = tmp_path_factory.mktemp("prom-e2e")
    suffix = work.name.replace("_", "-")
    topics = [f"prom-{suffix}-t{i}" for i in range(2)]
    for topic in topics:
        admin.create_topic(topic, 3)
    groups = {role: f"prom-{role}-{suffix}" for role in ("range", "roundrobin", "storm")}
    monitor = start_monitor(spark, kafka_broker.bootstrap, work, "--cluster", CLUSTER,
                            "--include-groups", f"^prom-.*-{suffix}$")
    prometheuses = side_by_side(work, [f"127.0.0.1:{monitor.metrics_port}"],
                                fast_rules(work / "rules.yml", "10s", stall_seconds=STALL_SECONDS))
    producer = RateProducer(kafka_broker.bootstrap, topics, rate=20)
    scene = Scene(prometheuses, monitor, groups)
    try:
        for prometheus in prometheuses.values():
            prometheus.start()
        producer.start()
        for assignor in ("range", "roundrobin"):
            group = groups[assignor]
            started = start_members(Member(kafka_broker.bootstrap, group, topics, f"{group}-c{i}", assignor=assignor)
                                    for i in range(2))
            scene.members += started
            wait_balanced(started, [(t, p) for t in topics for p in range(3)])
        scene.members += start_members([Member(kafka_broker.bootstrap, groups["storm"], topics[:1],
                                               f"{groups['storm']}-steady")])
        yield scene
    finally:
        producer.stop()
        for member in scene.members:
            if member.running:
                member.crash()
        scene.stop_monitor()
        for prometheus in prometheuses.values():
            prometheus.stop()


def test_rebalance_storm_fires_and_steady_groups_stay_quiet(scene: Scene, kafka_broker: LocalKafka) -> None:
    """A member joins and leaves the storm group in a loop until RebalanceStorm fires for it on
    each Prometheus; the groups consuming steadily never raise it, pending or firing."""
    storm, topics = scene.groups["storm"], scene.members[-1].topics
    for prometheus in scene.prometheuses.values():
        wait(lambda p=prometheus: p.query(f'kafka_consumergroup_current_members{{group="{storm}"}}'), 120,
             "Prometheus to scrape the storm group")
    deadline = time.monotonic() + STORM_SECONDS
    cycle = 0
    increase = f'increase(kafka_consumergroup_rebalances_total{{group="{storm}"}}[10m])'
    while any(alert_states(p, "RebalanceStorm").get(storm) != "firing" for p in scene.prometheuses.values()):
        assert time.monotonic() < deadline, (
            f"no firing RebalanceStorm for {storm} on every Prometheus after {cycle} join/leave cycles; "
            f"{increase}: {({m: p.query(increase) for m, p in scene.prometheuses.items()})}")
        quiet = {(m, g) for m, p in scene.prometheuses.items() for g in alert_states(p, "RebalanceStorm") if g != storm}
        assert not quiet, f"RebalanceStorm raised for steadily consuming groups {quiet}"
        flapper = Member(kafka_broker.bootstrap, storm, topics, f"{storm}-flap{cycle}")
        scene.members.append(flapper)
        start_members([flapper])
        flapper.leave()
        cycle += 1
    steady = {scene.groups["range"], scene.groups["roundrobin"]}
    for prometheus in scene.prometheuses.values():
        assert not steady & set(alert_states(prometheus, "RebalanceStorm"))
        # The page says why and who: the causes counted and the flapping clients by name.
        [alert] = [a for a in prometheus.alerts("RebalanceStorm") if a["labels"]["group"] == storm]
        description = alert["annotations"]["description"]
        assert "members_joined" in description and "members_left" in description, description
        assert f"{storm}-flap" in description, description


def test_imbalance_fires_for_range_not_roundrobin(scene: Scene) -> None:
    """Range puts 4 of the 6 partitions on one consumer where 3 and 3 were possible."""
    rng, rr = scene.groups["range"], scene.groups["roundrobin"]
    expected = {rng: pytest.approx(4 / 3), rr: 1.0}
    for major, prometheus in scene.prometheuses.items():
        wait(lambda p=prometheus: alert_states(p, "AssignmentImbalance").get(rng) == "firing", 90,
             f"AssignmentImbalance to fire for {rng} on Prometheus {major}")

        def ratios(p: LocalPrometheus = prometheus) -> dict[str, float]:
            return {r["metric"]["group"]: float(r["value"][1]) for r in p.query(
                f'kafka_consumergroup_assignment_imbalance_ratio{{group=~"{rng}|{rr}"}}')}

        # Asked until shown: a scrape past its timeout (the job busy) leaves the series stale until the next.
        wait(lambda: ratios() == expected, 30, f"the imbalance ratios {expected} on Prometheus {major}")
        assert rr not in alert_states(prometheus, "AssignmentImbalance")


def test_every_dashboard_query_parses_and_returns_data(scene: Scene) -> None:
    """Each panel and variable query, Grafana's variables filled in, through the query API."""
    dashboard = json.loads(Path(DASHBOARD).read_text())
    expressions = dashboard_expressions(dashboard)

    missing = {(major, where, expr) for major in scene.prometheuses for where, expr in expressions
               if not any(m in expr for m in MAY_BE_EMPTY)}
    # Each query is asked until it returns data: rates and derivatives need a minute of samples, and a scrape
    # past its timeout (the job busy) leaves the series stale until the next one.
    deadline = time.monotonic() + 90
    while missing and time.monotonic() < deadline:
        missing = {(major, where, expr) for major, where, expr in missing
                   if not scene.prometheuses[major].query(expr)}
        time.sleep(2)
    assert not missing, "dashboard queries without data:\n" + "\n".join(
        f"Prometheus {major}, {where}: {expr}" for major, where, expr in sorted(missing))


def test_every_dashboard_metric_is_exported_by_the_job(scene: Scene) -> None:
    """Every metric the dashboard names is a family in the job's own /metrics (# TYPE lines
    list families that have no sample yet, such as decode errors on a healthy cluster)."""
    text = urllib.request.urlopen(scene.monitor.metrics_url, timeout=10).read().decode()
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    dashboard = json.loads(Path(DASHBOARD).read_text())
    named = {name for _, expr in dashboard_expressions(dashboard) for name in metric_names(expr)}
    missing = {n for n in named if re.sub(r"_(total|bucket|sum|count)$", "", n) not in families and n not in families}
    assert not missing, f"the dashboard names metrics the job does not export: {sorted(missing)}"


def stall_evidence(scene: Scene) -> str:
    """What the job and Prometheus saw lately, for a MonitorStalled that is wrong while the job runs."""
    query = scene.monitor.query
    last = query.lastProgress
    seen = "; ".join(
        f"Prometheus {major}: up over 1m {prometheus.query('min_over_time(up[1m])')}, "
        f"scrape durations max {prometheus.query('max_over_time(scrape_duration_seconds[1m])')}, "
        f"gauge age {prometheus.query('time() - rebalance_monitor_last_batch_timestamp_seconds')}"
        for major, prometheus in scene.prometheuses.items())
    return (f"gauge {time.time() - (scene.monitor.instruments.last_progress or 0):.1f}s old in the job, "
            f"query status {query.status}, last batch {last and last.batchId} at {last and last.timestamp}; {seen}")


def test_monitor_stalled_fires_when_the_job_stops(scene: Scene) -> None:
    if any(CLUSTER in alert_states(p, "MonitorStalled") for p in scene.prometheuses.values()):
        pytest.fail(f"MonitorStalled while the job runs: {stall_evidence(scene)}")
    scene.stop_monitor()
    for major, prometheus in scene.prometheuses.items():
        wait(lambda p=prometheus: alert_states(p, "MonitorStalled").get(CLUSTER) == "firing", STALL_SECONDS + 100,
             f"MonitorStalled to fire on Prometheus {major} after the job stopped")


# ------------------------------------------------------------------------------ lag alerts, both granularities

LAG_ALERT = "ConsumerGroupLagSecondsHigh"
HOUR_MS = 3_600_000  # the records behind the lagging groups: past both thresholds (5m, 30m) at once


@pytest.mark.parametrize("granularity", ["partition", "topic"])
def test_lag_alerts_fire_at_both_granularities(granularity: str, spark: Any, kafka_broker: LocalKafka,
                                               admin: Admin, members: list[Member], tmp_path: Path) -> None:
    """Three groups parked on records written an hour ago, a monitor of their own at this
    granularity, and Prometheus with the shipped rules: both severities of the lag alert fire
    for a group whose consumers are all gone while its topic still receives records, and for a
    group with a member that has stopped consuming; an empty group on an idle topic stays quiet."""
    suffix = tmp_path.name.replace("_", "-")[-24:]
    live, idle = f"lagalert-live-{suffix}", f"lagalert-idle-{suffix}"
    groups = {role: f"lagalert-{role}-{suffix}" for role in ("gone", "busy", "abandoned")}
    old = int(time.time() * 1000) - HOUR_MS
    for topic in (live, idle):
        admin.create_topic(topic, 1)
        produce(kafka_broker.bootstrap, topic, 0, [old, old, old])
    admin.commit(groups["gone"], {(live, 0): 1})
    admin.commit(groups["busy"], {(idle, 0): 1})
    admin.commit(groups["abandoned"], {(idle, 0): 1})
    # Joins, takes its partition from the committed offset and sleeps in its first batch: a member
    # that stopped consuming (no poll, so no auto-commit; heartbeats keep it in the group).
    members.extend(start_members([Member(kafka_broker.bootstrap, groups["busy"], [idle], f"{groups['busy']}-c0",
                                         process_delay_ms=600_000)]))
    monitor = start_monitor(spark, kafka_broker.bootstrap, tmp_path, "--cluster", CLUSTER,
                            "--include-groups", f"^lagalert-.*-{suffix}$", "--lag-granularity", granularity)
    prometheuses = side_by_side(tmp_path, [f"127.0.0.1:{monitor.metrics_port}"],
                                fast_rules(tmp_path / "rules.yml", "10s"))
    producer = RateProducer(kafka_broker.bootstrap, [live], rate=5)
    try:
        for prometheus in prometheuses.values():
            prometheus.start()
        producer.start()
        expected = {(groups[role], topic, severity) for role, topic in (("gone", live), ("busy", idle))
                    for severity in ("warning", "critical")}

        def firing(prometheus: LocalPrometheus) -> set[tuple[str, str, str]]:
            return {(a["labels"]["group"], a["labels"]["topic"], a["labels"]["severity"])
                    for a in prometheus.alerts(LAG_ALERT) if a["state"] == "firing"}

        for major, prometheus in prometheuses.items():
            try:
                wait(lambda p=prometheus: firing(p) >= expected, 150,
                     f"{LAG_ALERT} to fire at {granularity} granularity on Prometheus {major}")
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}: want {sorted(expected)}, firing {sorted(firing(prometheus))}; lag in seconds: "
                    f"{prometheus.query('kafka_consumergroup_topic_max_lag_seconds')}") from None
            raised = {a["labels"]["group"] for a in prometheus.alerts(LAG_ALERT)}
            assert groups["abandoned"] not in raised, "an empty group on an idle topic raised the lag alert"
            per_partition = prometheus.query(f'kafka_consumergroup_partition_lag_seconds{{cluster="{CLUSTER}"}}')
            assert bool(per_partition) == (granularity == "partition"), per_partition
    finally:
        producer.stop()
        monitor.stop()
        for prometheus in prometheuses.values():
            prometheus.stop()
