"""Issue 30's prototype: the group fold in Spark's state store beside today's driver fold, same input.

``python -m benchmarks.state_store_prototype [--groups N] [--repeats R] [--paths driver,group,partition]``
writes a W2-shaped backlog (``benchmarks.synthetic``'s generator, N groups x 10 partitions, one
group record and one commit per partition) as Parquet files with the columns Spark's Kafka source
gives (one file per offsets-topic partition, in offset order), then runs each path in its own fresh
process, in turn, ``R`` times: one Spark session (local[2]) whose stream reads those files through
the job's own decode stage (``make_decoder`` in ``mapInArrow``, coalesced to the cores as the job
does for a small batch, or with ``--decode-tasks files`` a task per file as it does for a first batch), then

* ``driver``: today's fold, the project's ``BatchSink`` in ``foreachBatch`` (group stage, state
  delta, publishing at topic granularity), as ``benchmarks/driver_fold.py`` builds it;
* ``group``: ``transformWithStateInPandas`` keyed by group on the RocksDB state store provider,
  one value per group (generation, members, commits, committed offsets as arrays);
* ``partition``: the same fold keyed by offsets-topic partition, a map of groups in each key;
* ``fold``: keyed by offsets-topic partition with the project's real fold inside
  (``benchmarks.state_store_fold``), its changes rendered on the driver by the project's publisher.

``group`` and ``partition`` fold only what the brief names (offsets, generation, member count,
commit count), not the whole rebalance fold; their output rows (one per changed group) are
collected to the driver as Arrow, as a driver serving them would. After the backlog, ``--trickle`` files
of ``--trickle-records`` commits each (the next commits of the first groups) come one at a
time: the steady per-batch cost. Each child reports the time from query start to every group
folded, the trickle's batch times, peak RSS by process (Python driver, JVM, Python workers;
sampled every 0.5 s) and the CPU seconds of its process tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.procfs import cpu_seconds, is_java, rss_bytes, tree
from benchmarks.standalone import WorkerSampler, standalone
from benchmarks.synthetic import Record, Workload, backlog
from decoders.folding import fold_record
from streaming.protocol import STAGE_SCHEMA, OutputKind

PATHS = ("driver", "group", "partition", "fold")
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
RAW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("timestamp", pa.timestamp("us"))])
# What the stateful paths keep of a group; committed offsets as three parallel arrays, so one
# state read and one write a group (a map entry per partition would be a round trip each).
GROUP_STATE = ("generation int, members int, commits long, "
               "topics array<string>, partitions array<int>, offsets array<long>")
CHANGE_SCHEMA = "group string, generation int, members int, commits long, moved int, partitions int"
FOLDED_COLUMNS = ["group", "kind", "topic", "partition", "offset", "kafka_partition", "kafka_offset", "count",
                  "decoded"]


# ------------------------------------------------------------------------------ input files


class Input:
    """The stream's directory of Parquet files, each offsets-topic partition's offsets continued."""

    def __init__(self, directory: Path, name: str, next_offset: dict[int, int] | None = None) -> None:
        self.directory, self.name = directory, name
        self.next_offset: dict[int, int] = defaultdict(int, next_offset or {})
        self._files = 0

    def write(self, records: Iterator[Record]) -> int:
        """One file of ``records`` per offsets-topic partition in them, renamed in whole (the source
        never sees half a file)."""
        by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        for partition, key, value in records:
            by_partition[partition].append((key, value))
        now_us = int(time.time() * 1000) * 1000  # whole milliseconds, as Kafka's timestamps
        for partition, rows in sorted(by_partition.items()):
            first = self.next_offset[partition]
            self.next_offset[partition] = first + len(rows)
            table = pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows],
                              "partition": [partition] * len(rows), "offset": range(first, first + len(rows)),
                              "timestamp": [now_us] * len(rows)}, schema=RAW_SCHEMA)
            self._files += 1
            hidden = self.directory / f".{self._files}.parquet"
            pq.write_table(table, hidden)
            hidden.rename(self.directory / f"{self.name}-{self._files:06d}.parquet")
        return sum(len(rows) for rows in by_partition.values())


def shape(groups: int, partitions: int) -> Workload:
    """W2's shape at ``groups``: one group record and one commit per partition a group."""
    return Workload(groups=groups, partitions=partitions, records=groups * (partitions + 1), generation_every=0)


