"""``make bench-soak``: the job for a long run against churning groups and commit load; does memory stay flat?

A local broker (or ``--bootstrap-server``), the real job in this process on local[2], and:

* churning groups: in each, a steady member stays while a second one joins and leaves in a
  loop (real kafka-python members in their own processes), so every cycle is two rebalances;
* commit load: ``--commit-groups`` memberless groups commit ever higher offsets on
  ``--partitions`` partitions at about ``--commit-rate`` commit records per second, all of
  them kept live (none expires).

RSS of the driver JVM, this Python process and Spark's Python workers is printed when the load
starts, after ``--warmup-minutes`` (the start of the measured run: the JVM grows its heap and
Spark starts its Python workers in the first minutes), every ``--sample-seconds`` and at the
end, beside the groups the job exports and the rebalances it counted. Beside RSS, the JVM's
live heap (``jcmd GC.run`` then ``GC.heap_info``: used right after a full collection) and its
metaspace: RSS alone cannot tell a heap that grows into its committed size from a leak. Not a
test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from functools import partial
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.fresh_job import rss_bytes
from streaming.job import Monitor, spark_session
from streaming.options import parse_args
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, wait_until

MIB = 1 << 20


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (by parent id: a JVM forks from threads other than its main one)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(parents.get(child, []))
    return found


def memory() -> dict[str, float]:
    """MiB: RSS of the driver JVM (Spark's SparkSubmit child), this process and Spark's Python workers;
    the JVM's live heap and metaspace."""
    jvm = [p for p in _descendants(os.getpid()) if "org.apache.spark.deploy.SparkSubmit" in _cmdline(p)]
    workers = [p for j in jvm for p in _descendants(j) if "pyspark" in _cmdline(p)]
    return {"driver_jvm": sum(rss_bytes(p) for p in jvm) / MIB, "python": rss_bytes(os.getpid()) / MIB,
            "python_workers": sum(rss_bytes(p) for p in workers) / MIB, **jvm_heap(jvm[0] if jvm else None),
            # The driver's Python heap: blocks its allocator holds (objects live), in thousands.
            "python_blocks_k": sys.getallocatedblocks() / 1000}


_HEAP = re.compile(r"heap\s+total (\d+)K, used (\d+)K")
_METASPACE = re.compile(r"Metaspace\s+used (\d+)K")


def jvm_heap(pid: int | None) -> dict[str, float]:
    """The JVM's heap used right after a full collection (its live set), heap committed, metaspace used."""
    if pid is None:
        return {"heap_live": 0.0, "heap_committed": 0.0, "metaspace": 0.0}
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120)
    text = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    heap, metaspace = _HEAP.search(text), _METASPACE.search(text)
    return {"heap_live": int(heap[2]) / 1024 if heap else float("nan"),
            "heap_committed": int(heap[1]) / 1024 if heap else float("nan"),
            "metaspace": int(metaspace[1]) / 1024 if metaspace else float("nan")}


