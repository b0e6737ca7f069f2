"""``make bench-job``: the real job against a local broker, each figure beside baselines from the same run.

Baselines, on the same topic in the same run: Kafka's own ``ConsumerPerformance`` (the ceiling
of reading the topic at all), Spark's Kafka source read + ``count()``, and one Python process
consuming with confluent-kafka and calling ``decoders.decode`` per record (what a simple
exporter does). Workloads and targets: docs/benchmarks.md. Results also go to a JSON file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import cold_start
from benchmarks.fresh_job import Run, run_fresh
from benchmarks.procfs import rss_bytes, tree
from benchmarks.standalone import WorkerSampler, standalone
from benchmarks.synthetic import W1, W2, WORKLOADS, Workload, backlog, group_metadata, produce
from decoders import coordinator_partition, decode
from streaming.decode.source import FETCH_OPTIONS
from streaming.job import Monitor, spark_session
from streaming.options import parse_args
from testbed.broker import LocalKafka, run_kafka_tool
from testbed.workload import Admin
from tests.support.decoder_encoder import encode_key

# A fresh process's targets (seconds to every group shown, peak GiB of the tree): issue 18's, for W1 and W2 only.
FRESH_TARGETS: dict[Workload, tuple[float, float]] = {W1: (10.0, 1.25), W2: (30.0, 2.0)}

@dataclass
class Figure:
    name: str
    value: float
    unit: str
    target: str = ""
    baseline: str = ""
    met: bool | None = None


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)
        verdict = "" if figure.met is None else ("  MET" if figure.met else "  MISSED")
        print(f"  {figure.name}: {figure.value:,.3f} {figure.unit}"
              f"{'  [' + figure.baseline + ']' if figure.baseline else ''}"
              f"{'  target ' + figure.target if figure.target else ''}{verdict}", flush=True)


# ------------------------------------------------------------------------------ resources


class PeakRss(threading.Thread):
    """Peak summed RSS of this process and its descendants, leaving out the broker's tree."""

    def __init__(self, exclude: set[int]) -> None:
        super().__init__(daemon=True)
        self.exclude, self.peak, self._done = exclude, 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.25):
            self.peak = max(self.peak, sum(rss_bytes(p) for p in tree(os.getpid(), self.exclude)))

    def stop(self) -> int:
        self._done.set()
        self.join(5)
        return self.peak


# ------------------------------------------------------------------------------ baselines


def consumer_performance(bootstrap: str, topic: str, records: int) -> float:
    """Records per second by Kafka's own ConsumerPerformance, first record to last (its fetch rate)."""
    result = run_kafka_tool("org.apache.kafka.tools.ConsumerPerformance",
                            ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                             "--timeout", "60000"], timeout=600)
    header, values = [line for line in result.stdout.splitlines() if line.strip()][-2:]
    row = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")], strict=False))
    return float(row["fetch.nMsg.sec"])


def spark_count(spark: Any, bootstrap: str, topic: str, tuned: bool) -> tuple[float, int]:
    """Seconds and rows of a batch read of the topic through Spark's Kafka source, then count()."""
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    if tuned:
        for name, value in FETCH_OPTIONS.items():
            reader = reader.option(name, value)
    started = time.monotonic()
    rows = reader.load().select("key", "value").count()
    return time.monotonic() - started, rows