def trickle(workload: Workload, records: int, round_: int) -> Iterator[Record]:
    """The next commits of the first ``records`` groups, one each, after ``round_`` earlier trickles."""
    more = Workload(workload.groups, workload.partitions, records, 0, workload.topic_partitions)
    return backlog(more, int(time.time() * 1000), first_commit=workload.partitions + round_)


# ------------------------------------------------------------------------------ the stateful fold


def fold_group(state: tuple[Any, ...] | None, rows: pd.DataFrame) -> tuple[tuple[Any, ...] | None, int]:
    """A group's new state from its rows of one batch (rows of one offsets-topic partition carry
    one offset sequence, so ``kafka_offset`` is log order); and how many partitions moved.

    A group record sets generation and members (a tombstone drops the group); a commit sets
    its partition's offset (an offset tombstone removes it) and adds its count.
    """
    generation, members, commits = (state[0], state[1], state[2]) if state else (0, 0, 0)
    offsets = dict(zip(zip(state[3], state[4], strict=True), state[5], strict=True)) if state else {}
    rows = rows.sort_values("kafka_offset")
    moved = 0
    for kind, topic, partition, offset, count, decoded in zip(
            rows["kind"].tolist(), rows["topic"].tolist(), rows["partition"].tolist(), rows["offset"].tolist(),
            rows["count"].tolist(), rows["decoded"].tolist(), strict=True):
        if kind == OutputKind.GROUP_RECORD:
            record = fold_record(decoded)
            if record.value is None:
                return None, moved
            generation = record.value.get("generation", generation)
            members = len(record.value.get("members", ()))
        elif offset != offset or offset is None:  # NaN in pandas: an offset tombstone
            offsets.pop((topic, int(partition)), None)
            moved += 1
        else:
            offsets[(topic, int(partition))] = int(offset)
            commits += int(count)
            moved += 1
    keys = sorted(offsets)
    return (generation, members, commits, [t for t, _ in keys], [p for _, p in keys],
            [offsets[k] for k in keys]), moved


def change_row(group: str, state: tuple[Any, ...] | None, moved: int) -> dict[str, Any]:
    if state is None:
        return {"group": group, "generation": -1, "members": 0, "commits": 0, "moved": moved, "partitions": 0}
    return {"group": group, "generation": state[0], "members": state[1], "commits": state[2], "moved": moved,
            "partitions": len(state[5])}


def stateful_processors() -> tuple[type, type]:
    """The two processors (classes made here: pyspark is imported only in the child)."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class ByGroup(StatefulProcessor):
        """Keyed by group: one state value a group."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.state = handle.getValueState("group", GROUP_STATE)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            group = key[0]
            before = self.state.get() if self.state.exists() else None
            after, moved = fold_group(before, pd.concat(list(rows)))
            if after is None:
                self.state.clear()
            else:
                self.state.update(after)
            yield pd.DataFrame([change_row(group, after, moved)])

        def close(self) -> None:
            pass

    class ByPartition(StatefulProcessor):
        """Keyed by offsets-topic partition: a map of its groups, one entry read and written a changed group."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.groups = handle.getMapState("groups", "group string", GROUP_STATE)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            changes = []
            for group, part in pd.concat(list(rows)).groupby("group", sort=False):
                before = self.groups.getValue((group,))
                after, moved = fold_group(before, part)
                if after is None:
                    self.groups.removeKey((group,))
                else:
                    self.groups.updateValue((group,), after)
                changes.append(change_row(str(group), after, moved))
            yield pd.DataFrame(changes, columns=[c.split()[0] for c in CHANGE_SCHEMA.split(", ")])

        def close(self) -> None:
            pass

    return ByGroup, ByPartition


# ------------------------------------------------------------------------------ one child process


class Sampler(threading.Thread):
    """Peak RSS of this process's tree by kind (driver, JVM, Python workers), every 0.5 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.by_kind: dict[str, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._done.wait(0.5):
            by_kind: dict[str, int] = defaultdict(int)
            for pid in tree(me):
                by_kind["driver" if pid == me else "jvm" if is_java(pid) else "workers"] += rss_bytes(pid)
            if sum(by_kind.values()) > self.peak:
                self.peak, self.by_kind = sum(by_kind.values()), dict(by_kind)

    def stop(self) -> None:
        self._done.set()
        self.join(2)


