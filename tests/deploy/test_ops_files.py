"""The operations files: Grafana dashboard, Prometheus rules and config, Kubernetes manifests.

Standard library only (PyYAML is not a dependency). The PromQL itself is checked by
``promtool`` (Debian package ``prometheus``, installed by `make setup`): rules and config
syntax, the rules' unit tests (deploy/prometheus/rules_test.yml), and every dashboard query.
Without promtool these skip, and fail under CI. tests/scenarios/test_prometheus_e2e.py runs them all
in a real Prometheus against the real job. The rules' families are checked against the metrics
reference (docs/metrics.md, itself checked against the exporter), granularity included.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.metrics.live import HEALTH, LIVE_FAMILIES, RETENTION_FAMILIES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "rebalance-monitor.json"
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
REFERENCE = ROOT / "docs" / "metrics.md"
RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_URL = "https://github.com/kafka-rebalance-monitor/kafka-rebalance-monitor/blob/main/docs/runbooks/"
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")
K8S = ROOT / "deploy" / "k8s"

# What the job exports (streaming/exporter.py); every series also has a `cluster` label.
EXPORTED = frozenset({
    "kafka_consumergroup_generation",
    "kafka_consumergroup_rebalances_total",
    "kafka_consumergroup_last_rebalance_timestamp_seconds",
    "kafka_consumergroup_current_members",
    "kafka_consumergroup_info",
    "kafka_consumergroup_state",
    "kafka_consumergroup_assigned_partitions",
    "kafka_consumergroup_member_assigned_partitions",
    "kafka_consumergroup_member_epoch_lag",
    "kafka_consumergroup_retention_deadline_timestamp_seconds",
    "kafka_consumergroup_member_unreconciled_partitions",
    "kafka_consumergroup_assignment_imbalance_ratio",
    "kafka_consumergroup_partitions_moved_total",
    "kafka_consumergroup_committed_offset",
    "kafka_consumergroup_offset_commits_total",
    "kafka_consumergroup_partition_lag",
    "kafka_consumergroup_partition_lag_seconds",
    "kafka_topic_partition_log_end_offset",
    "kafka_consumergroup_member_lag",
    "kafka_consumergroup_member_lag_seconds",
    "kafka_consumergroup_partition_lag_uncommitted",
    "kafka_consumergroup_lag_truncations_total",
    "rebalance_monitor_log_end_poll_timestamp_seconds",
    "rebalance_monitor_log_end_poll_errors_total",
    "rebalance_monitor_offsets_topic_unstable_offsets",
    "rebalance_monitor_offsets_topic_unstable_seconds",
    "kafka_consumergroup_rebalance_causes_total",
    "kafka_consumergroup_member_departures_total",
    "kafka_consumergroup_member_churn",
    "kafka_consumergroup_rebalance_duration_seconds",
    "kafka_consumergroup_assignor_imbalance_ratio",
    "kafka_consumergroup_empty_transitions_total",
    "kafka_consumergroup_recreations_total",
    "kafka_consumergroup_generations_advanced_total",
    "rebalance_monitor_groups_dropped",
    "rebalance_monitor_members_dropped",
    "rebalance_monitor_series_dropped",
    "rebalance_monitor_limit_hits_total",
    "rebalance_monitor_groups",
    "rebalance_monitor_series",
    "rebalance_monitor_records_total",
    "rebalance_monitor_decode_errors_total",
    "rebalance_monitor_batch_duration_seconds",
    "rebalance_monitor_input_lag_records",
    "rebalance_monitor_last_batch_timestamp_seconds",
    "rebalance_monitor_skipped_offsets_total",
    "rebalance_monitor_query_restarts_total",
    "kafka_consumergroup_total_lag", "kafka_consumergroup_max_lag_seconds", "kafka_consumergroup_topic_total_lag",
    "kafka_consumergroup_topic_max_lag_seconds", "rebalance_monitor_ready", "rebalance_monitor_build_info",
    "rebalance_monitor_input_lag_seconds", "rebalance_monitor_jvm_memory_bytes",
    "rebalance_monitor_jvm_gc_collections_total", "rebalance_monitor_jvm_gc_collection_seconds_total",
    "rebalance_monitor_jvm_process_resident_memory_bytes", "rebalance_monitor_jvm_process_cpu_seconds_total",
    "kafka_consumergroup_state_since_timestamp_seconds", "kafka_consumergroup_rebalancing_since_timestamp_seconds",
    "kafka_consumergroup_health", "kafka_consumergroup_records_lost_total",
    "kafka_consumergroup_retention_margin_records", "kafka_consumergroup_min_retention_margin_records",
    "rebalance_monitor_live_requests_total", "rebalance_monitor_live_poll_errors_total",
    "rebalance_monitor_live_poll_duration_seconds", "rebalance_monitor_live_last_poll_timestamp_seconds",
    "rebalance_monitor_unresolved_topic_ids_total",
    "kafka_consumergroup_activity", "kafka_consumergroup_last_member_timestamp_seconds",
    "kafka_consumergroup_last_commit_timestamp_seconds", "kafka_consumergroup_topic_assigned",
})
HISTOGRAMS = frozenset({"rebalance_monitor_batch_duration_seconds", "kafka_consumergroup_rebalance_duration_seconds"})
# The live-state, retention and health families (streaming/metrics/live.py) that rules use and the
# dashboard does not show (those it shows are in EXPORTED).
LIVE = frozenset(f.name for f in (*LIVE_FAMILIES, *RETENTION_FAMILIES, HEALTH)) - EXPORTED
SERIES_NAMES = EXPORTED | LIVE | {h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
# A metric name on its own: not part of a longer name, nor of a recording rule's level:metric:ops.
METRIC = re.compile(r"(?<![\w:])(?:kafka_[a-z_]+|rebalance_monitor_[a-z_]+)(?![\w:])")
RECORDED = re.compile(r"(?<![\w:])[a-z_]+:[a-z_]+:[a-z0-9_]+(?![\w:])")

REQUIRED_ALERTS = {
    "RebalanceStorm", "RebalanceStormWidespread", "FrequentRebalances", "HighPartitionMovement",
    "AssignmentImbalance", "ConsumerGroupLagSecondsHigh", "GroupStuckReconciling", "MonitorStalled",
    "MonitorFallingBehind", "MonitorDecodeErrors", "LagPollerStalled", "LagPollErrors",
    "OffsetsTopicPartitionFrozen", "MonitorQueryRestarting", "MonitorDown", "MonitorAbsent",
    "MonitorSeriesDropped", "MonitorGroupsDropped", "MonitorMembersDropped", "ConsumerGroupAbandoned",
}
# Who acts on an alert (deploy/alertmanager/alertmanager.yml routes and inhibits by it).
SCOPES = {"group", "cluster", "monitor"}
# Grafana's variables, replaced by something PromQL parses.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                     "$cluster": ".*", "$group": ".*", "$topn": "10"}


def metric_names(text: str) -> set[str]:
    return set(METRIC.findall(text))


# ------------------------------------------------------------------------------ dashboard


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # collapsed rows hold their panels


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable."""
    found = [(f"panel {p['id']} {p.get('title')!r} {t['refId']}", t["expr"])
             for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((f"variable {var['name']}", query))
    return found


def test_dashboard_identity_and_variables(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "kafka-rebalance-monitor"
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("cluster", "group"):
        assert variables[name]["type"] == "query"
        assert variables[name]["multi"] is True
        assert "label_values(" in variables[name]["definition"]
    assert "$cluster" in variables["group"]["definition"]


def test_dashboard_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panel {p['id']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = p["id"]
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['id']} {p['title']!r} has no query"
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]


def test_dashboard_queries_use_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= SERIES_NAMES, f"{where}: unknown metrics {sorted(names - SERIES_NAMES)}"
        assert not RECORDED.findall(expr), f"{where}: recording rules need rules.yml loaded; use raw metrics"
        if where.startswith("panel"):
            assert "$cluster" in expr, f"{where}: not filtered by $cluster"
        used |= names
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith(tuple(HISTOGRAMS)) else n for n in used}
    assert shown == EXPORTED, f"not on the dashboard: {sorted(EXPORTED - shown)}"