def python_decode(bootstrap: str, topic: str, records: int) -> float:
    """Records per second of one confluent-kafka consumer calling decoders.decode per record."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-py-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen, started = 0, None
    deadline = time.monotonic() + 600
    while seen < records and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            if message.error():
                continue
            if started is None:
                started = time.monotonic()
            decode(message.key(), message.value())
            seen += 1
    elapsed = time.monotonic() - (started or time.monotonic())
    consumer.close()
    return seen / elapsed if elapsed > 0 else 0.0


# ------------------------------------------------------------------------------ the job


def records_counted(monitor: Monitor) -> float:
    return sum(s.value for metric in monitor.instruments.registry.collect()
               if metric.name == "rebalance_monitor_records"
               for s in metric.samples if s.name == "rebalance_monitor_records_total")


def start_job(spark: Any, bootstrap: str, topic: str, workdir: Path, *extra: str) -> Monitor:
    options = parse_args(["--bootstrap-server", bootstrap, "--topic", topic, "--checkpoint-dir", str(workdir),
                          "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--trigger-seconds", "1",
                          "--cluster", "bench", *extra])
    return Monitor(spark, options).start()


def wait_counted(monitor: Monitor, records: int, timeout: float) -> float:
    """Wall time (monotonic) when the batch holding the ``records``-th record had finished: its sink
    (group stage, state delta, exporter) done, as its progress event reports. Records are counted
    inside the sink, so the batch that counted them ends at or after the count is first seen."""
    deadline = time.monotonic() + timeout
    counted_at: float | None = None
    while time.monotonic() < deadline:
        if monitor.query.exception():
            raise RuntimeError(f"job failed: {monitor.query.exception()}")
        if counted_at is None and records_counted(monitor) >= records:
            counted_at = time.time() - 0.25  # the previous poll could have just missed it
        last = monitor.query.lastProgress if counted_at is not None else None
        if last is not None:
            finished = _epoch(last["timestamp"]) + last["batchDuration"] / 1000
            if finished >= counted_at:
                return time.monotonic() - (time.time() - finished)
        time.sleep(0.2)
    raise TimeoutError(f"{records_counted(monitor):.0f} of {records} records counted after {timeout:.0f}s")


def scrape_seconds(url: str, repeats: int = 3) -> tuple[float, int, float]:
    """Median seconds of a gzip scrape (as Prometheus asks), its size, and the median plain scrape."""
    timings, plain, size = [], [], 0
    for _ in range(repeats):
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        started = time.monotonic()
        body = urllib.request.urlopen(request, timeout=300).read()
        timings.append(time.monotonic() - started)
        size = len(gzip.decompress(body))
        started = time.monotonic()
        urllib.request.urlopen(url, timeout=300).read()
        plain.append(time.monotonic() - started)
    return statistics.median(timings), size, statistics.median(plain)


def run_backlog(report: Report, spark: Any, broker: LocalKafka, name: str, workload: Workload, workdir: Path,
                baselines: bool) -> None:
    bootstrap, topic = broker.bootstrap, f"bench-{name}"
    admin = Admin(bootstrap)
    admin.create_topic(topic, workload.topic_partitions)
    admin.close()
    started = time.monotonic()
    sent = produce(bootstrap, topic, backlog(workload, int(time.time() * 1000)))
    print(f"\n{name}: {sent:,} records written in {time.monotonic() - started:.1f}s", flush=True)
    ceiling = None
    if baselines:
        ceiling = consumer_performance(bootstrap, topic, sent)
        report.add(Figure(f"{name} baseline: Kafka ConsumerPerformance", ceiling, "rec/s"))
        cold, rows = spark_count(spark, bootstrap, topic, tuned=False)  # the JVM's first read of this topic
        for tuned, label in ((False, "default fetch sizes"), (True, "the job's fetch sizes")):
            runs = [spark_count(spark, bootstrap, topic, tuned)[0] for _ in range(3)]
            seconds = statistics.median(runs)
            report.add(Figure(f"{name} baseline: Spark Kafka source read + count() ({label}, median of 3)",
                              rows / seconds, "rec/s", baseline=f"{seconds:.1f}s; runs "
                              + ", ".join(f"{r:.1f}" for r in runs) + f"; first read {cold:.1f}s"))
        if sent <= 2_000_000:  # one Python process at ~30k rec/s: minutes for the 5 M topic
            report.add(Figure(f"{name} baseline: confluent-kafka + decoders.decode per record",
                              python_decode(bootstrap, topic, sent), "rec/s"))
    for granularity in (["partition", "topic"] if workload is W2 else ["partition"]):
        rss = PeakRss({broker.process.pid} if broker.process else set())
        rss.start()
        began = time.monotonic()
        monitor = start_job(spark, bootstrap, topic, workdir / f"{name}-{granularity}",
                            "--lag-granularity", granularity)
        try:
            done = wait_counted(monitor, sent, timeout=1800)
            progress = monitor.query.recentProgress
            durations = [p["batchDuration"] / 1000 for p in progress]
            first = progress[0]
            drain = done - began
            label = f"{name} job ({granularity})"
            if granularity == "partition" and workload is not W2:  # the rate target is W1's
                rate = sent / drain
                target = "≥ 250,000 rec/s and ≥ 0.5x ConsumerPerformance"
                met = rate >= 250_000 and (ceiling is None or rate >= 0.5 * ceiling)
                report.add(Figure(f"{label}: drain rate (job start to all counted)", rate, "rec/s", target,
                                  f"{rate / ceiling:.2f}x Kafka's consumer" if ceiling else "", met))
            report.add(Figure(f"{label}: drain time", drain, "s", "≤ 30 s" if workload is W2 else "",
                              f"{len(progress)} batches, first {first['batchDuration'] / 1000:.1f}s, "
                              f"max {max(durations):.1f}s", drain <= 30 if workload is W2 else None))
            time.sleep(1)
            seconds, size, plain = scrape_seconds(monitor.metrics_url)
            limit = 2.0 if granularity == "topic" else 10.0
            report.add(Figure(f"{label}: /metrics scrape (gzip, median of 3)", seconds, "s",
                              f"≤ {limit:.0f} s" if workload is W2 else "",
                              f"{size / 1e6:.1f} MB text, plain {plain:.2f}s", seconds <= limit if workload is W2
                              else None))
        finally:
            monitor.stop()
            peak = rss.stop()
        report.add(Figure(f"{label}: peak RSS of the job's processes", peak / 2**30, "GiB",
                          "≤ 2 GiB" if workload is W2 else "", met=peak <= 2 * 2**30 if workload is W2 else None))


def run_fresh_backlog(report: Report, broker: LocalKafka, name: str, workload: Workload, workdir: Path,
                      repeats: int, baselines: bool, driver_memory: str = "", variants: Sequence[str] = ("",),
                      cluster: Any = None) -> None:
    """The job as an operator starts it, ``repeats`` fresh processes on one backlog: seconds from process
    start until /metrics counts every record and shows every group, beside Kafka's own consumer reading
    the same topic in the same run. Each of ``variants`` (extra job arguments) runs ``repeats`` times. On a
    standalone ``cluster`` the job runs with ``--master`` its URL, and each worker's peak RSS and CPU
    seconds (its executor and Python workers) are printed beside the driver's tree."""
    bootstrap, topic = broker.bootstrap, f"bench-fresh-{name}"
    admin = Admin(bootstrap)
    admin.create_topic(topic, workload.topic_partitions)
    admin.close()
    sent = produce(bootstrap, topic, backlog(workload, int(time.time() * 1000)))
    print(f"\nfresh-{name}: {sent:,} records, {workload.groups:,} groups", flush=True)
    ceiling = consumer_performance(bootstrap, topic, sent) if baselines else None
    if ceiling:
        report.add(Figure(f"fresh-{name} baseline: Kafka ConsumerPerformance reads the topic", sent / ceiling, "s",
                          baseline=f"{ceiling:,.0f} rec/s"))
    granularity = "partition" if workload.partitions > 10 else "topic"  # W1 by partition, the many-group ones by topic
    runs: dict[str, list[Run]] = {variant: [] for variant in variants}
    for i in range(repeats):  # the variants alternate, so the machine's drift falls on each alike
        for v, variant in enumerate(variants):
            run_dir = workdir / f"fresh-{name}-{i}-{v}"
            run_dir.mkdir(parents=True)
            env = {"PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell"} if driver_memory else None
            master = ("--master", cluster.url) if cluster is not None else ()
            workers = WorkerSampler(cluster) if cluster is not None else None
            if workers is not None:
                workers.start()
            try:
                run = run_fresh(bootstrap, topic, sent, workload.groups, run_dir, "--lag-granularity", granularity,
                                *master, *shlex.split(variant), env=env)
            finally:
                if workers is not None:
                    workers.stop()
            runs[variant].append(run)
            print(f"  run {i + 1}{f' [{variant}]' if variant else ''}: {run.seconds:.1f}s, first answer "
                  f"{run.first_answer:.1f}s, peak RSS {run.peak_rss / 2**30:.2f} GiB ("
                  + ", ".join(f"{kind} {size / 2**30:.2f}" for kind, size in sorted(run.peak_by_kind.items()))
                  + f"), {run.cpu_seconds:.0f} CPU-s; scrapes "
                  + ", ".join(f"{seconds:.1f}" for seconds in run.scrapes) + " s; RSS at the end "
                  + ", ".join(f"{kind} {size / 2**30:.2f}" for kind, size in sorted(run.end_by_kind.items()))
                  + "".join(f"\n    {line}" for line in run.batches[:1])
                  + (f"\n    workers: {_workers(workers.figures())}" if workers is not None else ""),
                  flush=True)
    for variant, variant_runs in runs.items():
        _report_fresh(report, f"fresh-{name} job ({granularity}{f', {variant}' if variant else ''}, median of "
                      f"{repeats})", workload, variant_runs, sent, ceiling)


