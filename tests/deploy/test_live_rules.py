"""The live-state rules (the kafka-consumergroup.live group of deploy/prometheus/rules.yml) under promtool's
unit tests, and their runbooks present."""

from __future__ import annotations

import re

from tests.deploy.test_ops_files import PROMETHEUS, ROOT, run_promtool


def test_promtool_live_rule_unit_tests(promtool: str) -> None:
    run_promtool(promtool, "test", "rules", "rules_live_test.yml", cwd=PROMETHEUS)


def test_every_live_alert_has_its_runbook() -> None:
    text = (PROMETHEUS / "rules.yml").read_text()
    live = text[text.index("- name: kafka-consumergroup.live"):]
    alerts = re.findall(r"- alert: (\w+)", live)
    assert alerts
    for alert in alerts:
        assert f"docs/runbooks/{alert}.md" in live
        runbook = (ROOT / "docs" / "runbooks" / f"{alert}.md").read_text()
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in runbook, (alert, section)
