"""The group stage's state on disk follows Spark's commit log: nothing applied twice, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

from streaming.groups.offsets import PartitionOffsets
from streaming.groups.stage import GroupOffsets, GroupStage
from streaming.groups.store import GROUPS_SCHEMA, OFFSETS_SCHEMA, StateStore, last_committed_batch
from streaming.protocol import BatchInput
from tests.support.stage_records import commit, generation, kafka_batch
from tests.unit.decode.test_stage import run_task


def batches() -> list[BatchInput]:
    """Four batches: a group forms, commits, rebalances, and a second group appears and is deleted."""
    steps = [
        [generation("g", 1, {"m1": {"t": [0, 1]}}), commit("g", "t", 0, 10)],
        [commit("g", "t", 1, 20), generation("h", 1, {"x": {"u": [0]}})],
        [generation("g", 2, {"m1": {"t": [0]}, "m2": {"t": [1]}}), commit("g", "t", 0, 30)],
        [(generation("h", 1, {})[0], None), commit("g", "t", 1, 40)],
    ]
    return [BatchInput.from_arrow(run_task(kafka_batch(rows, first_offset=10 * i))) for i, rows in enumerate(steps)]


def state(stage: GroupStage) -> tuple:
    return ({g: s.to_json() for g, s in sorted(stage.snapshots.items())},
            {g: (sorted(o.offsets.items()), o.commits_total) for g, o in sorted(stage.offsets.items())})


def run(store: StateStore, stage: GroupStage, inputs: list[BatchInput], first_batch: int, commits: Path,
        compact_at: int | None = None) -> None:
    """What the sink does per batch, and what Spark does after it (its commit file)."""
    for batch_id, batch in enumerate(inputs, start=first_batch):
        if compact_at == batch_id:
            store.write_snapshot(batch_id - 1, stage)
        stage.apply(batch)
        store.write_delta(batch_id, batch, ())
        (commits / str(batch_id)).write_text("v1\n{}")


def test_recovery_gives_the_state_of_the_last_committed_batch(tmp_path):
    commits = tmp_path / "spark" / "commits"
    commits.mkdir(parents=True)
    store, stage = StateStore(tmp_path / "state"), GroupStage()
    run(store, stage, batches()[:3], 0, commits)
    expected = state(stage)
    # the driver dies after writing batch 3's delta, before Spark commits it
    stage.apply(batches()[3])
    store.write_delta(3, batches()[3], ())
    assert last_committed_batch(tmp_path / "spark") == 2

    recovered = StateStore(tmp_path / "state").load(2)
    assert state(recovered) == expected
    assert not (tmp_path / "state" / "delta-3").exists()  # Spark runs batch 3 again
    again = recovered.apply(batches()[3])
    assert again.removed == {"h"} and recovered.offsets["g"].offsets[("t", 1)].offset == 40


def test_snapshots_replace_the_deltas_they_cover(tmp_path):
    commits = tmp_path / "spark" / "commits"
    commits.mkdir(parents=True)
    store, stage = StateStore(tmp_path / "state"), GroupStage()
    run(store, stage, batches(), 0, commits, compact_at=2)
    names = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert names == ["delta-2", "delta-3", "snapshot-1"]
    assert state(StateStore(tmp_path / "state").load(3)) == state(stage)
    assert StateStore(tmp_path / "state").load(None).groups == set()  # a new checkpoint starts empty


def test_a_delta_left_beside_the_snapshot_of_its_batch_is_not_replayed(tmp_path):
    """The driver died between writing snapshot-1 and removing delta-1: batch 1 must count once."""
    commits = tmp_path / "spark" / "commits"
    commits.mkdir(parents=True)
    store, stage = StateStore(tmp_path / "state"), GroupStage()
    run(store, stage, batches()[:2], 0, commits)
    store.write_snapshot(1, stage)
    store.write_delta(1, batches()[1], ())
    assert state(StateStore(tmp_path / "state").load(1)) == state(stage)


def test_expiry_is_replayed(tmp_path):
    commits = tmp_path / "spark" / "commits"
    commits.mkdir(parents=True)
    store, stage = StateStore(tmp_path / "state"), GroupStage()
    run(store, stage, batches()[:2], 0, commits)
    stage.forget(["h"])
    store.write_delta(2, BatchInput.empty(), ["h"])
    (commits / "2").write_text("v1\n{}")
    assert state(StateStore(tmp_path / "state").load(2)) == state(stage)
    assert "h" not in StateStore(tmp_path / "state").load(2).groups


def test_compaction_waits_until_the_deltas_outweigh_the_state(tmp_path):
    """A snapshot once the rows written since the last one reach twice the live state: amortised per change."""
    store, stage = StateStore(tmp_path / "state", compact_min_rows=0), GroupStage()
    assert not store.maybe_compact(None, stage)
    first = batches()[0]  # one group, one offset: 2 live rows; the delta holds 2 rows
    run(store, stage, [first], 0, tmp_path)
    assert not store.maybe_compact(0, stage)
    store.write_delta(0, first, ())  # 4 rows written since the (absent) last snapshot
    assert store.maybe_compact(0, stage)
    assert not store.maybe_compact(0, stage)


def test_a_snapshots_offset_rows_load_as_applying_them_in_order_would(tmp_path):
    """Rows out of order, a partition written twice (the last wins), a null offset (left out, its group still
    listed) and a null commit time: each group's offsets as ``set`` and ``discard`` row by row give them."""
    rows = [("g", "t", 1, 5, 100), ("h", "u", 0, None, None), ("g", "s", 0, 7, None), ("g", "t", 0, 3, 90),
            ("g", "t", 1, 6, 110), ("k", "t", 2, 9, 1), ("k", "t", 2, None, None), ("g", "t", 3, 8, 120)]
    snapshot = tmp_path / "state" / "snapshot-0"
    snapshot.mkdir(parents=True)
    feather.write_feather(pa.table([list(column) for column in zip(*rows, strict=True)], schema=OFFSETS_SCHEMA),
                          snapshot / "offsets.arrow")
    feather.write_feather(GROUPS_SCHEMA.empty_table(), snapshot / "groups.arrow")

    loaded = StateStore(tmp_path / "state").load(0, prune=False).offsets

    expected: dict[str, PartitionOffsets] = {}
    for group, topic, partition, offset, at in rows:
        held = expected.setdefault(group, PartitionOffsets())
        if offset is None:
            held.discard(topic, partition)
        else:
            held.set(topic, partition, offset, at)
    assert {g: sorted(o.offsets.items()) for g, o in loaded.items()} == {
        g: sorted(o.items()) for g, o in expected.items()}
    assert sorted(loaded["g"].offsets.items()) == [
        (("s", 0), (7, None)), (("t", 0), (3, 90)), (("t", 1), (6, 110)), (("t", 3), (8, 120))]
    assert set(loaded) == {"g", "h", "k"} and not loaded["h"].offsets and not loaded["k"].offsets
    loaded["g"].offsets.set("t", 2, 4, None)  # the arrays stay searchable: a later commit lands in order
    assert list(loaded["g"].offsets) == [("s", 0), ("t", 0), ("t", 1), ("t", 2), ("t", 3)]