# ------------------------------------------------------------------------------ rules


def rule_blocks(text: str, kind: str) -> list[tuple[str, str]]:
    """(name, block text) of every ``- alert:`` or ``- record:`` rule."""
    starts = list(re.finditer(rf"^\s*- {kind}: *(\S+)", text, re.M))
    rules = list(re.finditer(r"^\s*- (?:alert|record):", text, re.M))
    blocks = []
    for m in starts:
        end = next((r.start() for r in rules if r.start() > m.start()), len(text))
        blocks.append((m.group(1), text[m.start():end]))
    return blocks


def reference() -> dict[str, tuple[str, str]]:
    """name on the wire -> (type, granularity) from docs/metrics.md's family tables; granularity is
    ``partition``, ``both`` or ``any`` (not about lag; also for tables without that column)."""
    families: dict[str, tuple[str, str]] = {}
    header: list[str] = []
    for line in REFERENCE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells[:1] == ["Family"]:
            header = cells
        elif not cells:
            header = []
        elif header and (name := re.fullmatch(r"`([a-z_]+)`", cells[0])):
            row = dict(zip(header, cells, strict=False))
            families[name.group(1)] = (row.get("Type", ""), row.get("Granularity", "any"))
    return families


def rule_series_names() -> set[str]:
    """Every series name a rule may read: the documented families, histograms with their parts."""
    families = reference()
    return set(families) | {f"{name}{part}" for name, (kind, _) in families.items() if kind == "histogram"
                            for part in ("_bucket", "_sum", "_count")}