def _workers(figures: dict[str, Any]) -> str:
    return ", ".join(f"{name} peak RSS {figures['worker_peak_rss'][name] / 2**30:.2f} GiB, "
                     f"{figures['worker_cpu_s'][name]:.0f} CPU-s" for name in sorted(figures["worker_peak_rss"]))


def run_cold(report: Report, broker: LocalKafka, workdir: Path, repeats: int, kminion: Path | None) -> None:
    """The job's cold start on the broker's real ``__consumer_offsets`` (500 groups x 100 partitions, 1 M
    commits through OffsetCommit), beside kminion in both its scrape modes when a binary is given. Run
    first: the done checks count at least the workload's records, groups and partitions, and later
    workloads' baselines commit offsets of their own."""
    groups, partitions = 500, 100
    print(f"\ncold: {groups} groups x {partitions} partitions on __consumer_offsets", flush=True)
    commits = cold_start.prepare(broker, groups, partitions, rounds=20)
    runs = cold_start.measure(broker, workdir, commits, groups, partitions, repeats, kminion)
    job = runs.pop("job")
    beside = "; ".join(f"{name} {cold_start.describe(tool_runs)}" for name, tool_runs in runs.items())
    seconds = statistics.median(r.seconds for r in job)
    label = f"cold start on __consumer_offsets, {commits:,} commits (median of {repeats})"
    report.add(Figure(f"{label}: process start to every group partition's lag shown", seconds, "s", "≤ 10 s",
                      "runs " + ", ".join(f"{r.seconds:.1f}" for r in job) + (f"; {beside}" if beside else ""),
                      seconds <= 10.0))
    report.add(Figure(f"{label}: first /metrics with a group", statistics.median(r.first_answer for r in job), "s"))
    peak = statistics.median(r.peak_rss for r in job) / 2**30
    report.add(Figure(f"{label}: peak RSS of the process tree", peak, "GiB", "≤ 1.25 GiB",
                      "runs " + ", ".join(f"{r.peak_rss / 2**30:.2f}" for r in job), met=peak <= 1.25))
    report.add(Figure(f"{label}: CPU seconds of the process tree", statistics.median(r.cpu_seconds for r in job), "s"))