def driver_sink(workdir: Path) -> Any:
    """Today's fold: the project's sink at topic granularity, as benchmarks/driver_fold.py builds it."""
    from streaming.cluster.metadata import TopicNames
    from streaming.driver.sink import BatchSink
    from streaming.groups.config import GroupsConfig
    from streaming.groups.stage import GroupStage
    from streaming.groups.store import StateStore
    from streaming.logs.dead_letters import DeadLetterLog
    from streaming.logs.events import EventLog

    return BatchSink(GroupsConfig(), GroupStage(), StateStore(workdir / "state"), publishing(),
                     EventLog(workdir / "events"), DeadLetterLog(workdir / "dead-letters", "__consumer_offsets", 10),
                     TopicNames(lambda ids: {}))


def publishing() -> Any:
    """What the driver renders with, on every path that renders: the project's publisher at topic granularity."""
    from streaming.driver.publish import build_publishing
    from streaming.lag.tracker import LagTracker

    return build_publishing("c", LagTracker(), "topic")


class Collected:
    """``foreachBatch`` of the stateful paths: the changed groups' rows to the driver as Arrow."""

    def __init__(self) -> None:
        self.groups: set[str] = set()

    def __call__(self, df: Any, batch_id: int) -> None:
        self.groups.update(df.toArrow().column("group").to_pylist())


