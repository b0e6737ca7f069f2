"""``make bench-soak``: the job for a long run against churning groups and commit load; does memory stay flat?

A local broker (or ``--bootstrap-server``), the real job in this process on local[2], and:

* churning groups: in each, a steady member stays while a second one joins and leaves in a
  loop (real kafka-python members in their own processes), so every cycle is two rebalances;
* commit load: ``--commit-groups`` memberless groups commit ever higher offsets on
  ``--partitions`` partitions at about ``--commit-rate`` commit records per second, all of
  them kept live (none expires);
* with ``--profile churn`` also groups and topics that come and go (``Lifecycle``): a new group
  every ``--cycle-seconds``, some of them joined by a real member first (classic, and KIP-848 on
  a Kafka 4 broker), the oldest beyond ``--keep-groups`` deleted, and topics replaced while
  groups still hold offsets on them. At 4 s a group and a topic a minute (the defaults), 40
  minutes bring 600 groups and 40 topics in and out: a day on a cluster where a short-lived
  consumer group appears every 2.4 minutes.

RSS of the driver JVM, this Python process and Spark's Python workers is printed when the load
starts, after ``--warmup-minutes`` (the start of the measured run: the JVM grows its heap and
Spark starts its Python workers in the first minutes), every ``--sample-seconds`` and at the
end, beside the groups the job exports and the rebalances it counted. Beside RSS, the JVM's
live heap (``jcmd GC.run`` then ``GC.heap_info``: used right after a full collection) and its
metaspace: RSS alone cannot tell a heap that grows into its committed size from a leak. Beside
memory, every sample has the groups the cluster lists, the groups the job's stage holds, every
entry the job's objects hold (``benchmarks/held.py``) and the checkpoint's size; the end lists
each container that grew or shrank, and the churn profile stops the load, lets the job read to the
end and compares the groups it holds with the cluster's. With ``--fold state-store`` the start and
the end also count the groups the state store holds (Spark's state data source at the last committed
batch), and the end compares them with the groups shown. Each sample has the batches' mean time since
the one before: a job that falls behind shows it there first. Not a test: it prints figures, it asserts
nothing.
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
from collections import Counter, deque
from functools import partial
from pathlib import Path

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.held import changes, held
from benchmarks.procfs import cmdline, rss_bytes, tree
from streaming.decode.config import JOB_GROUP_PREFIX
from streaming.driver.malloc import malloc_heap_bytes
from streaming.driver.progress import batch_offsets
from streaming.groups.config import FOLDS
from streaming.groups.stateful.restore import saved_groups
from streaming.groups.store import last_committed_batch
from streaming.job import Monitor, spark_session
from streaming.lag.poller import OFFSETS_TOPIC
from streaming.options import parse_args
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, wait_until

MIB = 1 << 20


def job_processes(root: int) -> tuple[list[int], list[int]]:
    """The driver JVM (Spark's SparkSubmit) under ``root`` and Spark's Python workers under it. The JVM's own
    command line names pyspark too (its class path): it is not one of the workers."""
    jvm = [p for p in tree(root) if "org.apache.spark.deploy.SparkSubmit" in cmdline(p)]
    return jvm, [p for j in jvm for p in tree(j) if p != j and "pyspark" in cmdline(p)]


def memory() -> dict[str, float]:
    """MiB: RSS of the driver JVM (Spark's SparkSubmit child), this process and Spark's Python workers;
    the JVM's live heap and metaspace."""
    jvm, workers = job_processes(os.getpid())
    return {"driver_jvm": sum(rss_bytes(p) for p in jvm) / MIB, "python": rss_bytes(os.getpid()) / MIB,
            "python_workers": sum(rss_bytes(p) for p in workers) / MIB, **jvm_heap(jvm[0] if jvm else None),
            # The driver's Python heap: blocks its allocator holds (objects live), in thousands.
            "python_blocks_k": sys.getallocatedblocks() / 1000,
            # Arrow buffers alive in the driver (batches, the state's tables): RSS beside flat blocks is either
            # these or memory the allocators keep.
            "arrow_live": pa.total_allocated_bytes() / MIB, **malloc_heap()}


def malloc_heap() -> dict[str, float]:
    """MiB glibc's malloc holds in use and free but not given back (:func:`malloc_heap_bytes`); empty without
    ``mallinfo2``."""
    heap = malloc_heap_bytes()
    return {} if heap is None else {"malloc_used": heap[0] / MIB, "malloc_free": heap[1] / MIB}


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
    figures = {"groups": 0.0, "rebalances": 0.0, "series": 0.0, "batches": 0.0, "batch_seconds": 0.0,
               "input_lag_records": 0.0}
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
            elif sample.name == "rebalance_monitor_batch_duration_seconds_sum":
                figures["batch_seconds"] = sample.value
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
                    wait_until(partial(_joined_or_stopping, visitor, self.stop_event), 120, "the visitor to join")
                    self.stop_event.wait(5)
                finally:
                    visitor.leave()
                self.cycles += 1
                self.stop_event.wait(5)
        finally:
            steady.leave()


class Lifecycle(threading.Thread):
    """Groups and topics that come and go, as on a cluster with short-lived consumers.

    Every ``cycle`` seconds a new group commits offsets on the current topic; every
    ``members_every``-th new group first has a real member join and leave (two rebalances;
    alternately classic and KIP-848 when ``kip848``). Groups beyond the newest ``keep`` are
    deleted. Every ``topic_every`` cycles the groups move to a new topic and the oldest topic
    beyond ``keep_topics`` is deleted while groups still hold offsets on it (the coordinator
    then deletes those offsets).
    """

    def __init__(self, bootstrap: str, admin: Admin, partitions: int, stop: threading.Event, *, cycle: float = 4,
                 keep: int = 40, members_every: int = 3, topic_every: int = 15, keep_topics: int = 3,
                 kip848: bool = False) -> None:
        super().__init__(daemon=True, name="lifecycle")
        self.bootstrap, self.admin, self.partitions, self.stop_event = bootstrap, admin, partitions, stop
        self.cycle, self.keep, self.members_every, self.kip848 = cycle, keep, members_every, kip848
        self.topic_every, self.keep_topics = topic_every, keep_topics
        self.groups: deque[str] = deque()
        self.refused: list[str] = []  # deletions the coordinator refused (a group not empty yet): tried again
        self.topics: deque[str] = deque()
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            started = time.monotonic()
            if n % self.topic_every == 0:
                self._next_topic(n)
            self._new_group(n)
            doomed = [*self.refused, *(self.groups.popleft() for _ in range(len(self.groups) - self.keep))]
            self.refused = [group for group in doomed if not self._deleted(group)]
            n += 1
            self.stop_event.wait(max(0.0, self.cycle - (time.monotonic() - started)))

    def _next_topic(self, n: int) -> None:
        topic = f"soak-life-topic-{n}"
        self.admin.create_topic(topic, self.partitions)
        self.topics.append(topic)
        self.counts["topics_created"] += 1
        while len(self.topics) > self.keep_topics:
            self.admin.client.delete_topics([self.topics.popleft()])
            self.counts["topics_deleted"] += 1

    def _new_group(self, n: int) -> None:
        group, topic = f"soak-life-{n}", self.topics[-1]
        if n % self.members_every == 0:
            protocol = "consumer" if self.kip848 and n // self.members_every % 2 else "classic"
            member = Member(self.bootstrap, group, [topic], f"{group}-member", protocol=protocol).start()
            try:
                wait_until(partial(_joined_or_stopping, member, self.stop_event), 120, f"{group}'s member to join")
            finally:
                member.leave()
            self.counts[f"{protocol}_joins"] += 1
        self.admin.commit(group, {(topic, p): n + 1 for p in range(self.partitions)})
        self.groups.append(group)
        self.counts["groups_created"] += 1

    def _deleted(self, group: str) -> bool:
        answer = self.admin.client.delete_groups([group]).get(group)
        if answer != "OK":
            self.counts[f"delete_refused_{answer}"] += 1
            return False
        self.counts["groups_deleted"] += 1
        return True


def _joined_or_stopping(member: Member, stop: threading.Event) -> bool:
    return member.joined or stop.is_set()


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
         commits: int, holding: dict[str, float], since: dict[str, float] | None = None) -> str:
    """One sample; ``since``: the last sample's figures, for the batches' mean time in between."""
    batches = figures["batches"] - (since or {}).get("batches", 0.0)
    mean = (figures["batch_seconds"] - (since or {}).get("batch_seconds", 0.0)) / batches if batches else 0.0
    return (f"{label:>6} t={elapsed / 60:5.1f}min driver_jvm={mem['driver_jvm']:7.1f}MiB "
            f"python={mem['python']:7.1f}MiB python_workers={mem['python_workers']:7.1f}MiB "
            f"jvm_heap_live={mem['heap_live']:6.1f}MiB jvm_heap_committed={mem['heap_committed']:6.1f}MiB "
            f"jvm_metaspace={mem['metaspace']:6.1f}MiB python_blocks={mem['python_blocks_k']:.0f}k "
            f"arrow_live={mem['arrow_live']:.1f}MiB malloc_used={mem.get('malloc_used', 0):.1f}MiB "
            f"malloc_free={mem.get('malloc_free', 0):.1f}MiB "
            f"groups={figures['groups']:.0f} series={figures['series']:.0f} rebalances={figures['rebalances']:.0f} "
            f"batches={figures['batches']:.0f} batch_mean={mean:.1f}s input_lag={figures['input_lag_records']:.0f} "
            f"churn_cycles={churn} commit_records={commits} "
            + " ".join(f"{k}={v:.0f}" if k != "checkpoint_mib" else f"{k}={v:.1f}" for k, v in holding.items()))


def holdings(monitor: Monitor, admin: Admin, checkpoint: Path, sizes: Counter[str],
             state: bool = False) -> dict[str, float]:
    """The groups the cluster lists beside the groups the job's stage holds, every entry its objects hold
    (``sizes``, from :func:`held`), and the checkpoint's size on disk; with ``state`` (the load's start, the
    warm-up's end and the end) the groups the state-store fold's state holds too: reading them is a Spark job
    of its own beside the query's, which every minute would weigh on the batches measured."""
    sink = monitor.runner.sink
    figures = {"cluster_groups": len(admin.client.list_groups()),
               "stage_groups": len(sink.groups) if sink is not None else 0}
    if state and monitor.options.groups.fold == "state-store":
        figures["state_keys"] = len(state_groups(monitor, checkpoint / "spark"))
    return {**figures, "held_entries": sum(sizes.values()),
            "checkpoint_mib": sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file()) / MIB}