def _report_fresh(report: Report, label: str, workload: Workload, runs: list[Run], sent: int,
                  ceiling: float | None) -> None:
    target_s, target_gib = FRESH_TARGETS.get(workload, (None, None))
    seconds = statistics.median(r.seconds for r in runs)
    report.add(Figure(f"{label}: process start to every record and group shown", seconds, "s",
                      f"≤ {target_s:.0f} s" if target_s else "",
                      "runs " + ", ".join(f"{r.seconds:.1f}" for r in runs)
                      + (f"; {seconds / (sent / ceiling):.1f}x Kafka's consumer" if ceiling else ""),
                      seconds <= target_s if target_s else None))
    report.add(Figure(f"{label}: first /metrics with a group", statistics.median(r.first_answer for r in runs), "s"))
    peak = statistics.median(r.peak_rss for r in runs) / 2**30
    report.add(Figure(f"{label}: peak RSS of the process tree", peak, "GiB",
                      f"≤ {target_gib} GiB" if target_gib else "",
                      "runs " + ", ".join(f"{r.peak_rss / 2**30:.2f}" for r in runs),
                      met=peak <= target_gib if target_gib else None))
    report.add(Figure(f"{label}: CPU seconds of the process tree", statistics.median(r.cpu_seconds for r in runs),
                      "s"))
    report.add(Figure(f"{label}: /metrics scrape", statistics.median(r.scrape_seconds for r in runs), "s",
                      baseline=f"{statistics.median(r.scrape_bytes for r in runs) / 1e6:.1f} MB"))