def without_comments(block: str) -> str:
    return re.sub(r"^\s*#.*$", "", block, flags=re.M)


def rule_expr(block: str) -> str:
    """The ``expr`` of one rule block (up to the next key at the rule's level)."""
    match = re.search(r"^(\s+)expr: *(.*?)(?=^\1\w+:|\Z)", block, re.M | re.S)
    assert match, block
    return match.group(2)


def test_rules_use_only_exported_metrics() -> None:
    text = without_comments(RULES.read_text())
    names, known = metric_names(text), rule_series_names()
    assert len(known) > 50, "the metrics reference's tables were not found"
    assert names <= known, f"metrics in rules.yml missing from docs/metrics.md: {sorted(names - known)}"
    recorded = {name for name, _ in rule_blocks(text, "record")}
    assert recorded, "no recording rules"
    for name in recorded:
        _level, metric, _ops = name.split(":")
        assert metric in known or f"{metric}_total" in known, f"{name}: not named after a metric"
    referenced = set(RECORDED.findall(text))
    assert referenced <= recorded, f"recording rules used but not defined: {sorted(referenced - recorded)}"


def test_rules_read_families_of_both_granularities() -> None:
    """A rule that reads a family served only at --lag-granularity partition is silent at topic
    granularity: allowed only when its description says it is per-partition."""
    families = reference()
    partition_only = {name for name, (_, granularity) in families.items() if granularity == "partition"}
    assert {"kafka_consumergroup_partition_lag", "kafka_consumergroup_partition_lag_seconds"} <= partition_only
    for kind in ("alert", "record"):
        for name, block in rule_blocks(RULES.read_text(), kind):
            used = metric_names(rule_expr(block)) & partition_only
            assert not used or "per-partition" in block, (
                f"{name} reads {sorted(used)}, served at --lag-granularity partition only; use the per-topic or "
                "per-group aggregates, or say per-partition in its description")


def test_alerts_have_severity_and_annotations() -> None:
    alerts = rule_blocks(without_comments(RULES.read_text()), "alert")
    assert {name for name, _ in alerts} >= REQUIRED_ALERTS
    for name, block in alerts:
        # info: a group alert that wakes nobody (ConsumerGroupAbandoned)
        assert re.search(r"^\s+severity: (critical|warning|info)$", block, re.M), f"{name}: severity"
        scope = re.search(r"^\s+scope: (\w+)$", block, re.M)
        assert scope and scope.group(1) in SCOPES, f"{name}: scope label, one of {sorted(SCOPES)}"
        assert re.search(r"^\s+summary:", block, re.M), f"{name}: summary"
        assert re.search(r"^\s+description:", block, re.M), f"{name}: description"
        assert "Threshold" in block, f"{name}: threshold not documented"
        if scope.group(1) in {"group", "cluster"}:
            assert "$labels.cluster" in block, f"{name}: cluster in annotations"
        if any(n.startswith("kafka_consumergroup_") for n in metric_names(rule_expr(block))):
            # A stalled monitor freezes the group series: hold past MonitorStalled's 7 minutes.
            assert re.search(r"^\s+keep_firing_for: (10|15|30)m$", block, re.M), f"{name}: keep_firing_for"
        if scope.group(1) == "group":
            assert "$labels.group" in block, f"{name}: group in annotations"


