"""A real local Prometheus scraping the monitor, for ``make run`` and the end-to-end tests.

The configuration is derived from the shipped one (deploy/prometheus/prometheus.yml: its job
name and metrics path) with the target, intervals and rule files swapped for the local run.
Data lives in a directory of its own; ``stop`` leaves no process behind.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from testbed.broker import free_port
from testbed.jvm import PROJECT_ROOT

SHIPPED = PROJECT_ROOT / "deploy" / "prometheus"
SHIPPED_CONFIG = SHIPPED / "prometheus.yml"
SHIPPED_RULES = SHIPPED / "rules.yml"
INSTALL_HINT = "install Prometheus: `make setup` as root does it (Debian package prometheus)"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise RuntimeError(f"prometheus is not on PATH: {INSTALL_HINT}")
    return found


def shipped_scrape_job() -> tuple[str, str]:
    """(job_name, metrics_path) of the shipped scrape config: the alerts match that job name."""
    text = SHIPPED_CONFIG.read_text()
    job = re.search(r"^\s*- job_name: *(\S+)", text, re.M)
    path = re.search(r"^\s*metrics_path: *(\S+)", text, re.M)
    if job is None or path is None:
        raise RuntimeError(f"{SHIPPED_CONFIG} has no job_name / metrics_path")
    return job.group(1), path.group(1)


def fast_rules(target: Path, for_duration: str, stall_seconds: int | None = None) -> Path:
    """A copy of the shipped rules with every ``for:`` set to ``for_duration`` and, when given,
    MonitorStalled's 5-minute threshold cut to ``stall_seconds``: the same expressions, on a
    demo's or a test's time scale."""
    text = re.sub(r"^(\s+for: )\S+$", rf"\g<1>{for_duration}", SHIPPED_RULES.read_text(), flags=re.M)
    if stall_seconds is not None:
        text, count = re.subn(r"(rebalance_monitor_last_batch_timestamp_seconds\[\w+\]\)\)) > 300",
                              rf"\1 > {stall_seconds}", text)
        if count != 1:
            raise RuntimeError("MonitorStalled's expression changed: update testbed.prometheus.fast_rules")
    target.write_text(text)
    return target


class LocalPrometheus:
    """One Prometheus server; ``port=0`` picks a free port."""

    def __init__(self, data_dir: Path, targets: list[str], *, port: int = 0, rules: Path = SHIPPED_RULES,
                 scrape_interval: str = "15s", evaluation_interval: str = "15s", binary: str | None = None) -> None:
        self.binary = binary  # None: the prometheus on PATH
        self.data_dir = Path(data_dir)
        self.targets = targets
        self.port = port or free_port()
        self.rules = rules
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        job, metrics_path = shipped_scrape_job()
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [self._rule_file()],
            "scrape_configs": [{"job_name": job, "metrics_path": metrics_path,
                                "static_configs": [{"targets": self.targets}]}],
        }

    def _rule_file(self) -> str:
        """The rules' path as the config names it: relative when they sit beside it (Prometheus, started in that
        directory, then shows the name, not this machine's path, on its alerts page), else absolute."""
        rules = self.rules.resolve()
        if rules.is_relative_to(self.data_dir.resolve()):
            return str(rules.relative_to(self.data_dir.resolve()))
        return str(rules)

    def start(self, timeout: float = 60) -> LocalPrometheus:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "prometheus.yml"
        config.write_text(json.dumps(self.config(), indent=2))  # JSON is YAML
        # Absolute: the server starts in its data directory.
        binary = str(Path(shutil.which(self.binary) or self.binary).resolve()) if self.binary else prometheus_binary()
        log = (self.data_dir / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config.name}", f"--storage.tsdb.path={(self.data_dir / 'tsdb').resolve()}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.data_dir)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}; see {self.data_dir}")
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"prometheus not ready in {timeout:.0f}s; see {self.data_dir}/prometheus.log")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def page(self, name: str) -> str:
        """URL of a UI page: Debian's build serves only the classic UI, under /classic/."""
        try:
            urllib.request.urlopen(f"{self.url}/{name}", timeout=5)
        except urllib.error.HTTPError:
            return f"{self.url}/classic/{name}"
        return f"{self.url}/{name}"

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns ``data``, raises with Prometheus' own error text."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            body = json.loads(urllib.request.urlopen(url, timeout=30).read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
        if body.get("status") != "success":
            raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (a scalar becomes a one-element list)."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """Active (pending or firing) alerts named ``name``."""
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]
