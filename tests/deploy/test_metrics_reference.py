"""docs/metrics.md names exactly the families the exporter serves (with every option that adds some)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from streaming.live.poller import LivePollStats
from streaming.metrics.live import poller_text
from streaming.metrics.runtime import register_runtime
from tests.support.publishing import whole
from tests.unit.metrics.test_activity_lines import emptied_summary
from tests.unit.metrics.test_compat import publisher

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# Families only a running JVM produces: the health scenario checks them on the real job.
NEEDS_JVM = ("rebalance_monitor_jvm_",)


def documented() -> set[str]:
    """The first column of the reference's family tables (headed ``| Family |``), as names on the wire."""
    names, in_family_table = set(), False
    for line in REFERENCE.read_text().splitlines():
        in_family_table = line.startswith("|") and (in_family_table or line.startswith("| Family |"))
        match = re.match(r"^\| `([a-z_*]+)` \|", line)
        if in_family_table and match:
            names.add(match.group(1))
    return names


def served() -> dict[str, str]:
    pub = publisher("kafka_exporter")
    pub.apply(whole(emptied_summary()))  # the families only a group without members has
    register_runtime(pub.instruments.registry, "c", None)
    # The job's scrape text also carries the live poller's families when it runs.
    text = pub.exporter.render().decode() + poller_text("c", LivePollStats()).decode()
    return {f.name + ("_total" if f.type == "counter" else ""): f.type for f in text_string_to_metric_families(text)}


def test_every_served_family_is_documented_and_every_documented_one_served() -> None:
    names, wire = documented(), served()
    wildcards = {n.removesuffix("*") for n in names if n.endswith("*")}
    undocumented = {n for n in wire if n not in names and not n.startswith(tuple(wildcards))}
    assert not undocumented, undocumented
    missing = {n for n in names - wire.keys() if not n.endswith("*") and not n.startswith(NEEDS_JVM)}
    assert not missing, missing
