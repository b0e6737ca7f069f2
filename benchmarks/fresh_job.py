"""The job as an operator starts it, timed from process start: ``rebalance-monitor run`` in its own process.

For a backlog topic, the seconds from the process's start until ``/metrics`` both counts every
record and shows every group (a record counted is not yet a group rendered), the peak RSS summed
over the job's whole process tree (Python driver, Spark's JVM, Python workers; sampled every
0.5 s), the CPU seconds the tree used, and the batch log lines. One fresh process per run, so no
run inherits another's warm JVM or memory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testbed.broker import free_port


def child_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo.extend(child_pids(current))
    return pids


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _is_java(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "java"
    except OSError:
        return False


def _cpu_seconds(pid: int) -> float:
    """User + system seconds of a process and of its waited-for children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(v) for v in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    seconds: float = 0.0  # process start to every record counted and every group shown
    first_answer: float = 0.0  # process start to the first /metrics with any group
    peak_rss: int = 0
    cpu_seconds: float = 0.0
    scrape_seconds: float = 0.0
    scrape_bytes: int = 0
    # At the peak: the Python driver, Spark's JVM and the Python workers (and whatever they started).
    peak_by_kind: dict[str, int] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)


# The job's own two series, found in the scrape's bytes: parsing the whole exposition (165 MB at
# 100,000 groups) in Python took longer than the job's answer and held one of the machine's two cores.
_RECORDS = re.compile(rb"^rebalance_monitor_records_total\{[^}]*\} (\S+)$", re.MULTILINE)
_GROUPS = re.compile(rb"^rebalance_monitor_groups\{[^}]*\} (\S+)$", re.MULTILINE)


def _counts(url: str) -> tuple[float, int, float, int]:
    """Records counted, groups exported, scrape seconds and bytes."""
    started = time.monotonic()
    body = urllib.request.urlopen(url, timeout=300).read()
    took = time.monotonic() - started
    records = sum(float(m.group(1)) for m in _RECORDS.finditer(body))
    groups = int(sum(float(m.group(1)) for m in _GROUPS.finditer(body)))
    return records, groups, took, len(body)


def run_fresh(bootstrap: str, topic: str, records: int, groups: int, workdir: Path, *extra: str,
              timeout: float = 900, env: dict[str, str] | None = None) -> Run:
    """One fresh job process on ``topic`` until it counts ``records`` and shows ``groups``."""
    port = free_port()
    log = (workdir / "job.log").open("w")
    command = [sys.executable, "-m", "streaming.cli", "run", "--bootstrap-server", bootstrap, "--topic", topic,
               "--checkpoint-dir", str(workdir / "checkpoint"), "--metrics-host", "127.0.0.1", "--metrics-port",
               str(port), "--trigger-seconds", "1", "--cluster", "bench", "--exclude-groups", "^$", *extra]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, **(env or {})})
    run = Run()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            by_kind: dict[str, int] = {}
            for pid in _tree(process.pid):
                kind = "driver" if pid == process.pid else "jvm" if _is_java(pid) else "workers"
                by_kind[kind] = by_kind.get(kind, 0) + rss_bytes(pid)
            if sum(by_kind.values()) > run.peak_rss:
                run.peak_rss, run.peak_by_kind = sum(by_kind.values()), by_kind

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = started + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                text = (workdir / "job.log").read_text(errors="replace")
                causes = [line for line in text.splitlines() if re.search(r"OutOfMemory|Exception|ERROR", line)]
                raise RuntimeError(f"job exited with {process.returncode}; first errors:\n" + "\n".join(causes[:20]))
            try:
                counted, shown, _, _ = _counts(url)
            except OSError:
                time.sleep(0.25)
                continue
            now = time.monotonic() - started
            if shown and not run.first_answer:
                run.first_answer = now
            if counted >= records and shown >= groups:
                run.seconds = now
                break
            time.sleep(0.25)
        else:
            raise TimeoutError(f"{timeout}s without every record and group")
        run.cpu_seconds = sum(_cpu_seconds(p) for p in _tree(process.pid))
        _, _, run.scrape_seconds, run.scrape_bytes = _counts(url)
    finally:
        done.set()
        sampler.join(2)
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    text = (workdir / "job.log").read_text(errors="replace")
    run.batches = re.findall(r"batch \d+: .*", text)
    return run
