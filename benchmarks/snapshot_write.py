"""What a state snapshot's write costs on the driver, each part against the way it was made before.

``python -m benchmarks.snapshot_write [GROUPS] [REPEATS]`` (default 100,000 groups of 10 partitions, W2's
shape; 3 repeats) folds the backlog once, then, in turn in this process and as a snapshot's write runs
(``young_garbage_only``, inside a batch):
- every group's JSON through ``model.plain`` (as shipped) and with it swapped for ``dataclasses.asdict``
  (the baseline);
- the committed offsets' table read a topic's array at a time (as shipped) and a partition at a time (the
  baseline, as the write did before).
Checks each pair made the same and prints the medians and their ratios.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from benchmarks.driver_memory import decoded_records
from benchmarks.in_turn import medians_in_turn
from benchmarks.synthetic import W2, Workload, backlog
from streaming.driver.sink import young_garbage_only
from streaming.groups import model
from streaming.groups.offsets import CommittedOffset
from streaming.groups.stage import GroupOffsets, GroupStage
from streaming.groups.store import OFFSETS_SCHEMA, _offsets_table


def json_through(convert: Callable[[Any], Any], snapshots: list[model.GroupSnapshot]) -> list[str]:
    """Every snapshot's JSON, with ``convert`` in ``model.plain``'s place."""
    shipped = model.plain
    model.plain = convert  # type: ignore[assignment]  # the baseline swapped in for the run
    try:
        return [snapshot.to_json() for snapshot in snapshots]
    finally:
        model.plain = shipped


def offsets_by_partition(offsets: dict[str, GroupOffsets], groups: list[str]) -> pa.Table:
    """The baseline: the offsets' rows built a partition at a time, as the write did before."""
    rows: list[tuple[str, tuple[str, int], CommittedOffset]] = [
        (g, tp, entry) for g in groups for tp, entry in sorted(offsets[g].offsets.items() if g in offsets else [])]
    return pa.table([
        [g for g, _, _ in rows], [tp[0] for _, tp, _ in rows], [tp[1] for _, tp, _ in rows],
        [e.offset for _, _, e in rows], [e.commit_timestamp_ms for _, _, e in rows],
    ], schema=OFFSETS_SCHEMA)


def same_json(made: dict[str, list[str]]) -> None:
    assert made["plain"] == made["asdict"], "the two ways made different JSON"


def same_offsets(made: dict[str, pa.Table]) -> None:
    assert made["arrays"].equals(made["partitions"]), "the two ways made different offsets"


def main(argv: list[str]) -> None:
    groups = int(argv[0]) if argv else W2.groups
    repeats = int(argv[1]) if len(argv) > 1 else 3
    stage = GroupStage()
    with young_garbage_only():
        stage.apply(decoded_records(backlog(Workload(groups, W2.partitions, groups * (W2.partitions + 1), 0),
                                            int(time.time() * 1000))))
    snapshots = list(stage.snapshots.values())
    json_ = medians_in_turn({"plain": lambda: json_through(model.plain, snapshots),
                             "asdict": lambda: json_through(dataclasses.asdict, snapshots)}, repeats, same_json)
    names = sorted(stage.groups)
    offsets = medians_in_turn({"arrays": lambda: _offsets_table(stage.offsets, names),
                               "partitions": lambda: offsets_by_partition(stage.offsets, names)},
                              repeats, same_offsets)
    print(f"a snapshot's write of {len(snapshots):,} groups of {W2.partitions} partitions, this process in turn, "
          f"median of {repeats}:")
    print(f"  the groups' JSON: through plain {json_['plain']:.2f} s, through dataclasses.asdict (baseline) "
          f"{json_['asdict']:.2f} s: {json_['plain'] / json_['asdict']:.2f}x")
    print(f"  the offsets' table: a topic's array at a time {offsets['arrays']:.2f} s, a partition at a time "
          f"(baseline) {offsets['partitions']:.2f} s: {offsets['arrays'] / offsets['partitions']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
