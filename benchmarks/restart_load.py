"""A driver-fold restart's load of its state, with the cyclic collector on (the baseline) and off.

``python -m benchmarks.restart_load [GROUPS] [REPEATS]`` (default 100,000 groups of 10 partitions, W2's
shape; 3 repeats) folds the backlog once, writes its snapshot as the state store does, then loads it in
fresh processes, the two ways in turn: as the job did before (collector on) and as it does now
(``young_garbage_only``, then frozen). Prints the medians of wall time, CPU seconds and the seconds
spent in the collector (``gc.callbacks``), and the ratios. Then, in this process, the snapshot's offsets
alone: built a topic's array at a time (as shipped) and a commit at a time (the baseline, as the load did
before), in turn, with the same result checked.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

from benchmarks.driver_memory import decoded_records
from benchmarks.in_turn import medians_in_turn
from benchmarks.synthetic import W2, Workload, backlog
from streaming.driver.sink import young_garbage_only
from streaming.groups.stage import GroupOffsets, GroupStage
from streaming.groups.store import OFFSETS_SCHEMA, StateStore, _offsets_by_group
from streaming.pylists import pylists


def load_once(path: Path, collector: bool) -> dict[str, float]:
    """Load the snapshot at ``path`` in this process; wall, CPU and collector seconds."""
    in_gc, started_gc = [0.0], [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started_gc[0] = time.perf_counter()
        else:
            in_gc[0] += time.perf_counter() - started_gc[0]

    gc.callbacks.append(timed)
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.nullcontext() if collector else young_garbage_only():
        StateStore(path).load(0, prune=False)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "gc": in_gc[0]}


def offsets_row_by_row(table: pa.Table) -> dict[str, GroupOffsets]:
    """The baseline: each row applied in order, as the load did before (one ``set`` or ``discard`` a row)."""
    held: dict[str, GroupOffsets] = {}
    for group, topic, partition, offset, commit_ts in zip(*pylists(table, OFFSETS_SCHEMA.names), strict=True):
        entry = held.get(group)
        if entry is None:
            entry = held[group] = GroupOffsets()
        if offset is None:
            entry.offsets.discard(topic, partition)
        else:
            entry.offsets.set(topic, partition, offset, commit_ts)
    return held


def offsets_load(path: Path, repeats: int) -> None:
    """The snapshot's offsets built both ways in turn in this process; medians of wall time."""
    table = feather.read_table(path / "snapshot-0" / "offsets.arrow")

    def same(built: dict[str, dict[str, GroupOffsets]]) -> None:
        assert {g: list(o.offsets.items()) for g, o in built["bulk"].items()} == {
            g: list(o.offsets.items()) for g, o in built["rows"].items()}, "the two ways differ"

    median = medians_in_turn({"bulk": lambda: _offsets_by_group(table), "rows": lambda: offsets_row_by_row(table)},
                             repeats, same)
    bulk, rows = median["bulk"], median["rows"]
    print(f"  the snapshot's {table.num_rows:,} offsets alone, this process, median of {repeats}: a topic's array "
          f"at a time {bulk:.2f} s, a commit at a time (baseline) {rows:.2f} s: {bulk / rows:.2f}x")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--load":
        print(json.dumps(load_once(Path(argv[1]), argv[2] == "on")))
        return
    groups = int(argv[0]) if argv else W2.groups
    repeats = int(argv[1]) if len(argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state"
        stage = GroupStage()
        shape = Workload(groups, W2.partitions, groups * (W2.partitions + 1), 0)
        with young_garbage_only():
            stage.apply(decoded_records(backlog(shape, int(time.time() * 1000))))
        StateStore(path).write_snapshot(0, stage)
        del stage
        runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
        for _ in range(repeats):
            for collector in ("on", "off"):
                out = subprocess.run([sys.executable, "-m", "benchmarks.restart_load", "--load", str(path), collector],
                                     check=True, capture_output=True, text=True).stdout
                runs[collector].append(json.loads(out))
        report(runs, groups, repeats)
        offsets_load(path, repeats)


def report(runs: dict[str, list[dict[str, float]]], groups: int, repeats: int) -> None:
    median = {c: {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "gc")} for c, rs in runs.items()}
    on, off = median["on"], median["off"]
    print(f"a restart's load of {groups:,} groups x {W2.partitions} partitions, fresh processes in turn, median of "
          f"{repeats}:")
    for name, figures in (("collector on (baseline)", on), ("collector off, then frozen", off)):
        print(f"  {name}: {figures['wall']:.2f} s wall, {figures['cpu']:.2f} CPU-s, {figures['gc']:.2f} s in the "
              f"collector")
    print(f"  off / on: {off['wall'] / on['wall']:.2f}x wall, {off['cpu'] / on['cpu']:.2f}x CPU")


if __name__ == "__main__":
    main(sys.argv[1:])
