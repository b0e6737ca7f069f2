"""The dashboard at both ``--lag-granularity`` settings: a real Prometheus scrapes a running
monitor while real groups consume and rebalance, and every dashboard query answers with data; at
``topic`` (the setting the README recommends for large clusters) the panels titled
"(per partition)" must be empty instead, as their descriptions say.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.broker import LocalKafka
from testbed.prometheus import LocalPrometheus
from testbed.workload import Admin, Member, RateProducer, start_members, wait_balanced, wait_until
from tests.conftest import prometheus_tool
from tests.deploy.test_dashboard import DASHBOARD, VARIABLES, documented_series, expressions, metric_names
from tests.support.monitor_helpers import start_monitor

pytestmark = pytest.mark.slow

# Families that stay empty on a healthy cluster: nothing undecodable, no truncated log, no failed
# poll (lag or live), no open transaction on __consumer_offsets, no limit hit, every assigned
# partition committed, every KIP-848 topic id resolved, and (but for the moment a member joins or
# leaves) no rebalance in progress. The group here is classic: no KIP-848 member epochs; it keeps
# up, so it has no unread record for a retention deadline most of the time.
MAY_BE_EMPTY = {"rebalance_monitor_decode_errors_total", "kafka_consumergroup_lag_truncations_total",
                "rebalance_monitor_log_end_poll_errors_total", "rebalance_monitor_offsets_topic_unstable_seconds",
                "rebalance_monitor_offsets_topic_unstable_offsets", "rebalance_monitor_limit_hits_total",
                "kafka_consumergroup_partition_lag_uncommitted", "rebalance_monitor_live_poll_errors_total",
                "rebalance_monitor_unresolved_topic_ids_total",
                "kafka_consumergroup_rebalancing_since_timestamp_seconds", "kafka_consumergroup_member_epoch_lag",
                "kafka_consumergroup_member_unreconciled_partitions",
                "kafka_consumergroup_retention_deadline_timestamp_seconds",
                # Groups without members only, and committed topics outside an assignment: none here.
                "kafka_consumergroup_last_commit_timestamp_seconds",
                "kafka_consumergroup_last_member_timestamp_seconds",
                "kafka_consumergroup_topic_assigned"}


def filled(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


@dataclass
class Scene:
    prometheus: LocalPrometheus
    granularity: str
    started: float  # time.time() before the group formed


# Each granularity on one Prometheus major: the dashboard's queries at the default granularity also run
# on both majors in tests/scenarios/test_prometheus_e2e.py, and each scene needs a minute of samples.
SCENES = [("partition", "2"), ("topic", "3")]


@pytest.fixture(scope="module", params=SCENES, ids=lambda scene: f"{scene[0]}-prometheus{scene[1]}")
def scene(request: pytest.FixtureRequest, spark: Any, kafka_broker: LocalKafka, admin: Admin,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """A group of two consumers on two topics that keep receiving records (its second member's
    join is a rebalance; a third joins and leaves), scraped every second; and when it started."""
    granularity, major = request.param
    started = time.time()
    work = tmp_path_factory.mktemp("dashboard-e2e")
    suffix = work.name.replace("_", "-")
    topics = [f"dash-{suffix}-t{i}" for i in range(2)]
    for topic in topics:
        admin.create_topic(topic, 3)
    group = f"dash-{suffix}"
    monitor = start_monitor(spark, kafka_broker.bootstrap, work, "--cluster", "dashboard-e2e",
                            "--lag-granularity", granularity, "--include-groups", f"^{group}$")
    server = LocalPrometheus(work / "prometheus", [f"127.0.0.1:{monitor.metrics_port}"], scrape_interval="1s",
                             evaluation_interval="1s", binary=prometheus_tool("prometheus", major))
    producer = RateProducer(kafka_broker.bootstrap, topics, rate=20)
    members: list[Member] = []
    try:
        server.start()
        producer.start()
        members += start_members(Member(kafka_broker.bootstrap, group, topics, f"{group}-c{i}") for i in range(2))
        wait_balanced(members, [(t, p) for t in topics for p in range(3)])
        # The flapping member's rebalances come after Prometheus holds the group's counters: increase()
        # sees no rise in a series whose first sample is already its last value (a slow first batch
        # under load once folded every rebalance before the first scrape).
        wait_until(lambda: bool(server.query(f'kafka_consumergroup_rebalances_total{{group="{group}"}}')), 120,
                   "Prometheus to scrape the group's rebalance counter")
        members += start_members([Member(kafka_broker.bootstrap, group, topics, f"{group}-flap")])
        members[-1].leave()
        yield Scene(server, granularity, started)
    finally:
        producer.stop()
        for member in members:
            if member.running:
                member.crash()
        monitor.stop()
        server.stop()


def test_every_query_returns_data_and_per_partition_ones_none_at_topic(scene: Scene) -> None:
    server = scene.prometheus
    dashboard = json.loads(DASHBOARD.read_text())
    partition_only = {n for n, g in documented_series().items() if g == "partition"}
    per_partition = {f"panel {p['id']} " for p in dashboard["panels"] if "(per partition)" in p.get("title", "")}
    wanted, unwanted = [], []
    for where, expr in expressions(dashboard):
        names = metric_names(expr)
        if scene.granularity == "topic" and any(where.startswith(prefix) for prefix in per_partition):
            if names & partition_only:
                unwanted.append((where, filled(expr)))
        elif not names & MAY_BE_EMPTY:
            wanted.append((where, filled(expr)))
    assert wanted and bool(unwanted) == (scene.granularity == "topic")

    def empty() -> list[str]:
        return [f"{where}: {expr}" for where, expr in wanted if not server.query(expr)]

    deadline = time.monotonic() + 180  # rates need a minute of samples; the advisor runs in the background
    while (missing := empty()) and time.monotonic() < deadline:
        time.sleep(5)
    assert not missing, (f"dashboard queries without data at --lag-granularity {scene.granularity}:\n"
                         + "\n".join(missing))
    present = [f"{where}: {expr}" for where, expr in unwanted if server.query(expr)]
    assert not present, "per-partition queries with data at --lag-granularity topic:\n" + "\n".join(present)


def test_rebalance_markers_are_at_the_rebalance_time_in_ms(scene: Scene) -> None:
    """Grafana reads each marker's value as its time in milliseconds (``useValueForTime``)."""
    server, started = scene.prometheus, scene.started
    dashboard = json.loads(DASHBOARD.read_text())
    markers = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert markers
    for marker in markers:
        results = server.query(filled(marker["expr"]))
        assert results, marker["name"]
        for result in results:
            assert started * 1000 <= float(result["value"][1]) <= time.time() * 1000, (marker["name"], result)
