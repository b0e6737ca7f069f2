"""--label, --metrics-allow and --metrics-deny: static labels on every served sample, families left out whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streaming.driver.lag_render import ScrapeText
from streaming.driver.publish import Publisher, build_publishing
from streaming.lag.tracker import LagTracker
from streaming.live.poller import LivePollStats
from streaming.metrics.exposition import ALWAYS_SERVED, RESERVED_LABELS, ExportPolicy, Family, FamilyCache, Lines
from streaming.metrics.runtime import register_runtime
from streaming.options import parse_args
from tests.support.publishing import (
    NOW,
    ORDERS_ASSIGNMENTS,
    ORDERS_OFFSETS,
    Clock,
    kip848_summary,
    orders_summary,
    whole,
)

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
STATIC = (("env", "prod"), ("team", 'a "quoted" \\ team'))


def full_publisher(**policy: object) -> Publisher:
    """Everything a scrape can hold: group, lag and compat families, the scrape-time text with the live poller's,
    and the instruments with the runtime's (process_* carry no label of their own)."""
    tracker = LagTracker(interval_s=10, clock=Clock(NOW))
    text = ScrapeText("prod-eu", tracker, kafka_exporter=True, live=True)
    pub = build_publishing("prod-eu", tracker, "partition", compat_mode="kafka_exporter", text=text, advisor=False,
                           **policy)  # type: ignore[arg-type]
    pub.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))
    pub.apply(whole(kip848_summary(), None))
    pub.book.refresh(NOW)
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 210), ("t0", 2): (10, 40)}, NOW - 1)
    tracker.record_times({}, [(("t0", 0), 150), (("t0", 1), 200)], NOW - 1)
    tracker.record_round(NOW - 1, {"timeout": 1})
    pub.book.refresh(NOW)
    text.live_round(LivePollStats())
    pub.instruments.count_records({1: 5})
    register_runtime(pub.instruments.registry, "prod-eu", None)
    return pub


def families(text: bytes) -> dict[str, list]:
    """Families by the name of their # TYPE line (counters with _total), with their samples."""
    return {f.name + ("_total" if f.type == "counter" else ""): f.samples
            for f in text_string_to_metric_families(text.decode())}


