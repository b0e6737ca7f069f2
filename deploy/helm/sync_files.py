"""Refresh the chart's copies of the rules and the dashboard from their sources of truth.

The chart cannot read files outside its directory (``.Files.Get``), so it carries exact copies:

* deploy/prometheus/rules.yml -> deploy/helm/rebalance-monitor/files/rules.yml (the PrometheusRule)
* dashboards/rebalance-monitor.json -> deploy/helm/rebalance-monitor/files/rebalance-monitor.json

Run after editing either source: ``python deploy/helm/sync_files.py`` (``--check`` only reports
copies that differ, exit status 1). tests/deploy/test_helm_chart.py fails while a copy differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "rebalance-monitor"
COPIES = {
    ROOT / "deploy" / "prometheus" / "rules.yml": CHART / "files" / "rules.yml",
    ROOT / "dashboards" / "rebalance-monitor.json": CHART / "files" / "rebalance-monitor.json",
}


def stale() -> list[Path]:
    """The copies whose bytes differ from their source's."""
    return [copy for source, copy in COPIES.items() if not copy.is_file() or copy.read_bytes() != source.read_bytes()]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        for copy in stale():
            print(f"stale: {copy.relative_to(ROOT)} (run python deploy/helm/sync_files.py)")
        return 1 if stale() else 0
    if argv:
        print("usage: python deploy/helm/sync_files.py [--check]", file=sys.stderr)
        return 2
    for source, copy in COPIES.items():
        data = source.read_bytes()
        if not copy.is_file() or copy.read_bytes() != data:
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(data)
            print(f"{source.relative_to(ROOT)} -> {copy.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
