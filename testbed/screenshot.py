"""Screenshot Prometheus' alerts page once the demo's rebalance storm alert fires.

``python -m testbed.screenshot`` beside a running ``make run``: it waits (through the HTTP
API) until RebalanceStorm is firing, then has headless Chromium (Debian package chromium)
render the alerts page to a PNG, so what a newcomer should see is checked by looking at it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

from testbed.prometheus import LocalPrometheus


def wait_firing(prometheus: LocalPrometheus, alert: str, timeout: float) -> list[str]:
    """Groups for which ``alert`` is firing, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        firing = [a["labels"].get("group", "") for a in prometheus.alerts(alert) if a["state"] == "firing"]
        if firing:
            return firing
        if time.monotonic() > deadline:
            raise TimeoutError(f"{alert} did not fire within {timeout:.0f}s")
        time.sleep(5)


def screenshot(url: str, out: Path, size: str = "1400,1600") -> Path:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise RuntimeError("chromium not on PATH: apt-get install chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--hide-scrollbars", f"--window-size={size}", "--virtual-time-budget=15000",
                    f"--screenshot={out.resolve()}", url], check=True, capture_output=True, timeout=120)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testbed.screenshot", description=__doc__)
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090", help="the URL make run printed")
    parser.add_argument("--alert", default="RebalanceStorm")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the alert to fire")
    parser.add_argument("--out", type=Path, default=Path(".local/prometheus-alerts.png"))
    args = parser.parse_args(argv)
    prometheus = LocalPrometheus(Path("."), [], port=int(args.prometheus.rsplit(":", 1)[1]))
    groups = wait_firing(prometheus, args.alert, args.timeout)
    print(f"{args.alert} firing for {', '.join(groups)}", flush=True)
    path = screenshot(prometheus.page("alerts"), args.out)
    print(f"Screenshot: {path}", flush=True)


if __name__ == "__main__":
    main()
