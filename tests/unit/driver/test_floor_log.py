"""The floors on disk: written before publishing, read back by a new process, compacted, crash-safe; and the
data position each write carries for the batch Spark commits."""

from __future__ import annotations

import json
from pathlib import Path

from streaming.driver.floor_log import FloorLog, data_position_ms, floors_dir
from streaming.driver.floors import CounterFloors
from tests.unit.driver.test_floors import summary
from tests.unit.driver.test_rebuild import committed_batch


def spark_query(checkpoint: Path, query: str) -> None:
    (checkpoint / "spark").mkdir(parents=True, exist_ok=True)
    (checkpoint / "spark" / "metadata").write_text(json.dumps({"id": query}))


def files(checkpoint: Path) -> list[str]:
    return sorted(p.name for p in floors_dir(checkpoint).iterdir())


def test_floors_survive_a_process_restart(tmp_path: Path) -> None:
    floors, log = CounterFloors(), FloorLog(tmp_path)
    floors.hold(summary("a", 3), 7)
    floors.hold(summary("b", 1), 2)
    assert log.write(0, 1_000, floors)
    floors.hold(summary("a", 5), 9)
    assert floors.hold_commits("b", 4) == 4
    floors.forget("b")
    floors.hold(summary("c", 2), 1)
    assert log.write(1, 2_000, floors)
    assert not log.write(1, 2_000, floors)  # nothing new: nothing written
    assert json.loads((floors_dir(tmp_path) / "floors-000000000002.jsonl").read_text().splitlines()[1]) == {
        "shown": {"a": json.loads(json.dumps(list(floors.everything().shown["a"]))),
                  "c": json.loads(json.dumps(list(floors.everything().shown["c"])))},
        "commits": {"a": 9, "c": 1}, "forgotten": ["b"], "rebuilt": False, "rebased": {}}  # only what rose or went

    again = CounterFloors()  # a new process
    assert FloorLog(tmp_path).load(again) == 2
    assert again.everything() == floors.everything()
    shown, commits = again.hold(summary("a", 0), 0)
    assert (shown.rebalances_total, commits) == (5, 9)
    assert again.hold_commits("b", 1) is None  # forgotten: starts again from its own counts


def test_a_write_cut_short_is_ignored_and_cleared(tmp_path: Path) -> None:
    floors, log = CounterFloors(), FloorLog(tmp_path)
    floors.hold(summary("a", 3), 7)
    log.write(0, 1_000, floors)
    (floors_dir(tmp_path) / ".floors-000000000002.jsonl.99.tmp").write_text('{"full": tr')
    again = CounterFloors()
    assert FloorLog(tmp_path).load(again) == 1
    assert files(tmp_path) == ["floors-000000000001.jsonl"]


def test_compaction_writes_everything_once_and_drops_older_files_but_the_committed_position(tmp_path: Path) -> None:
    floors, log = CounterFloors(), FloorLog(tmp_path, compact_min_rows=7, compact_factor=1.0)
    for batch in range(3):
        floors.hold(summary(f"g{batch}", 1), 1)
        log.write(batch, 1_000 + batch, floors)
    assert len(files(tmp_path)) == 3  # 6 rows written (a group and its commits each), under 7
    floors.hold(summary("g0", 2), 1)
    log.write(3, 2_000, floors)  # 7 rows: everything, once
    assert files(tmp_path) == ["floors-000000000003.jsonl", "floors-000000000004.jsonl"]  # batch 2's kept
    again = CounterFloors()
    assert FloorLog(tmp_path).load(again) == 3 and again.everything() == floors.everything()
    committed_batch(tmp_path, 2, 500)
    assert data_position_ms(tmp_path) == 1_002  # batch 3 not committed: batch 2's position


def test_the_position_is_the_committed_batchs_of_this_spark_query(tmp_path: Path) -> None:
    spark_query(tmp_path, "11111111-1111-1111-1111-111111111111")
    floors, log = CounterFloors(), FloorLog(tmp_path)
    log.restored(None)
    assert data_position_ms(tmp_path) is None  # nothing committed
    log.write(0, 5_000, floors)
    log.write(1, None, floors)  # no record time: the position carries on (nothing new, nothing written)
    log.write(2, 4_000, floors)  # an older record than folded before: the position does not go back
    log.write(3, 9_000, floors)
    committed_batch(tmp_path, 0, 100)
    assert data_position_ms(tmp_path) == 5_000
    committed_batch(tmp_path, 2, 100)
    assert data_position_ms(tmp_path) == 5_000
    log.restored(2)  # batch 3 failed: Spark runs it again
    log.write(3, 7_000, floors)
    committed_batch(tmp_path, 3, 100)
    assert data_position_ms(tmp_path) == 7_000  # the re-run's, written later
    spark_query(tmp_path, "22222222-2222-2222-2222-222222222222")  # a rebuilt checkpoint: a new query
    assert data_position_ms(tmp_path) is None


def test_a_write_before_the_query_started_does_not_hide_its_batches_positions(tmp_path: Path) -> None:
    floors, log = CounterFloors(), FloorLog(tmp_path)
    log.restored(None)  # a new checkpoint: Spark has not written its query id yet
    floors.hold(summary("a", 3), 7)
    assert log.write(None, None, floors)  # floors a restore raised
    spark_query(tmp_path, "33333333-3333-3333-3333-333333333333")  # the query starts
    log.write(0, 8_000, floors)
    committed_batch(tmp_path, 0, 100)
    assert data_position_ms(tmp_path) == 8_000