def run_steady(report: Report, spark: Any, broker: LocalKafka, workdir: Path, rates: list[int], seconds: float,
               probes: int, variant: str = "") -> None:
    """A caught-up job under a producer at each rate; at 20k rec/s also the rebalance → /metrics latency.
    ``variant``: extra job arguments (its own topic and checkpoint), named in each figure."""
    bootstrap = broker.bootstrap
    topic = f"bench-steady-{zlib.crc32(variant.encode()):08x}" if variant else "bench-steady"
    named = f"steady [{variant}]" if variant else "steady"
    admin = Admin(bootstrap)
    admin.create_topic(topic, W1.topic_partitions)
    admin.close()
    warm = Workload(W1.groups, W1.partitions, 200_000, W1.generation_every)
    sent = produce(bootstrap, topic, backlog(warm, int(time.time() * 1000)))
    monitor = start_job(spark, bootstrap, topic, workdir / topic, *shlex.split(variant))
    total, per_group = sent, warm.records // warm.groups
    try:
        wait_counted(monitor, total, timeout=600)
        seen = {p["batchId"] for p in monitor.query.recentProgress}
        time.sleep(10)
        # Spark also posts a progress report for an idle trigger (same batch id, no rows): not a batch.
        idle_batches = len({p["batchId"] for p in monitor.query.recentProgress if p["numInputRows"]} - seen)
        report.add(Figure(f"{named}: micro-batches run in 10 s without new data", idle_batches, "batches",
                          "idle batch ≤ 0.3 s", "without data Spark runs no batch (no stateful operator)",
                          idle_batches == 0))
        for rate in rates:
            # One Python producer writes about 60k rec/s here: higher rates are split over processes.
            processes = max(1, -(-rate // 50_000))
            producers = [subprocess.Popen(
                [sys.executable, "-m", "benchmarks.synthetic", "--bootstrap-server", bootstrap, "--topic", topic,
                 "--workload", "w1", "--records", str(10**9), "--rate", str(rate / processes),
                 "--seconds", str(seconds), "--first-commit", str(per_group)], stderr=subprocess.PIPE, text=True)
                for _ in range(processes)]
            window_start = time.time()
            latencies = probe_latency(monitor, bootstrap, topic, probes, seconds) if rate == 20_000 else []
            produced = 0
            for producer in producers:
                _, err = producer.communicate(timeout=seconds + 300)
                produced += int(err.strip().split()[-1])
            total += produced + probes if rate == 20_000 else produced
            per_group += produced // W1.groups + 1
            produced_at = time.time()
            caught = wait_counted(monitor, total, timeout=600)
            window = [p for p in monitor.query.recentProgress
                      if _epoch(p["timestamp"]) >= window_start and _epoch(p["timestamp"]) <= produced_at]
            durations = sorted(p["batchDuration"] / 1000 for p in window) or [0.0]
            p95 = durations[min(len(durations) - 1, int(0.95 * len(durations)))]
            achieved = produced / seconds
            catch_up = caught - time.monotonic() + (time.time() - produced_at)
            report.add(Figure(f"{named} {rate:,} rec/s: producer achieved", achieved, "rec/s"))
            report.add(Figure(f"{named} {rate:,} rec/s: p95 micro-batch", p95, "s",
                              "≤ 1.5 s" if rate == 20_000 else "",
                              f"median {statistics.median(durations):.2f}s over {len(window)} batches",
                              p95 <= 1.5 if rate == 20_000 else None))
            report.add(Figure(f"{named} {rate:,} rec/s: caught up after the producer stopped", max(0.0, catch_up),
                              "s", "keeps up" if rate == 100_000 else "", "",
                              catch_up <= 10 if rate == 100_000 else None))
            if latencies:
                ordered = sorted(latencies)
                p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                report.add(Figure(f"{named} 20,000 rec/s: rebalance → exporter p95", p95, "s", "≤ 3 s",
                                  f"median {statistics.median(ordered):.2f}s over {len(ordered)} probes", p95 <= 3))
    finally:
        monitor.stop()


def _epoch(timestamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def probe_latency(monitor: Monitor, bootstrap: str, topic: str, probes: int, seconds: float) -> list[float]:
    """Write a new generation for a probe group and time until the exporter serves it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    group = "bench-probe"
    partition = coordinator_partition(group, W1.topic_partitions)
    latencies = []
    pause = max(1.0, seconds / (probes + 1))
    for generation in range(1, probes + 1):
        time.sleep(pause)
        value = group_metadata(W1, 0, generation, int(time.time() * 1000))
        started = time.monotonic()
        producer.produce(topic, key=encode_key(2, {"group": group}), value=value, partition=partition)
        producer.flush(10)
        wanted = f'kafka_consumergroup_generation{{cluster="bench",group="{group}"}} {generation}\n'.encode()
        deadline = started + 60
        while time.monotonic() < deadline:
            if wanted in monitor.exporter.group_text(group):
                latencies.append(time.monotonic() - started)
                break
            time.sleep(0.02)
    return latencies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", default="cold,w1,w1-5m,w2,steady,fresh-w1,fresh-w2",
                        help="cold and fresh-* run the job as its own process, timed from process start; fresh-w3 "
                             "(300,000 groups, not in the default) is W2 three times over")
    parser.add_argument("--kminion", type=Path,
                        help="a kminion binary, run beside the cold start (docs/benchmarks.md says how to build it)")
    parser.add_argument("--fresh-repeats", type=int, default=3)
    parser.add_argument("--driver-memory", default="",
                        help="the in-process session's driver heap (baselines, steady load, in-process backlogs); "
                             "default Spark's 1g, the heap a user gets")
    parser.add_argument("--fresh-driver-memory", default="",
                        help="the fresh jobs' --driver-memory (as deploy/k8s sets it); default Spark's 1g")
    parser.add_argument("--fresh-job-args", action="append", metavar="ARGS",
                        help="extra arguments of the fresh jobs; given more than once, each is a variant run in "
                             "turn with the others (\"\" is the job as shipped)")
    parser.add_argument("--steady-job-args", action="append", metavar="ARGS",
                        help="extra arguments of the steady-load job; given more than once, each is a variant run "
                             "in turn on a topic of its own in the same session (\"\" is the job as shipped)")
    parser.add_argument("--steady-seconds", type=float, default=180)
    parser.add_argument("--steady-rates", default="5000,20000,50000,100000")
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--standalone-workers", type=int, default=0,
                        help="run the fresh jobs on a local standalone cluster of this many one-core workers "
                             "(each worker's executor 1 GiB, Spark's default) instead of local[*]")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("build/bench-job.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("rebalance_monitor").setLevel(logging.INFO)  # one line per micro-batch
    report = Report()
    with tempfile.TemporaryDirectory(prefix="bench-job-") as tmp:
        workdir = Path(tmp)
        broker = LocalKafka(workdir / "kafka", heap="1g")
        print(f"broker {broker.version} ready in {broker.start():.1f}s", flush=True)
        spark = spark_session(parse_args(["--bootstrap-server", broker.bootstrap, "--master", "local[2]"]),
                              {"spark.ui.enabled": "true",
                               **({"spark.driver.memory": args.driver_memory} if args.driver_memory else {}),
                               # One session reads every workload's topic (200 partitions in all): the
                               # source's consumer pool (64 by default) would evict and re-create them.
                               "spark.kafka.consumer.cache.capacity": "512"})
        cluster = standalone(workdir, args.standalone_workers) if args.standalone_workers else None
        try:
            for name in args.workloads.split(","):
                if name == "cold":
                    run_cold(report, broker, workdir, args.fresh_repeats, args.kminion)
                elif name.startswith("fresh-"):
                    base = name.removeprefix("fresh-")
                    run_fresh_backlog(report, broker, base, WORKLOADS[base], workdir, args.fresh_repeats,
                                      not args.no_baselines, args.fresh_driver_memory, args.fresh_job_args or [""],
                                      cluster)
                elif name == "steady":
                    for variant in args.steady_job_args or [""]:
                        run_steady(report, spark, broker, workdir, [int(r) for r in args.steady_rates.split(",")],
                                   args.steady_seconds, args.probes, variant)
                else:
                    run_backlog(report, spark, broker, name, WORKLOADS[name], workdir, not args.no_baselines)
        finally:
            spark.stop()
            if cluster is not None:
                cluster.stop()
            broker.stop()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps([asdict(f) for f in report.figures], indent=1))
    print(f"\n{sum(f.met is True for f in report.figures)} targets met, "
          f"{sum(f.met is False for f in report.figures)} missed; figures in {args.json}")


if __name__ == "__main__":
    main()
