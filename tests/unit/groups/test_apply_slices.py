"""A batch folds the same whatever slices its commits are turned into Python objects in.

The stage takes a batch's commits from Arrow a slice at a time and each group record's decoded
text only as it folds it (the driver's transient memory at a first load); neither may change
what it folds: the order of a key's commits across slices, tombstones, and group records
interleaved with their groups' commits.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from streaming.groups import stage as stage_module
from streaming.groups.stage import GroupStage
from streaming.protocol import BatchInput
from tests.support.stage_records import commit, generation, kafka_batch
from tests.unit.decode.test_stage import run_task

NOW_MS = 1_700_000_100_000


def random_batch(seed: int) -> BatchInput:
    """Two offsets-topic partitions (two tasks) whose commits overlap on keys, with tombstones and records."""
    rng = random.Random(seed)
    tables = []
    for kafka_partition in (0, 1):
        rows = []
        for _ in range(rng.randint(20, 60)):
            group, partition = f"g{rng.randint(0, 4)}", rng.randint(0, 5)
            if rng.random() < 0.1:
                rows.append(generation(group, rng.randint(1, 9), {"m": {"t": [partition]}}))
            else:
                offset = None if rng.random() < 0.2 else rng.randint(0, 99)
                rows.append(commit(group, rng.choice("tu"), partition, offset))
        tables.append(run_task(kafka_batch(rows, partition=kafka_partition)))
    return BatchInput.from_arrow(pa.concat_tables(tables))


def folded(batch: BatchInput) -> tuple:
    stage = GroupStage()
    result = stage.apply(batch)
    # Events in order per group: across groups their order follows Arrow's join, which is not fixed.
    events: dict[str, list[dict]] = {}
    for event in result.events:
        events.setdefault(event.group, []).append(event.to_dict())
    return ({g: dict(o.offsets.items()) for g, o in stage.offsets.items()},
            {g: (o.commits_total, o.last_commit_ms) for g, o in stage.offsets.items()},
            {g: stage.summary(g, NOW_MS) for g in stage.groups},
            sorted(result.changed), sorted(result.folded), events)


@pytest.mark.parametrize("seed", range(25))
def test_commits_in_slices_of_one_row_fold_as_the_whole_batch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = random_batch(seed)
    assert batch.commits.num_rows > 1
    whole = folded(batch)
    monkeypatch.setattr(stage_module, "COMMIT_CHUNK_ROWS", 1)
    assert folded(batch) == whole


def test_a_later_tombstone_in_another_slice_still_removes_the_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same key from two tasks: partition 1's tombstone comes after partition 0's commit, in its own slice."""
    batch = BatchInput.from_arrow(pa.concat_tables([
        run_task(kafka_batch([commit("g", "t", 0, 7), commit("g", "t", 1, 8)], partition=0)),
        run_task(kafka_batch([commit("g", "t", 0, None)], partition=1)),
    ]))
    monkeypatch.setattr(stage_module, "COMMIT_CHUNK_ROWS", 1)
    stage = GroupStage()
    stage.apply(batch)
    assert dict(stage.offsets["g"].offsets.items()) == {("t", 1): (8, 1_700_000_000_000)}