def runbook_urls() -> dict[str, set[str]]:
    """alert -> the runbook_url annotations of its rules."""
    urls: dict[str, set[str]] = {}
    for name, block in rule_blocks(RULES.read_text(), "alert"):
        urls.setdefault(name, set()).update(re.findall(r"^\s+runbook_url: *(\S+)$", block, re.M))
    return urls


def test_every_alert_has_its_runbook_and_every_runbook_an_alert() -> None:
    urls = runbook_urls()
    for name, found in urls.items():
        assert found == {f"{RUNBOOK_URL}{name}.md"}, f"{name}: runbook_url {sorted(found)}"
        runbook = RUNBOOKS / f"{name}.md"
        assert runbook.is_file(), f"{name}: no {runbook.relative_to(ROOT)}"
        text = runbook.read_text()
        assert text.startswith(f"# {name}\n"), f"{runbook.name}: title"
        missing = [s for s in RUNBOOK_SECTIONS if not re.search(rf"^{s}$", text, re.M)]
        assert not missing, f"{runbook.name}: sections {missing}"
        diagnosis = text.split("## Diagnosis", 1)[1].split("## Mitigation", 1)[0]
        for what, needle in (("dashboard panel", "Dashboard"), ("monitor command", "rebalance-monitor "),
                             ("Kafka CLI", "kafka-")):
            assert needle in diagnosis, f"{runbook.name}: Diagnosis names no {what}"
    orphans = {p.stem for p in RUNBOOKS.glob("*.md")} - set(urls) - {"README"}
    assert not orphans, f"runbooks without an alert: {sorted(orphans)}"


def test_prometheus_config_scrapes_the_job() -> None:
    text = (PROMETHEUS / "prometheus.yml").read_text()
    assert re.search(r"^\s+- rules\.yml", text, re.M)
    assert "localhost:10308" in text
    assert re.search(r"^\s+scrape_interval: 15s$", text, re.M)
    # The job label is the rules' parameter: MonitorDown and MonitorAbsent match the scrape job's name.
    [job] = re.findall(r"^\s+- job_name: *(\S+)$", text, re.M)
    jobs = set(re.findall(r'up\{job="([^"]+)"\}', RULES.read_text()))
    assert jobs == {job}, f"rules.yml matches job {sorted(jobs)}, prometheus.yml scrapes {job}"


def run_promtool(promtool: str, *args: str, cwd: Path = ROOT, context: str = "") -> None:
    result = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}\n{result.stderr}{context}"


def test_promtool_check_rules(promtool: str) -> None:
    run_promtool(promtool, "check", "rules", str(RULES))


def test_promtool_check_config(promtool: str) -> None:
    run_promtool(promtool, "check", "config", str(PROMETHEUS / "prometheus.yml"))


def test_promtool_rule_unit_tests(promtool: str) -> None:
    run_promtool(promtool, "test", "rules", "rules_test.yml", cwd=PROMETHEUS)


def dashboard_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every query, Grafana variables filled in, label_values() unwrapped."""
    found = []
    for where, expr in queries(dashboard):
        if expr.startswith("label_values("):
            expr = re.sub(r"^label_values\((.*), *\w+\)$", r"\1", expr)
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"unhandled Grafana variable in {expr!r}"
        found.append((where, expr))
    return found


def test_dashboard_queries_parse(promtool: str, dashboard: dict[str, Any], tmp_path: Path) -> None:
    """Each dashboard query as a recording rule for promtool."""
    expressions = dashboard_expressions(dashboard)
    rules = [{"record": f"dashboard:query:q{i}", "expr": expr} for i, (_, expr) in enumerate(expressions)]
    names = [f"\nq{i}: {where}" for i, (where, _) in enumerate(expressions)]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    run_promtool(promtool, "check", "rules", str(path), context="".join(names))


# The Kubernetes manifests' tests: tests/deploy/test_k8s_manifests.py (and test_helm_chart.py).
