"""deploy/alertmanager/alertmanager.yml: valid for amtool, routes every shipped alert to the team
that acts on it, and its inhibitions mute what a stalled or absent monitor makes meaningless, checked
on a real Alertmanager (Debian package prometheus-alertmanager, installed by `make setup`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from testbed.broker import free_port
from tests.conftest import installed
from tests.deploy.test_ops_files import RULES, rule_blocks

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"
PLATFORM_PAGER = "kafka-platform-pager"


@pytest.fixture(scope="module")
def amtool() -> str:
    return installed("amtool")


def shipped_alerts() -> dict[str, set[tuple[str, str]]]:
    """alertname -> its (severity, scope) pairs in rules.yml (one alert may have two severities)."""
    alerts: dict[str, set[tuple[str, str]]] = {}
    for name, block in rule_blocks(RULES.read_text(), "alert"):
        severity = re.search(r"^\s+severity: (\w+)$", block, re.M)
        scope = re.search(r"^\s+scope: (\w+)$", block, re.M)
        assert severity and scope, name
        alerts.setdefault(name, set()).add((severity.group(1), scope.group(1)))
    return alerts


def route(amtool: str, **labels: str) -> str:
    """The receiver amtool's routing test picks for an alert with ``labels``."""
    result = subprocess.run([amtool, "config", "routes", "test", f"--config.file={CONFIG}",
                             *(f"{k}={v}" for k, v in labels.items())],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_amtool_check_config(amtool: str) -> None:
    result = subprocess.run([amtool, "check-config", str(CONFIG)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_shipped_alert_reaches_the_team_that_acts(amtool: str) -> None:
    """Group alerts go to the group's owners, never the platform pager, whatever their severity
    (RebalanceStorm included); critical cluster and monitor alerts page the platform."""
    alerts = shipped_alerts()
    assert len(alerts) >= 19
    for name, pairs in alerts.items():
        for severity, scope in pairs:
            receiver = route(amtool, alertname=name, severity=severity, scope=scope, cluster="prod", group="orders")
            if scope == "group":
                assert receiver == "consumer-group-owners", (name, severity, receiver)
            elif severity == "critical":
                assert receiver == PLATFORM_PAGER, (name, severity, receiver)
            else:
                assert receiver == "kafka-platform-tickets", (name, severity, receiver)
    # The per-team example: a payments group's critical lag pages payments, its warnings go to chat.
    assert route(amtool, alertname="ConsumerGroupLagSecondsHigh", severity="critical", scope="group",
                 group="payments-billing") == "payments-pager"
    assert route(amtool, alertname="RebalanceStorm", severity="warning", scope="group",
                 group="payments-billing") == "payments-chat"


def test_inhibitions_name_shipped_alerts() -> None:
    """A renamed alert would silently break an inhibition."""
    named = set()
    for pattern in re.findall(r"""alertname[!=]~?"([^"]+)\"""", CONFIG.read_text()):
        named |= set(pattern.split("|"))
    assert named, "no inhibition names an alert"
    assert named <= shipped_alerts().keys(), sorted(named - shipped_alerts().keys())


# ------------------------------------------------------------------------------ a real Alertmanager


class LocalAlertmanager:
    """One Alertmanager with the shipped configuration, no clustering, data in ``work``."""

    def __init__(self, binary: str, work: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (work / "alertmanager.log").open("wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={CONFIG}", f"--storage.path={work}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--cluster.listen-address="], stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "alertmanager exited; see its log"
            with contextlib.suppress(OSError):  # not listening yet (URLError is an OSError)
                if urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError("alertmanager not ready")

    def post(self, alerts: list[dict[str, Any]]) -> None:
        request = urllib.request.Request(f"{self.url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        assert urllib.request.urlopen(request, timeout=10).status == 200

    def alerts(self) -> list[dict[str, Any]]:
        return json.loads(urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10).read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[LocalAlertmanager]:
    # Debian names the server prometheus-alertmanager; upstream's release calls it alertmanager.
    binary = shutil.which("alertmanager") or installed("prometheus-alertmanager")
    manager = LocalAlertmanager(binary, tmp_path)
    try:
        manager.wait_ready()
        yield manager
    finally:
        manager.stop()


def alert(**labels: str) -> dict[str, Any]:
    """A firing alert as Prometheus sends it, with its rule's scope and (unless given) severity."""
    [(severity, scope), *_] = sorted(shipped_alerts()[labels["alertname"]])
    now = datetime.now(UTC)
    return {"labels": {"severity": severity, "scope": scope, **labels},
            "startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=5)).isoformat()}


def muted_now(manager: LocalAlertmanager) -> dict[tuple[str, str], bool]:
    """(alertname, cluster or instance) -> whether an inhibition mutes it now."""
    return {(a["labels"]["alertname"], a["labels"].get("cluster") or a["labels"].get("instance", "")):
            bool(a["status"]["inhibitedBy"]) for a in manager.alerts()}


def muted(manager: LocalAlertmanager, expected: dict[tuple[str, str], bool],
          timeout: float = 10) -> dict[tuple[str, str], bool]:
    """What :func:`muted_now` shows once it equals ``expected``, or at ``timeout``: Alertmanager marks an
    alert inhibited as it processes the inhibiting one, not as the request that posted both returns (a
    loaded machine read them unmuted right after the post)."""
    deadline = time.monotonic() + timeout
    while (shown := muted_now(manager)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return shown


def test_stalled_monitor_mutes_its_clusters_group_alerts_only(alertmanager: LocalAlertmanager) -> None:
    alertmanager.post([
        alert(alertname="MonitorStalled", cluster="a"),
        alert(alertname="RebalanceStorm", cluster="a", group="orders"),
        alert(alertname="RebalanceStormWidespread", cluster="a"),
        alert(alertname="LagPollerStalled", cluster="a"),
        alert(alertname="RebalanceStorm", cluster="b", group="orders"),
        alert(alertname="MonitorSeriesDropped", cluster="a"),
    ])
    expected = {
        ("MonitorStalled", "a"): False,
        ("RebalanceStorm", "a"): True,
        ("RebalanceStormWidespread", "a"): True,
        ("LagPollerStalled", "a"): True,
        ("RebalanceStorm", "b"): False,  # another cluster's monitor is fine
        ("MonitorSeriesDropped", "a"): False,  # still true, and still the platform's to fix
    }
    assert muted(alertmanager, expected) == expected


def test_absent_monitor_mutes_everything_else(alertmanager: LocalAlertmanager) -> None:
    alertmanager.post([
        alert(alertname="MonitorAbsent"),
        alert(alertname="MonitorDown", job="kafka-rebalance-monitor", instance="monitor:10308"),
        alert(alertname="MonitorStalled", cluster="a"),
        alert(alertname="ConsumerGroupLagSecondsHigh", cluster="b", group="orders", topic="t"),
    ])
    expected = {("MonitorAbsent", ""): False, ("MonitorDown", "monitor:10308"): True,
                ("MonitorStalled", "a"): True, ("ConsumerGroupLagSecondsHigh", "b"): True}
    assert muted(alertmanager, expected) == expected


def test_lag_poller_and_critical_lag_inhibitions(alertmanager: LocalAlertmanager) -> None:
    """A stalled lag poller mutes its cluster's lag alerts; the critical lag alert mutes the
    warning one for the same group and topic, not for another topic."""
    lag = "ConsumerGroupLagSecondsHigh"
    alertmanager.post([
        alert(alertname=lag, severity="warning", cluster="a", group="g", topic="t1"),
        alert(alertname=lag, severity="critical", cluster="a", group="g", topic="t1"),
        alert(alertname=lag, severity="warning", cluster="a", group="g", topic="t2"),
        alert(alertname=lag, severity="warning", cluster="c", group="g", topic="t1"),
        alert(alertname="LagPollerStalled", cluster="c"),
    ])
    expected = {("a", "t1", "warning"): True, ("a", "t1", "critical"): False,
                ("a", "t2", "warning"): False, ("c", "t1", "warning"): True}
    deadline = time.monotonic() + 10  # inhibitions are marked as Alertmanager processes the alerts (see muted)
    while True:
        status = {(a["labels"]["cluster"], a["labels"]["topic"], a["labels"]["severity"]):
                  bool(a["status"]["inhibitedBy"]) for a in alertmanager.alerts() if a["labels"]["alertname"] == lag}
        if status == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == expected
