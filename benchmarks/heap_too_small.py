"""A backlog the driver's heap cannot hold (issue 28, "no silent death"), run as an operator would meet it.

W2's backlog (100,000 groups) on a fresh broker; the job started as its own process with a driver heap
too small for the first batch (``--driver-memory``, 512m by default), beside a real Prometheus loading
the shipped rules; restarted whenever it dies, as a kubelet would, on the same checkpoint and port.
Printed: how long each start lived, its exit code and the line that says why; when MonitorStalled
fired in Prometheus, counted from the first start. Before the fix the job neither completed a batch nor
ended: ``/-/healthy`` said ok and no alert could fire.

    python -m benchmarks.heap_too_small [--driver-memory 512m] [--minutes 12]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.synthetic import W2, backlog, produce
from testbed.broker import LocalKafka, free_port
from testbed.prometheus import LocalPrometheus
from testbed.workload import Admin

TOPIC = "bench-heap-w2"
WHY = re.compile(r"OutOfMemoryError|Terminating due to|JVM .*(gone|exited)|exit(ed|ing) with", re.IGNORECASE)


def start_job(bootstrap: str, workdir: Path, port: int, driver_memory: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "streaming.cli", "run", "--bootstrap-server", bootstrap, "--topic", TOPIC,
               "--checkpoint-dir", str(workdir / "checkpoint"), "--metrics-host", "127.0.0.1",
               "--metrics-port", str(port), "--cluster", "bench", "--exclude-groups", "^$",
               "--lag-granularity", "topic"]
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell"}
    with log.open("ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stalled_fired(prometheus: LocalPrometheus) -> bool:
    return any(a["state"] == "firing" and a["labels"].get("cluster") == "bench"
               for a in prometheus.alerts("MonitorStalled"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--driver-memory", default="512m")
    parser.add_argument("--minutes", type=float, default=12.0, help="give up on MonitorStalled after this long")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="heap-too-small-") as tmp:
        work = Path(tmp)
        broker = LocalKafka(work / "kafka")
        broker.start()
        prometheus = None
        try:
            admin = Admin(broker.bootstrap)
            admin.create_topic(TOPIC, W2.topic_partitions)
            admin.close()
            sent = produce(broker.bootstrap, TOPIC, backlog(W2, int(time.time() * 1000)))
            print(f"backlog: {sent:,} records, {W2.groups:,} groups; driver heap {args.driver_memory}", flush=True)
            port = free_port()
            prometheus = LocalPrometheus(work / "prometheus", [f"127.0.0.1:{port}"], scrape_interval="5s",
                                         evaluation_interval="5s").start()
            first = time.monotonic()
            fired_at = None
            starts = 0
            while time.monotonic() - first < args.minutes * 60 and fired_at is None:
                log = work / f"job-{starts}.log"
                started = time.monotonic()
                job = start_job(broker.bootstrap, work, port, args.driver_memory, log)
                starts += 1
                while job.poll() is None and fired_at is None and time.monotonic() - first < args.minutes * 60:
                    if stalled_fired(prometheus):
                        fired_at = time.monotonic() - first
                    time.sleep(1)
                if job.poll() is None:
                    job.terminate()
                    job.wait(60)
                    print(f"start {starts}: still running after {time.monotonic() - started:.0f}s (stopped)")
                    continue
                lines = [line for line in log.read_text(errors="replace").splitlines() if WHY.search(line)]
                print(f"start {starts}: exited {job.returncode} after {time.monotonic() - started:.0f}s; "
                      f"{lines[-1].strip()[:240] if lines else 'no reason in its log'}", flush=True)
            print(f"MonitorStalled firing in Prometheus {fired_at:.0f}s after the first start" if fired_at
                  else f"MonitorStalled did not fire within {args.minutes:g} minutes", flush=True)
        finally:
            if prometheus is not None:
                prometheus.stop()
            broker.stop()


if __name__ == "__main__":
    main()