def child(path: str, input_dir: Path, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one path on the backlog already in ``input_dir``, then the trickle; the figures as a dict."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from streaming.decode.stage import make_decoder
    from streaming.job import spark_session
    from streaming.options import parse_args

    sampler = Sampler()
    sampler.start()
    started = time.monotonic()
    conf = ["--spark-conf", f"spark.sql.shuffle.partitions={args.shuffle_partitions}",
            "--spark-conf", f"spark.sql.streaming.stateStore.providerClass={ROCKSDB}"]
    if args.driver_memory:
        conf += ["--spark-conf", f"spark.driver.memory={args.driver_memory}"]
    if args.decode_tasks == "files":  # the file source packs small files into a split up to 128 MiB: one each
        conf += ["--spark-conf", "spark.sql.files.openCostInBytes=134217728"]
    if args.master_url:
        conf += ["--spark-conf", "spark.executor.cores=1", "--spark-conf", "spark.executor.memory=1g"]
    spark = spark_session(parse_args(["--bootstrap-server", "unused:9092", "--master", args.master_url or "local[2]",
                                      *conf]))
    session_s = time.monotonic() - started
    if args.master_url:  # every executor up before the query starts, as local mode's are (the driver counts as one)
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < args.workers + 1:
            time.sleep(0.2)
    raw = spark.readStream.schema(from_arrow_schema(RAW_SCHEMA)).parquet(str(input_dir))
    # "cores": every batch decoded in as many tasks as cores; "files": a task per input file, as the job decodes a
    # first batch (a task per offsets-topic partition, each result a share of the batch), and every later one.
    spread = raw if args.decode_tasks == "files" else raw.coalesce(spark.sparkContext.defaultParallelism)
    decoded = spread.mapInArrow(make_decoder(1000), from_arrow_schema(STAGE_SCHEMA))
    if path == "driver":
        sink: Any = driver_sink(workdir)
        output = decoded
    elif path == "fold":
        from benchmarks import state_store_fold
        from streaming.logs.events import EventLog

        sink = state_store_fold.ChangesSink(publishing(), EventLog(workdir / "events"))
        output = state_store_fold.folded_input(decoded).transformWithStateInPandas(
            state_store_fold.processor(args.buckets), state_store_fold.CHANGE_SCHEMA, "Update", "None")
    else:
        sink = Collected()
        by_group, by_partition = stateful_processors()
        folded = decoded.where(F.col("kind").isin(int(OutputKind.COMMIT), int(OutputKind.GROUP_RECORD)))
        keyed = (folded.select(*FOLDED_COLUMNS).groupBy("group") if path == "group"
                 else folded.select(*FOLDED_COLUMNS).groupBy("kafka_partition"))
        output = keyed.transformWithStateInPandas(by_group() if path == "group" else by_partition(),
                                                  CHANGE_SCHEMA, "Update", "None")
    query_started = time.monotonic()
    query = (output.writeStream.foreachBatch(sink).option("checkpointLocation", str(workdir / "checkpoint"))
             .trigger(processingTime="0 seconds").start())
    query.processAllAvailable()
    first_s = time.monotonic() - query_started
    folded_groups = len(sink.stage.groups) if path == "driver" else len(sink.groups)
    first_progress = query.lastProgress or {}
    backlog_cpu = sum(cpu_seconds(p) for p in tree(os.getpid()))
    batches = []
    shape_ = shape(args.groups, args.partitions)
    offsets = json.loads((input_dir.parent / "offsets.json").read_text())
    files = Input(input_dir, "trickle", {int(p): n for p, n in offsets.items()})
    for round_ in range(args.trickle):
        files.write(trickle(shape_, args.trickle_records, round_))
        began = time.monotonic()
        query.processAllAvailable()
        batches.append(time.monotonic() - began)
    query.stop()
    cpu = sum(cpu_seconds(p) for p in tree(os.getpid()))
    sampler.stop()
    return {"path": path, "session_s": session_s, "first_s": first_s, "process_to_first_s": session_s + first_s,
            "groups_folded": folded_groups, "first_batch_ms": first_progress.get("durationMs", {}),
            "trickle_s": batches, "trickle_median_s": statistics.median(batches) if batches else None,
            "backlog_cpu_s": backlog_cpu, "cpu_s": cpu, "peak_rss": sampler.peak, "peak_by_kind": sampler.by_kind,
            "driver_memory": args.driver_memory or "default (1g)"}


# ------------------------------------------------------------------------------ the runs


def offline(groups: int, partitions: int, buckets: int) -> None:
    """The stateful paths' Python work alone, without Spark: the backlog decoded in this process,
    each group's rows folded from empty state and its change row built, as each key's call does."""
    from benchmarks.driver_memory import decoded_records

    batch = decoded_records(backlog(shape(groups, partitions), int(time.time() * 1000)))
    rows = pa.concat_tables([batch.commits, batch.group_records]).select(FOLDED_COLUMNS).to_pandas()
    for key in ("group", "kafka_partition"):
        started = time.perf_counter()
        for _, part in rows.groupby(key, sort=False):
            if key == "group":
                state, moved = fold_group(None, part)
                pd.DataFrame([change_row(str(part["group"].iloc[0]), state, moved)])
            else:
                by_group = part.groupby("group", sort=False)
                pd.DataFrame([change_row(str(g), *fold_group(None, one)) for g, one in by_group])
        took = time.perf_counter() - started
        print(f"offline, keyed by {key}: {took:.1f} s for {groups:,} groups, {took / groups * 1e6:.0f} us a group "
              f"(fold and change rows, one interpreter, no state store)", flush=True)
    offline_fold(batch, groups, buckets)
    driver_kept(batch, groups)


def driver_kept(batch: Any, groups: int) -> None:
    """Bytes a group the driver keeps on each path (tracemalloc): the group stage and the publisher on the
    driver fold; on the fold path only the publisher, fed changes that came pickled from the executors."""
    import pickle

    from benchmarks.driver_memory import retained, retained_by_site
    from streaming.groups.stage import GroupStage

    def driver_fold() -> tuple[Any, Any]:
        stage, publisher = GroupStage(), publishing()
        changes = stage.changes(stage.apply(batch), int(time.time() * 1000))
        with publisher.batch():
            for change in changes:
                publisher.apply(change)
        return stage, publisher

    stage = GroupStage()
    received = [pickle.dumps(change) for change in stage.changes(stage.apply(batch), int(time.time() * 1000))]
    del stage

    def fold_path() -> Any:
        publisher = publishing()
        with publisher.batch():
            for change in received:
                publisher.apply(pickle.loads(change))
        return publisher

    whole, _ = retained(driver_fold)
    served, _ = retained(fold_path)
    print(f"driver keeps: {whole / groups:,.0f} bytes a group folding on the driver, {served / groups:,.0f} on the "
          f"fold path (the publisher alone: the rendered series and lag's copy of the offsets)", flush=True)
    sites, _ = retained_by_site(fold_path)
    print("the publisher's bytes a group by where they were allocated (unpickled: the change's own objects it "
          "keeps):", flush=True)
    for site, size in sorted(sites.items(), key=lambda item: -item[1])[:12]:
        print(f"  {size / groups:7,.0f}  {site}", flush=True)


def offline_fold(batch: Any, groups: int, buckets: int) -> None:
    """The ``fold`` path's Python work without Spark: each offsets-topic partition's rows through the real
    processor on PySpark's in-memory state (``TwsTester``), once from empty state and once more on top."""
    from pyspark.sql.streaming.tws_tester import TwsTester

    from benchmarks.state_store_fold import processor

    table = pa.concat_tables([batch.commits, batch.group_records])
    keys = pc.unique(table.column("kafka_partition")).to_pylist()
    frames = {key: table.filter(pc.equal(table.column("kafka_partition"), key)).to_pandas() for key in keys}
    tester = TwsTester(processor(buckets), outputMode="Update")
    for label in ("from empty state", "on the state of the first"):
        started = time.perf_counter()
        changed = sum(len(tester.testInPandas(key, frame)) for key, frame in frames.items())
        took = time.perf_counter() - started
        print(f"offline, real fold keyed by partition ({buckets or 'one value a group'} buckets), {label}: "
              f"{took:.1f} s for {changed:,} changed groups, {took / groups * 1e6:.0f} us a group", flush=True)
    values = [value[0] for key in keys for _, value in tester.peekMapState("groups", key).items()]
    print(f"state values: {len(values):,}, {sum(map(len, values)) / groups:.0f} bytes a group pickled", flush=True)



def run_child(label: str, base: Path, args: argparse.Namespace, n: int, cluster: Any = None) -> dict[str, Any]:
    """One fresh process on a copy of the backlog (its trickle files must not reach the next run);
    ``label`` is a path, ``path@MEMORY`` for a driver heap other than ``--driver-memory``, ``fold:N``
    for ``--buckets N``."""
    path, _, memory = label.partition("@")
    path, _, buckets = path.partition(":")
    run_dir = base / f"{path}-{buckets}-{memory}-{n}"
    (run_dir / "input").mkdir(parents=True)
    for source in (base / "backlog").iterdir():
        os.link(source, run_dir / "input" / source.name)
    (run_dir / "offsets.json").write_text((base / "offsets.json").read_text())
    command = [sys.executable, "-m", "benchmarks.state_store_prototype", "--child", path, "--run-dir",
               str(run_dir), *sys.argv[1:], *(["--driver-memory", memory] if memory else []),
               *(["--buckets", buckets] if buckets else []), *(["--master-url", cluster.url] if cluster else [])]
    workers = WorkerSampler(cluster) if cluster else None
    log = run_dir / "child.log"
    try:
        if workers:
            workers.start()
        with log.open("w") as stderr:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"path": label, "failed": "timeout",
                "errors": [f"not done after {args.timeout:.0f} s", *log.read_text().splitlines()[-12:]]}
    finally:
        if workers:
            workers.stop()
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        errors = [line for line in log.read_text().splitlines() if "Error" in line or line.startswith("  File ")]
        return {"path": label, "failed": done.returncode, "errors": errors[:12]}
    return {**json.loads(lines[-1]), "path": label, **(workers.figures() if workers else {})}


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f}"