def type_lines(text: bytes) -> set[str]:
    return {line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE ")}


def test_every_served_sample_carries_the_static_labels() -> None:
    text = full_publisher(labels=STATIC).scrape()
    served = families(text)
    samples = [s for found in served.values() for s in found]
    assert len(served) > 60 and len(samples) > 100
    assert [s.name for s in samples if (s.labels.get("env"), s.labels.get("team")) != ("prod", STATIC[1][1])] == []
    # every family kind went through: cached group text, ages, histograms, scrape-time text, instruments,
    # the process collector's label-less series
    for name in ("kafka_consumergroup_rebalances_total", "kafka_consumergroup_partition_lag_seconds",
                 "kafka_consumergroup_rebalance_duration_seconds", "kafka_topic_partition_log_end_offset",
                 "rebalance_monitor_live_polls_total", "rebalance_monitor_records_total", "process_cpu_seconds_total",
                 "rebalance_monitor_build_info", "kafka_consumergroup_lag"):
        assert served[name], name
    # after the cluster label wherever a series has one
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    assert all('{cluster="prod-eu",env="prod",team=' in line for line in lines if 'cluster="' in line)
    assert any(line.startswith('process_cpu_seconds_total{env="prod",') for line in lines)


def test_the_same_scrape_without_the_policy_is_unchanged_apart_from_the_labels() -> None:
    plain, labelled = full_publisher().scrape(), full_publisher(labels=STATIC).scrape()
    static = b',env="prod",team="a \\"quoted\\" \\\\ team"'
    assert type_lines(plain) == type_lines(labelled)
    stripped = labelled.replace(static, b"").replace(static[1:] + b",", b"").replace(b"{" + static[1:] + b"}", b"")
    def series(text: bytes) -> list[bytes]:  # the values move between two scrapes (times, process figures)
        return [line.rsplit(b" ", 1)[0] for line in text.splitlines() if not line.startswith(b"# ")]
    assert series(stripped) == series(plain)


def test_a_denied_family_is_absent_with_its_help_and_type() -> None:
    denied = ("kafka_consumergroup_rebalances_total", "kafka_consumergroup_partition_lag_seconds",
              "kafka_topic_partition_log_end_offset", "rebalance_monitor_records_total", "kafka_consumergroup_lag")
    pub = full_publisher(metrics_deny="|".join(denied) + "|process_.*")
    text = pub.scrape()
    words = {word for line in text.decode().splitlines() for word in re.split(r"[\s{]", line)}
    for name in denied:
        assert name not in words and name.removesuffix("_total") not in words, name
    assert not {w for w in words if w.startswith("process_")}
    served = families(text)
    assert "kafka_consumergroup_lag_sum" in served and "kafka_consumergroup_rebalance_causes_total" in served
    # a left-out group family is not stored, so not counted as served
    group_series = sum(len(found) for name, found in served.items() if name.startswith("kafka_consumergroup_"))
    series = [s.value for s in served["rebalance_monitor_series"]]
    assert series and series[0] <= group_series


def test_an_allow_list_keeps_only_matching_families_and_deny_wins() -> None:
    text = full_publisher(metrics_allow=r"kafka_consumergroup_.*lag.*|rebalance_monitor_series",
                          metrics_deny="kafka_consumergroup_lag_sum").scrape()
    names = type_lines(text) - ALWAYS_SERVED
    assert names and all(re.fullmatch(r"kafka_consumergroup_.*lag.*|rebalance_monitor_series", n) for n in names)
    assert {"kafka_consumergroup_lag", "kafka_consumergroup_partition_lag", "rebalance_monitor_series"} <= names
    assert "kafka_consumergroup_lag_sum" not in names
    assert b"# HELP" in text and not any(line.startswith(b"# HELP process_") for line in text.splitlines())
    families(text)  # still a valid exposition


def test_the_families_the_monitor_alerts_read_are_served_whatever_the_filters() -> None:
    """MonitorAbsent/MonitorDown read build_info and MonitorStalled the last batch: a filter leaving them out
    would page for a monitor that is up (or hide one that stalled)."""
    policy = ExportPolicy.of("c", allow="kafka_consumergroup_lag", deny="rebalance_monitor_.*")
    assert all(policy.allows(name) for name in ALWAYS_SERVED)
    assert not policy.allows("rebalance_monitor_series") and not policy.allows("kafka_consumergroup_members")
    text = full_publisher(metrics_deny="rebalance_monitor_.*").scrape()
    assert type_lines(text) >= ALWAYS_SERVED
    assert "rebalance_monitor_series" not in type_lines(text)


def test_allow_and_deny_match_whole_names() -> None:
    policy = ExportPolicy.of("c", allow="kafka_consumergroup_lag")
    assert policy.allows("kafka_consumergroup_lag") and not policy.allows("kafka_consumergroup_lag_sum")
    assert ExportPolicy.of("c", deny="").plain, "an empty value (the chart's default) is no filter"


@pytest.mark.parametrize(("label", "message"), [
    ("group=x", "--label 'group': the job's series (or Prometheus) already use that label"),
    ("cluster=x", "--label 'cluster': the job's series"),
    ("partition=1", "--label 'partition': the job's series"),
    ("__name__=x", "--label '__name__': names starting with __ are Prometheus' own"),
    ("1st=x", "--label '1st': not a Prometheus label name"),
    ("team-name=x", "--label 'team-name': not a Prometheus label name"),
    ("env", "--label 'env': expected KEY=VALUE"),
])
def test_bad_label_names_are_refused_with_a_clear_error(label: str, message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--label", label])
    assert message in capsys.readouterr().err


def test_labels_and_filters_from_every_source() -> None:
    options = parse_args(["--bootstrap-server", "b", "--label", "env=prod", "--label", "note=a=b"],
                         environ={"REBALANCE_MONITOR_LABEL": "region=eu-1", "REBALANCE_MONITOR_METRICS_DENY": "x_.*"})
    assert options.metrics.static_labels == (("region", "eu-1"), ("env", "prod"), ("note", "a=b"))
    assert options.metrics.deny == "x_.*" and options.metrics.allow is None


def test_a_label_twice_and_a_bad_regex_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--label", "env=a", "--label", "env=b", "--metrics-deny", "(("])
    err = capsys.readouterr().err
    assert "--label 'env': given twice" in err and "--metrics-deny '((' is not a valid regex" in err


def documented_labels() -> set[str]:
    """The Labels column of docs/metrics.md's family tables."""
    labels: set[str] = set()
    for line in REFERENCE.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and re.fullmatch(r"`[a-z_*]+`", cells[1]) and cells[2] in (
                "gauge", "counter", "histogram", "info"):
            labels |= {w for w in re.split(r"[\s,`]+", cells[3]) if re.fullmatch(r"[a-z_]+", w)}
    return labels


def test_every_label_the_job_uses_is_reserved() -> None:
    served = {name for found in families(full_publisher().scrape()).values() for s in found for name in s.labels}
    assert served - RESERVED_LABELS == set()
    documented = documented_labels()
    assert {"group", "client_host", "record_type"} <= documented
    assert documented - RESERVED_LABELS == set()


def test_policy_text_handles_every_line_shape() -> None:
    policy = ExportPolicy.of("c", {"env": "p"}, deny="gone")
    text = (b"orphan 1\n"
            b"# HELP a A {with braces} in its help.\n# TYPE a gauge\n"
            b'a{cluster="c",x="1"} 1\na{x="2",cluster="c"} 2\na{} 3\na 4\na{cluster="c"} 5\na{cluster="cc"} 6\n'
            b"# HELP gone Left out.\n# TYPE gone gauge\ngone 1\n")
    assert policy.text(text) == (
        b'orphan{env="p"} 1\n'
        b"# HELP a A {with braces} in its help.\n# TYPE a gauge\n"
        b'a{cluster="c",env="p",x="1"} 1\na{env="p",x="2",cluster="c"} 2\na{env="p"} 3\na{env="p"} 4\n'
        b'a{cluster="c",env="p"} 5\na{env="p",cluster="cc"} 6\n')
    assert ExportPolicy.of("c", deny="a").text(b"# HELP a A.\n# TYPE a gauge\na 1\n") == b""


def test_a_label_value_holding_the_cluster_prefix_still_gets_one_insertion() -> None:
    """A cluster named ``,topic=`` and a group named ``g{cluster=`` put ``{cluster=",topic="`` twice in a line:
    the joined text's count shows it and the lines are labelled one by one."""
    family = Family("f", "gauge", "F.")
    lines = Lines(",topic=")
    lines.add(family, (("group", "g{cluster="), ("topic", "t")), 1)
    lines.add(family, (("group", "plain"), ("topic", "t")), 2)
    cache = FamilyCache([family], 'env="p"')
    cache.put("g", lines, ["f"])
    chunks, _, _ = cache.render(None)
    samples = next(text_string_to_metric_families(b"".join(chunks).decode())).samples
    assert [s.labels for s in samples] == [
        {"cluster": ",topic=", "env": "p", "group": "g{cluster=", "topic": "t"},
        {"cluster": ",topic=", "env": "p", "group": "plain", "topic": "t"},
    ]