def test_a_snapshots_offset_rows_are_every_committed_partition_in_order(tmp_path):
    """Written a topic's array at a time: the rows a partition at a time would give, by group, topic and
    partition, a missing commit time null, a group with no offsets left (as one without offsets at all)."""
    stage = GroupStage()
    for group, commits in (("g", [("t", 3, 8, 120), ("s", 0, 7, None), ("t", 0, 3, 90), ("t", 1, 6, 110)]),
                           ("a", [("z", 2**31 - 1, 2**62, 1)]), ("e", [])):
        held = stage.offsets[group] = GroupOffsets()
        held.commits_total = len(commits) + 1  # e: its one commit deleted since
        for topic, partition, offset, at in commits:
            held.offsets.set(topic, partition, offset, at)
    StateStore(tmp_path / "state").write_snapshot(0, stage)

    written = feather.read_table(tmp_path / "state" / "snapshot-0" / "offsets.arrow")
    assert written.schema == OFFSETS_SCHEMA
    assert [tuple(row.values()) for row in written.to_pylist()] == [
        ("a", "z", 2**31 - 1, 2**62, 1), ("g", "s", 0, 7, None), ("g", "t", 0, 3, 90), ("g", "t", 1, 6, 110),
        ("g", "t", 3, 8, 120)]
    assert state(StateStore(tmp_path / "state").load(0, prune=False)) == state(stage)