def job_figures(monitor: Monitor) -> dict[str, float]:
    text = urllib.request.urlopen(monitor.metrics_url, timeout=30).read().decode()
    figures = {"groups": 0.0, "rebalances": 0.0, "series": 0.0, "batches": 0.0, "input_lag_records": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rebalance_monitor_groups":
                figures["groups"] = sample.value
            elif sample.name == "kafka_consumergroup_rebalances_total":
                figures["rebalances"] += sample.value
            elif sample.name == "rebalance_monitor_series":
                figures["series"] = sample.value
            elif sample.name == "rebalance_monitor_batch_duration_seconds_count":
                figures["batches"] = sample.value
            elif sample.name == "rebalance_monitor_input_lag_records":
                figures["input_lag_records"] = sample.value
    return figures


class Churn(threading.Thread):
    """One group: a member that stays, a second that joins and leaves until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"churn-{group}")
        self.bootstrap, self.group, self.topic, self.stop_event = bootstrap, group, topic, stop
        self.cycles = 0

    def run(self) -> None:
        steady = Member(self.bootstrap, self.group, [self.topic], f"{self.group}-steady").start()
        try:
            while not self.stop_event.is_set():
                visitor = Member(self.bootstrap, self.group, [self.topic], f"{self.group}-visitor").start()
                try:
                    wait_until(partial(self._joined_or_stopping, visitor), 120, "the visitor to join")
                    self.stop_event.wait(5)
                finally:
                    visitor.leave()
                self.cycles += 1
                self.stop_event.wait(5)
        finally:
            steady.leave()

    def _joined_or_stopping(self, member: Member) -> bool:
        return member.joined or self.stop_event.is_set()


class Committer(threading.Thread):
    """Memberless groups committing ever higher offsets at about ``rate`` commit records per second."""

    def __init__(self, bootstrap: str, groups: list[str], topic: str, partitions: int, rate: float,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True, name="committer")
        self.bootstrap, self.groups, self.topic, self.partitions = bootstrap, groups, topic, partitions
        self.rate, self.stop_event, self.records = rate, stop, 0

    def run(self) -> None:
        consumers = [KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=g, enable_auto_commit=False)
                     for g in self.groups]
        started, offset = time.monotonic(), 0
        try:
            while not self.stop_event.is_set():
                offset += 1
                for consumer in consumers:
                    consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(offset, "", -1)
                                     for p in range(self.partitions)})
                    self.records += self.partitions
                ahead = self.records / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    self.stop_event.wait(ahead)
        finally:
            for consumer in consumers:
                consumer.close()


def line(label: str, elapsed: float, mem: dict[str, float], figures: dict[str, float], churn: int,
         commits: int) -> str:
    return (f"{label:>6} t={elapsed / 60:5.1f}min driver_jvm={mem['driver_jvm']:7.1f}MiB "
            f"python={mem['python']:7.1f}MiB python_workers={mem['python_workers']:7.1f}MiB "
            f"jvm_heap_live={mem['heap_live']:6.1f}MiB jvm_heap_committed={mem['heap_committed']:6.1f}MiB "
            f"jvm_metaspace={mem['metaspace']:6.1f}MiB python_blocks={mem['python_blocks_k']:.0f}k "
            f"groups={figures['groups']:.0f} series={figures['series']:.0f} rebalances={figures['rebalances']:.0f} "
            f"batches={figures['batches']:.0f} input_lag={figures['input_lag_records']:.0f} "
            f"churn_cycles={churn} commit_records={commits}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=360, help="measured run after the warm-up (6 h)")
    parser.add_argument("--bootstrap-server", default=None, help="use this cluster instead of a local broker")
    parser.add_argument("--churn-groups", type=int, default=3)
    parser.add_argument("--commit-groups", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--commit-rate", type=float, default=1000, help="commit records per second")
    parser.add_argument("--sample-seconds", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        workdir = Path(tmp)
        broker = None
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            broker = LocalKafka(workdir / "kafka")
            print(f"broker {broker.version} ready in {broker.start():.1f}s", flush=True)
            bootstrap = broker.bootstrap
        admin = Admin(bootstrap)
        topic = f"soak-{int(time.time())}"
        admin.create_topic(topic, args.partitions)
        options = parse_args(["--bootstrap-server", bootstrap, "--checkpoint-dir", str(workdir / "checkpoint"),
                              "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--trigger-seconds", "5",
                              "--master", "local[2]", "--expiry-sweep-seconds", "60"])
        spark = spark_session(options, {"spark.ui.enabled": "false", "spark.driver.memory": "1g"})
        stop = threading.Event()
        workers: list[threading.Thread] = [Churn(bootstrap, f"soak-churn-{i}", topic, stop)
                                           for i in range(args.churn_groups)]
        committer = Committer(bootstrap, [f"soak-commit-{i}" for i in range(args.commit_groups)], topic,
                              args.partitions, args.commit_rate, stop)
        monitor = Monitor(spark, options).start()
        try:
            wait_until(lambda: job_figures(monitor)["batches"] > 0 or monitor.query.exception() is not None, 300,
                       "the first batch")
            for worker in [*workers, committer]:
                worker.start()
            wait_until(lambda: job_figures(monitor)["groups"] >= args.churn_groups + args.commit_groups, 300,
                       "every group exported")
            loaded = time.monotonic()
            print(line("load", 0, memory(), job_figures(monitor), 0, committer.records), flush=True)
            time.sleep(args.warmup_minutes * 60)
            started = time.monotonic()
            first_mem = memory()
            cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
            print(line("start", started - loaded, first_mem, job_figures(monitor), cycles, committer.records),
                  flush=True)
            deadline = started + args.minutes * 60
            while time.monotonic() < deadline and monitor.query.exception() is None:
                time.sleep(min(args.sample_seconds, max(0.0, deadline - time.monotonic())))
                cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
                print(line("sample", time.monotonic() - loaded, memory(), job_figures(monitor), cycles,
                           committer.records), flush=True)
            last_mem, last = memory(), job_figures(monitor)
            cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
            print(line("end", time.monotonic() - loaded, last_mem, last, cycles, committer.records), flush=True)
            changes = ", ".join(f"{k} {first_mem[k]:.0f} -> {last_mem[k]:.0f} {'k' if k.endswith('_k') else 'MiB'} "
                                f"({last_mem[k] - first_mem[k]:+.0f})" for k in first_mem)
            print(f"Memory over {(time.monotonic() - started) / 60:.1f} min after the warm-up, start -> end: {changes}",
                  flush=True)
            rss = [sum(m[k] for k in ("driver_jvm", "python", "python_workers")) for m in (first_mem, last_mem)]
            change = (rss[1] - rss[0]) / rss[0] * 100
            print(f"RSS of the job's processes {rss[0]:.0f} -> {rss[1]:.0f} MiB ({change:+.1f} %): "
                  f"{'within' if abs(change) <= 5 else 'outside'} ±5 % after the warm-up", flush=True)
            if monitor.query.exception() is not None:
                print(f"the query failed: {monitor.query.exception()}", flush=True)
        finally:
            stop.set()
            for worker in [*workers, committer]:
                if worker.is_alive():
                    worker.join(60)
            monitor.stop()
            spark.stop()
            admin.close()
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    main()
