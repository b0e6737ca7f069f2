"""What writing the counter floors before publishing costs a batch: the same batches folded and published by the
same sink with and without a floor log, alternating in one process (not a test: timings are printed, never asserted).

``python -m benchmarks.driver_floors [GROUPS] [REPEATS] [DIR]`` (default 20,000 groups of 10 partitions, 5
repeats, a temporary directory beside the worktree, on the same disk as a checkpoint would be; wall clock and the
process's CPU time, which a busy machine disturbs less): batch 0 folds every
group's record and half its commits (every group published whole, every floor new); batch 1 folds the other half,
commits alone touching every group (each group's commit floor rises); batch 2 is batch 1's shape with a tenth of the
groups (steady load). Then the floors of every group written once whole (a compaction) and loaded back (a start).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.driver_memory import decoded_records
from benchmarks.synthetic import Workload, backlog
from streaming.cluster.metadata import TopicNames
from streaming.driver.floor_log import FloorLog
from streaming.driver.floors import CounterFloors
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink, young_garbage_only
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import BatchInput


def run(batches: list[BatchInput], root: Path, floors: bool) -> list[tuple[float, float]]:
    """Seconds each batch took in a fresh sink, wall clock and the process's CPU (``floors``: with a floor log)."""
    checkpoint = Path(tempfile.mkdtemp(dir=root))
    try:
        publisher = build_publishing("c", LagTracker(), "topic")
        sink = BatchSink(GroupsConfig(), GroupStage(), StateStore(checkpoint / "monitor" / "state"), publisher,
                         EventLog(checkpoint / "events"),
                         DeadLetterLog(checkpoint / "monitor" / "dead-letters", "__consumer_offsets", 10),
                         TopicNames(lambda ids: {}), floor_log=FloorLog(checkpoint) if floors else None)
        took = []
        for batch_id, batch in enumerate(batches):
            started, cpu = time.perf_counter(), time.process_time()
            with young_garbage_only():  # as BatchSink.__call__ runs a batch (else the collector's passes dominate)
                sink.handle(batch, batch_id)
            took.append((time.perf_counter() - started, time.process_time() - cpu))
        return took
    finally:
        shutil.rmtree(checkpoint)


def main(argv: list[str]) -> None:
    groups = int(argv[0]) if argv else 20_000
    repeats = int(argv[1]) if len(argv) > 1 else 5
    root = Path(argv[2]) if len(argv) > 2 else Path(__file__).resolve().parents[3] / ".bench-floors"
    root.mkdir(parents=True, exist_ok=True)
    partitions = 10
    shape = Workload(groups=groups, partitions=partitions, records=groups * (partitions + 1), generation_every=0)
    now_ms = int(time.time() * 1000)
    records = list(backlog(shape, now_ms))
    half = len(records) // 2
    steady_shape = Workload(groups=groups // 10, partitions=partitions, records=groups // 10 * partitions,
                            generation_every=0)
    steady = list(backlog(steady_shape, now_ms, first_commit=partitions))  # later commits of a tenth of the groups
    batches = [decoded_records(records[:half]), decoded_records(records[half:]), decoded_records(steady)]
    names = ("every group whole", "commits alone, every group", f"commits alone, {groups // 10:,} groups")
    with_floors: list[list[tuple[float, float]]] = []
    without: list[list[tuple[float, float]]] = []
    try:
        for _ in range(repeats):
            without.append(run(batches, root, floors=False))
            with_floors.append(run(batches, root, floors=True))
        print(f"{groups:,} groups of {partitions} partitions, median of {repeats} alternating runs in one process, "
              f"checkpoint under {root}:")
        for i, name in enumerate(names):
            for clock, what in ((0, "wall"), (1, "CPU")):
                base = statistics.median(r[i][clock] for r in without)
                ours = statistics.median(r[i][clock] for r in with_floors)
                print(f"  {name:28} {what:4} {base * 1000:8.1f} ms without floors on disk, {ours * 1000:8.1f} ms "
                      f"with ({(ours - base) * 1000:+.1f} ms, {100 * (ours - base) / base:+.1f} %)")
        checkpoint = Path(tempfile.mkdtemp(dir=root))
        publisher = build_publishing("c", LagTracker(), "topic")
        sink = BatchSink(GroupsConfig(), GroupStage(), StateStore(checkpoint / "state"), publisher,
                         EventLog(checkpoint / "events"), DeadLetterLog(checkpoint / "dl", "__consumer_offsets", 10),
                         TopicNames(lambda ids: {}))
        sink.handle(batches[0], 0)
        floors = publisher.floors
        floors.take()
        log = FloorLog(checkpoint, compact_min_rows=0, compact_factor=0.0)
        started, cpu = time.perf_counter(), time.process_time()
        log.write(0, now_ms, floors)  # nothing new, a new position: one full file of every floor
        full_s, full_cpu = time.perf_counter() - started, time.process_time() - cpu
        size = sum(p.stat().st_size for p in (checkpoint / "monitor" / "floors").iterdir())
        started, cpu = time.perf_counter(), time.process_time()
        loaded = FloorLog(checkpoint).load(CounterFloors())
        load_s, load_cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"  every floor written whole (a compaction): {full_s * 1000:.1f} ms wall, {full_cpu * 1000:.1f} ms CPU, "
              f"{size / 1e6:.2f} MB; loaded back at start: {load_s * 1000:.1f} ms wall, {load_cpu * 1000:.1f} ms CPU "
              f"({loaded:,} groups)")
        shutil.rmtree(checkpoint)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
