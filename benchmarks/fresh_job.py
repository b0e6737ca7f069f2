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
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.procfs import cpu_seconds, is_java, rss_bytes, tree
from testbed.broker import free_port


@dataclass
class Run:
    seconds: float = 0.0  # process start to every record counted and every group shown
    first_answer: float = 0.0  # process start to the first /metrics with any group
    peak_rss: int = 0
    cpu_seconds: float = 0.0
    scrape_seconds: float = 0.0  # the median of ``scrapes``
    scrape_bytes: int = 0
    scrapes: list[float] = field(default_factory=list)  # three scrapes in a row once every group is shown
    # At the peak: the Python driver, Spark's JVM and the Python workers (and whatever they started).
    peak_by_kind: dict[str, int] = field(default_factory=dict)
    # At the last sample, after the final scrape: what stays resident once the backlog is folded.
    end_by_kind: dict[str, int] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)


# The job's own two series, found in the scrape's bytes: parsing the whole exposition (165 MB at
# 100,000 groups) in Python took longer than the job's answer and held one of the machine's two cores.
_RECORDS = re.compile(rb"^rebalance_monitor_records_total\{[^}]*\} (\S+)$", re.MULTILINE)
_GROUPS = re.compile(rb"^rebalance_monitor_groups\{[^}]*\} (\S+)$", re.MULTILINE)


def total(pattern: re.Pattern[bytes], body: bytes) -> float:
    """Sum of the values ``pattern`` (one group: the value) finds in an exposition."""
    return sum(float(m.group(1)) for m in pattern.finditer(body))


def series(name: bytes, body: bytes) -> int:
    """How many series of the family ``name`` an exposition holds."""
    return len(re.findall(rb"^" + re.escape(name) + rb"\{", body, re.MULTILINE))


def _scrape(url: str) -> tuple[bytes, float]:
    started = time.monotonic()
    body = urllib.request.urlopen(url, timeout=300).read()
    return body, time.monotonic() - started


def watch(command: list[str], url: str, done: Callable[[bytes], bool], shown: Callable[[bytes], bool],
          workdir: Path, *, timeout: float = 900, env: dict[str, str] | None = None,
          describe: Callable[[bytes], str] = lambda body: "") -> Run:
    """Start ``command`` as a fresh process and time it until its ``url`` answers ``done`` (and, first,
    ``shown``); peak RSS of its process tree sampled every 0.5 s, its CPU seconds at ``done``. Each scrape
    until then is written to ``scrapes.tsv`` (when it ended, its seconds and bytes, ``describe`` of it once
    ``done`` has read it), to place a run's time between the fold and the scrapes."""
    log = (workdir / "process.log").open("w")
    trace = (workdir / "scrapes.tsv").open("w")
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, **(env or {})})
    run = Run()
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.5):
            by_kind: dict[str, int] = {}
            for pid in tree(process.pid):
                kind = "driver" if pid == process.pid else "jvm" if is_java(pid) else "workers"
                by_kind[kind] = by_kind.get(kind, 0) + rss_bytes(pid)
            if sum(by_kind.values()) > run.peak_rss:
                run.peak_rss, run.peak_by_kind = sum(by_kind.values()), by_kind
            run.end_by_kind = by_kind

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        deadline = started + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                text = (workdir / "process.log").read_text(errors="replace")
                causes = [line for line in text.splitlines() if re.search(r"OutOfMemory|Exception|ERROR", line)]
                raise RuntimeError(f"{command[0]} exited with {process.returncode}; first errors:\n"
                                   + "\n".join(causes[:20]))
            try:
                body, seconds = _scrape(url)
            except OSError:
                time.sleep(0.25)
                continue
            now = time.monotonic() - started
            if not run.first_answer and shown(body):
                run.first_answer = now
            finished = done(body)
            trace.write(f"{now:.2f}\t{seconds:.2f}\t{len(body)}\t{describe(body)}\n")
            if finished:
                run.seconds = now
                break
            time.sleep(0.25)
        else:
            raise TimeoutError(f"{timeout}s without the whole answer from {command[0]}")
        run.cpu_seconds = sum(cpu_seconds(p) for p in tree(process.pid))
        for _ in range(3):  # the first may meet the lag service's first pass
            body, seconds = _scrape(url)
            run.scrapes.append(seconds)
        run.scrape_seconds, run.scrape_bytes = statistics.median(run.scrapes), len(body)
    finally:
        stop_sampling.set()
        sampler.join(2)
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        trace.close()
    return run


def run_fresh(bootstrap: str, topic: str | None, records: int, groups: int, workdir: Path, *extra: str,
              partitions: int = 0, timeout: float = 900, env: dict[str, str] | None = None) -> Run:
    """One fresh job process on ``topic`` (None: ``__consumer_offsets`` itself) until it counts
    ``records``, shows ``groups`` and, given ``partitions``, the lag of that many group partitions."""
    port = free_port()
    command = [sys.executable, "-m", "streaming.cli", "run", "--bootstrap-server", bootstrap,
               *(["--topic", topic] if topic else []),
               "--checkpoint-dir", str(workdir / "checkpoint"), "--metrics-host", "127.0.0.1", "--metrics-port",
               str(port), "--trigger-seconds", "1", "--cluster", "bench", "--exclude-groups", "^$", *extra]

    counted = [0.0]  # records the last scrape counted, for its line in scrapes.tsv (no second pass over it)

    def done(body: bytes) -> bool:
        counted[0] = total(_RECORDS, body)
        return (counted[0] >= records and total(_GROUPS, body) >= groups
                and (not partitions or series(b"kafka_consumergroup_partition_lag", body) >= partitions))

    run = watch(command, f"http://127.0.0.1:{port}/metrics", done, lambda body: total(_GROUPS, body) > 0, workdir,
                timeout=timeout, env=env, describe=lambda body: f"{counted[0]:.0f}")
    text = (workdir / "process.log").read_text(errors="replace")
    run.batches = re.findall(r"batch \d+: .*", text)
    return run
