"""Spark's start with and without the class archive (streaming/class_archive.py), fresh processes in turn.

``python -m benchmarks.class_archive_start [REPEATS]`` (default 5) starts, in a new process each time,
the session the job starts (``streaming.job.spark_session``, local[2]) and runs a first Arrow job on it
(a ``mapInArrow`` over two partitions: what the decode stage needs before its first batch), once with
the archive ``make setup`` wrote and once without it (``-Xshare`` left to the JVM's own base archive),
alternating. Prints each pair (times, and the driver JVM's RSS after the first job: the archive is
mapped, file pages rather than the heap's), then the medians and their ratios. No broker: the Kafka source's own
start is the same either way.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from streaming import class_archive

ROOT = Path(__file__).resolve().parents[1]


def one() -> None:
    """One start, in this process (the archive: ``$REBALANCE_MONITOR_CLASS_ARCHIVE``): prints the seconds to a
    session and to the first job's end as JSON."""
    started = time.perf_counter()
    from streaming.job import spark_session
    from streaming.options import parse_args

    argv = ["--bootstrap-server", "unused", "--master", "local[2]"]
    spark = spark_session(parse_args(argv, environ={}), {"spark.ui.enabled": "false"})
    session = time.perf_counter()
    frame = spark.createDataFrame([(i, str(i)) for i in range(100)], "x int, y string").repartition(2)
    frame.mapInArrow(lambda batches: batches, frame.schema).collect()
    done = time.perf_counter()
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    rss = {key: int(status[key].split()[0]) / 1024 for key in ("VmRSS", "RssAnon", "RssFile")}
    print(json.dumps({"session_s": session - started, "first_job_s": done - started, **rss}), flush=True)
    spark.stop()


def start(archive: Path) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-m", "benchmarks.class_archive_start", "--one"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, class_archive.ENV_VAR: str(archive)})
    if result.returncode != 0:
        raise SystemExit(result.stderr[-2000:])
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--one":
        one()
        return
    repeats = int(argv[0]) if argv else 5
    archive = class_archive.default_path()
    if not archive.is_file():
        raise SystemExit(f"no class archive at {archive}: make class-archive")
    runs: dict[str, list[dict[str, float]]] = {"with the archive": [], "without (baseline)": []}
    for n in range(repeats):
        for label, path in (("with the archive", archive), ("without (baseline)", Path("/nonexistent.jsa"))):
            figures = start(path)
            runs[label].append(figures)
            print(f"run {n + 1}, {label}: session {figures['session_s']:.2f} s, first job done "
                  f"{figures['first_job_s']:.2f} s; the JVM's RSS {figures['VmRSS']:.0f} MiB (anonymous "
                  f"{figures['RssAnon']:.0f}, files {figures['RssFile']:.0f})", flush=True)
    for key, what in (("first_job_s", "process start to the first Arrow job's end, s"),
                      ("VmRSS", "the driver JVM's RSS after it, MiB")):
        ours, baseline = (statistics.median(r[key] for r in v) for v in runs.values())
        print(f"{what}, median of {repeats}: {ours:.2f} with the archive, {baseline:.2f} without: "
              f"{ours / baseline:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