def summary(results: list[dict[str, Any]], paths: list[str]) -> None:
    """Medians per path, and each stateful path's ratio to the driver fold of the same run."""
    medians: dict[str, dict[str, float]] = {}
    for path in paths:
        ok = [r for r in results if r["path"] == path and "failed" not in r]
        failed = [r for r in results if r["path"] == path and "failed" in r]
        if failed:
            print(f"{path}: {len(failed)} run(s) failed: {failed[0]['errors']}")
        if not ok:
            continue
        medians[path] = {key: statistics.median(r[key] for r in ok)
                         for key in ("first_s", "process_to_first_s", "trickle_median_s", "cpu_s", "peak_rss")}
        m = medians[path]
        runs = ", ".join(f"{r['first_s']:.1f}" for r in ok)
        split = "; ".join("/".join(f"{k} {gib(r['peak_by_kind'].get(k, 0))}" for k in ("driver", "jvm", "workers"))
                          for r in ok)
        print(f"{path}: every group folded {m['first_s']:.1f} s after query start (runs {runs}), "
              f"{m['process_to_first_s']:.1f} s from session start; trickle batch {m['trickle_median_s']:.2f} s; "
              f"CPU {m['cpu_s']:.0f} s; peak RSS {gib(m['peak_rss'])} GiB ({split})")
    baseline = next((label for label in medians if label.startswith("driver")), None)
    if baseline:
        for path, m in medians.items():
            if not path.startswith("driver"):
                d = medians[baseline]
                print(f"{path} / {baseline}: first {m['first_s'] / d['first_s']:.2f}x, trickle "
                      f"{m['trickle_median_s'] / d['trickle_median_s']:.2f}x, CPU {m['cpu_s'] / d['cpu_s']:.2f}x, "
                      f"peak RSS {m['peak_rss'] / d['peak_rss']:.2f}x")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--paths", default=",".join(PATHS), help="PATH or PATH@MEMORY (its own driver heap), ...")
    parser.add_argument("--trickle", type=int, default=5, help="trickle batches after the backlog")
    parser.add_argument("--trickle-records", type=int, default=5000)
    parser.add_argument("--buckets", type=int, default=0,
                        help="fold path: groups share this many state values a partition (0: one a group)")
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="state store partitions (the cores)")
    parser.add_argument("--decode-tasks", choices=("cores", "files"), default="cores",
                        help="decode every batch in a task per core, or in a task per input file (an offsets-topic "
                             "partition's: what the job does for a first batch; a trickle batch then pays 50 tasks)")
    parser.add_argument("--driver-memory", default="", help="spark.driver.memory (default: Spark's 1g)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--offline", action="store_true", help="the stateful fold's Python work alone, no Spark")
    parser.add_argument("--workers", type=int, default=0,
                        help="run on a local standalone cluster of this many one-core workers (0: local[2])")
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--master-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        figures = child(args.child, args.run_dir / "input", args.run_dir, args)
        print(json.dumps(figures), flush=True)
        return
    if args.offline:
        offline(args.groups, args.partitions, args.buckets)
        return
    paths = args.paths.split(",")
    with tempfile.TemporaryDirectory(prefix="state-proto-") as tmp:
        base = Path(tmp)
        (base / "backlog").mkdir()
        files = Input(base / "backlog", "backlog")
        written = files.write(backlog(shape(args.groups, args.partitions), int(time.time() * 1000)))
        (base / "offsets.json").write_text(json.dumps(files.next_offset))
        print(f"{written:,} records of {args.groups:,} groups x {args.partitions} partitions; paths {paths}, "
              f"{args.repeats} run(s) each in turn, driver memory {args.driver_memory or 'default'}", flush=True)
        results = []
        cluster = standalone(base, args.workers) if args.workers else None
        try:
            for n in range(args.repeats):
                for path in paths:
                    result = run_child(path, base, args, n, cluster)
                    print(json.dumps(result), flush=True)
                    results.append(result)
        finally:
            if cluster:
                cluster.stop()
        summary(results, paths)


if __name__ == "__main__":
    main(sys.argv[1:])