def state_groups(monitor: Monitor, spark_checkpoint: Path) -> set[str]:
    """The groups the state store holds as of the last committed batch (Spark's state data source)."""
    batch_id = last_committed_batch(spark_checkpoint)
    return set() if batch_id is None else {
        row.group for row in saved_groups(monitor.spark, spark_checkpoint, batch_id).select("group").collect()}


def compare_groups(monitor: Monitor, admin: Admin, stop: threading.Event, load: list[threading.Thread]) -> None:
    """With the load stopped and every record read: the groups the job holds against the cluster's."""
    stop.set()
    for worker in load:
        worker.join(120)
    # Read to the offsets topic's end as of now, by the query's own progress: the input-lag gauge compares with
    # a log-end sample up to a poll interval old, and read 0 before the last groups' commits were folded.
    ends = admin.end_offsets([(OFFSETS_TOPIC, p) for p in admin.partitions(OFFSETS_TOPIC)])

    def caught_up() -> bool:
        progress = monitor.query.lastProgress
        read = batch_offsets(progress)[0] if progress is not None else {}
        return all(read.get(tp, 0) >= end for tp, end in ends.items() if end > 0)

    wait_until(caught_up, 300, "the job to read to the offsets topic's end")
    sink = monitor.runner.sink
    held_groups = set(sink.groups) if sink is not None else set()
    # Not the job's own source group (it subscribes once on a new cluster): the job leaves its groups out.
    cluster = {group["group_id"] for group in admin.client.list_groups()
               if not group["group_id"].startswith(JOB_GROUP_PREFIX)}
    print(f"After the load: the cluster lists {len(cluster)} groups besides the job's own, the job holds "
          f"{len(held_groups)}; "
          f"held and not listed: {len(held_groups - cluster)} {sorted(held_groups - cluster)[:10]}; "
          f"listed and not held: {len(cluster - held_groups)} {sorted(cluster - held_groups)[:10]}", flush=True)
    missing = sorted(cluster - held_groups)
    described = admin.client.describe_groups(missing) if missing else {}
    leftovers, unexplained = [], []
    for group in missing:
        offsets = admin.group_offsets(group)
        answer = described.get(group) or {}
        state, members = answer.get("group_state") or answer.get("state"), len(answer.get("members") or ())
        # A topic deleted under a group deletes its offsets (tombstones the job folds: it forgets a group
        # with neither offsets nor metadata), but the coordinator lists the empty group until its next
        # offsets-retention check (offsets.retention.check.interval.ms, 10 minutes by default).
        if state == "Empty" and not members and not offsets:
            leftovers.append(group)
        else:
            unexplained.append(f"{group}: {state}, {members} member(s), committed offsets on "
                               f"{sorted({topic for topic, _ in offsets})} ({len(offsets)} partitions)")
    if monitor.options.groups.fold == "state-store":
        state = state_groups(monitor, monitor.options.driver.checkpoint_dir / "spark")
        print(f"The state store holds {len(state)} groups (last committed batch); held by the state and not shown: "
              f"{sorted(state - held_groups)[:10]}; shown and not in the state: {sorted(held_groups - state)[:10]}",
              flush=True)
    print(f"Of those, Empty with no member and no committed offset (the coordinator removes them at its next "
          f"offsets-retention check): {len(leftovers)} {leftovers[:10]}; unexplained: {len(unexplained)}",
          flush=True)
    for described_group in unexplained[:10]:
        print(f"  {described_group}", flush=True)


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
    parser.add_argument("--profile", choices=("plain", "churn"), default="plain",
                        help="churn: groups and topics also come and go (Lifecycle), and at the end the groups the "
                             "job holds are compared with the cluster's")
    parser.add_argument("--cycle-seconds", type=float, default=4, help="churn: a new group every this often")
    parser.add_argument("--keep-groups", type=int, default=40, help="churn: groups beyond the newest this many "
                                                                     "are deleted")
    parser.add_argument("--topic-every", type=int, default=15, help="churn: a new topic every this many cycles")
    parser.add_argument("--kip848-members", action=argparse.BooleanOptionalAction, default=None,
                        help="churn: every other joining member uses the KIP-848 protocol (default: on a local "
                             "Kafka 4+ broker)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="the job's --spark-conf, given to the session it starts")
    parser.add_argument("--fold", choices=FOLDS, default="driver",
                        help="the job's --fold; with state-store the start and the end also count the state "
                             "store's groups")
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
                              "--master", "local[2]", "--expiry-sweep-seconds", "60", "--fold", args.fold,
                              *(arg for setting in args.spark_conf for arg in ("--spark-conf", setting))])
        spark = spark_session(options, {"spark.ui.enabled": "false", "spark.driver.memory": "1g"})
        stop = threading.Event()
        workers: list[threading.Thread] = [Churn(bootstrap, f"soak-churn-{i}", topic, stop)
                                           for i in range(args.churn_groups)]
        committer = Committer(bootstrap, [f"soak-commit-{i}" for i in range(args.commit_groups)], topic,
                              args.partitions, args.commit_rate, stop)
        lifecycle = None
        if args.profile == "churn":
            kip848 = args.kip848_members if args.kip848_members is not None else (
                broker is not None and int(broker.version.split(".")[0]) >= 4)
            # Its own admin client: the samples list groups on the main thread meanwhile.
            lifecycle = Lifecycle(bootstrap, Admin(bootstrap), args.partitions, stop, cycle=args.cycle_seconds,
                                  keep=args.keep_groups, topic_every=args.topic_every, kip848=kip848)
            workers.append(lifecycle)
        monitor = Monitor(spark, options).start()
        try:
            wait_until(lambda: job_figures(monitor)["batches"] > 0 or monitor.query.exception() is not None, 300,
                       "the first batch")
            for worker in [*workers, committer]:
                worker.start()
            wait_until(lambda: job_figures(monitor)["groups"] >= args.churn_groups + args.commit_groups, 300,
                       "every group exported")
            loaded = time.monotonic()
            checkpoint = workdir / "checkpoint"
            print(line("load", 0, memory(), job_figures(monitor), 0, committer.records,
                       holdings(monitor, admin, checkpoint, held(monitor), state=True)), flush=True)
            time.sleep(args.warmup_minutes * 60)
            started = time.monotonic()
            first_mem, held_samples = memory(), [held(monitor)]
            cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
            previous = job_figures(monitor)
            print(line("start", started - loaded, first_mem, previous, cycles, committer.records,
                       holdings(monitor, admin, checkpoint, held_samples[0], state=True)), flush=True)
            deadline = started + args.minutes * 60
            while time.monotonic() < deadline and monitor.query.exception() is None:
                time.sleep(min(args.sample_seconds, max(0.0, deadline - time.monotonic())))
                cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
                held_samples.append(held(monitor))
                figures = job_figures(monitor)
                print(line("sample", time.monotonic() - loaded, memory(), figures, cycles, committer.records,
                           holdings(monitor, admin, checkpoint, held_samples[-1]), previous), flush=True)
                previous = figures
            last_mem, last = memory(), job_figures(monitor)
            held_samples.append(held(monitor))
            cycles = sum(w.cycles for w in workers if isinstance(w, Churn))
            print(line("end", time.monotonic() - loaded, last_mem, last, cycles, committer.records,
                       holdings(monitor, admin, checkpoint, held_samples[-1], state=True), previous), flush=True)
            memory_changes = ", ".join(
                f"{k} {first_mem[k]:.0f} -> {last_mem[k]:.0f} {'k' if k.endswith('_k') else 'MiB'} "
                f"({last_mem[k] - first_mem[k]:+.0f})" for k in first_mem)
            print(f"Memory over {(time.monotonic() - started) / 60:.1f} min after the warm-up, start -> end: "
                  f"{memory_changes}", flush=True)
            rss = [sum(m[k] for k in ("driver_jvm", "python", "python_workers")) for m in (first_mem, last_mem)]
            change = (rss[1] - rss[0]) / rss[0] * 100
            print(f"RSS of the job's processes {rss[0]:.0f} -> {rss[1]:.0f} MiB ({change:+.1f} %): "
                  f"{'within' if abs(change) <= 5 else 'outside'} ±5 % after the warm-up", flush=True)
            moved = changes(held_samples)
            picks = sorted({round(i * (len(held_samples) - 1) / 4) for i in range(5)})  # start, quarters, end
            print(f"Entries held by the job's objects, start -> end: {sum(held_samples[0].values())} -> "
                  f"{sum(held_samples[-1].values())} in {len(held_samples[-1])} containers; {len(moved)} changed "
                  f"(at the start, each quarter of the run and the end):", flush=True)
            for path, sizes in moved[:60]:
                print(f"  {path}: {' -> '.join(str(sizes[i]) for i in picks)}", flush=True)
            for part in sorted(p for p in checkpoint.iterdir() if p.is_dir()):
                files = [f for f in part.rglob("*") if f.is_file()]
                print(f"checkpoint {part.name}/: {sum(f.stat().st_size for f in files) / MIB:.1f} MiB in "
                      f"{len(files)} files", flush=True)
            if monitor.query.exception() is not None:
                print(f"the query failed: {monitor.query.exception()}", flush=True)
            elif lifecycle is not None:
                print(f"lifecycle: {dict(sorted(lifecycle.counts.items()))}", flush=True)
                compare_groups(monitor, admin, stop, [*workers, committer])
        finally:
            stop.set()
            for worker in [*workers, committer]:
                if worker.is_alive():
                    worker.join(60)
            monitor.stop()
            spark.stop()
            admin.close()
            if lifecycle is not None:
                lifecycle.admin.close()
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    main()
