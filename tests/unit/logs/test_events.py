"""The Parquet event log: append-only across runs, exactly once per batch id within one, the printout."""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.logs.events import (
    EVENT_SCHEMA,
    EventLog,
    churn,
    event_identity,
    format_event,
    print_history,
    spark_run_id,
)
from streaming.protocol import RebalanceEvent

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def event(group: str, old: int, t: int, **overrides) -> RebalanceEvent:
    fields = dict(
        group=group, group_type="classic", old_generation=old, new_generation=old + 1, event_time_ms=t,
        protocol="range", leader="C0", leader_changed=False, members_joined=("C2",), members_left=(),
        member_count=3, partitions_moved=2, moved_partitions=(("t0", 1), ("t0", 2)), partitions_revoked=2,
        partitions_assigned=2, imbalance_before=4 / 3, imbalance_after=1.0, causes=("members_joined",),
        departures=(), joined_clients=("app@/10.0.0.3",), left_clients=(), duration_ms=120,
    )
    fields.update(overrides)
    return RebalanceEvent(**fields)


def test_append_and_read_round_trip(tmp_path):
    log = EventLog(tmp_path / "events")
    events = [event("a", 1, T0), event("a", 2, T0 + 1, members_joined=(), members_left=("C2",),
                                         imbalance_before=None, imbalance_after=None, protocol=None,
                                         leader=None, moved_partitions=())]
    log.append(0, events)
    assert log.read() == events


def test_reappending_a_batch_replaces_it(tmp_path):
    log = EventLog(tmp_path)
    log.append(7, [event("a", 1, T0), event("b", 1, T0)])
    log.append(7, [event("a", 1, T0), event("b", 1, T0)])  # Spark re-ran the batch
    assert len(log.read()) == 2
    log.append(7, [event("a", 1, T0)])
    assert [e.group for e in log.read()] == ["a"]
    log.append(7, [])  # the re-run found nothing: the earlier attempt's file goes
    assert log.read() == [] and log.batch_ids() == []
    assert list(log.run_path.iterdir()) == []


def test_empty_batches_write_nothing(tmp_path):
    log = EventLog(tmp_path / "missing")
    log.append(1, [])
    assert not (tmp_path / "missing").exists()
    assert log.read() == [] and log.batch_ids() == []


def test_read_sorts_by_time_and_filters_by_group(tmp_path):
    log = EventLog(tmp_path)
    log.append(2, [event("a", 3, T0 + 300), event("b", 1, T0 + 100)])
    log.append(1, [event("a", 2, T0 + 200), event("a", 1, T0 + 50)])
    log.append(10, [event("b", 2, T0 + 250)])
    assert [(e.group, e.new_generation) for e in log.read()] == [
        ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("a", 4)]
    assert [e.new_generation for e in log.read("a")] == [2, 3, 4]
    assert log.read("nobody") == []
    assert log.batch_ids() == [1, 2, 10]


def test_files_carry_the_documented_schema(tmp_path):
    log = EventLog(tmp_path, run_id="r1")
    log.append(5, [event("a", 1, T0)])
    (path,) = log.files()
    assert path == tmp_path / "run=r1" / "batch=5.parquet"
    table = pq.ParquetFile(path).read()  # (read_table would add a "run" column from the directory name)
    assert table.schema.equals(EVENT_SCHEMA)
    assert table.column("run_id").to_pylist() == ["r1"]
    assert table.column("batch_id").to_pylist() == [5]
    assert table.column("moved_partitions").to_pylist() == [["t0:1", "t0:2"]]
    assert table.column("causes").to_pylist() == [["members_joined"]]


def spark_checkpoint(path: Path) -> Path:
    """A Spark checkpoint as Spark leaves it once a query was created on it."""
    path.mkdir(parents=True)
    (path / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    return path


def following(log_dir: Path, checkpoint: Path) -> EventLog:
    log = EventLog(log_dir)
    log.follow(checkpoint)
    return log


def test_a_new_checkpoint_keeps_all_earlier_history(tmp_path):
    log_dir = tmp_path / "events"
    first = following(log_dir, spark_checkpoint(tmp_path / "checkpoint-1" / "spark"))
    first.append(0, [event("a", 1, T0)])
    first.append(1, [event("a", 2, T0 + 10)])
    def first_run_files():
        return {p: p.read_bytes() for p in first.files() if p.parent == first.run_path}

    written = first_run_files()
    assert len(written) == 2
    # A new checkpoint: batch ids restart at 0, under a new run id.
    second = following(log_dir, spark_checkpoint(tmp_path / "checkpoint-2" / "spark"))
    assert second.run_id != first.run_id
    second.append(0, [event("a", 3, T0 + 20)])
    second.append(1, [])  # an empty re-run in the new run removes nothing of the old one
    assert first_run_files() == written
    assert [e.new_generation for e in second.read("a")] == [2, 3, 4]
    assert second.runs() == sorted([first.run_id, second.run_id])
    # Restarting the first checkpoint resumes its run: a re-run of batch 1 replaces only its file.
    again = following(log_dir, tmp_path / "checkpoint-1" / "spark")
    assert again.run_id == first.run_id
    again.append(1, [event("a", 2, T0 + 10, members_joined=("C9",))])
    assert [e.members_joined for e in again.read("a")] == [("C2",), ("C9",), ("C2",)]


def test_deleting_only_the_spark_checkpoint_starts_a_new_run(tmp_path):
    """The monitor's own state and the event log stay; Spark's checkpoint is new: its batch 0 must not
    overwrite the first run's batch 0."""
    checkpoint = tmp_path / "checkpoint"
    log = following(checkpoint / "events", spark_checkpoint(checkpoint / "spark"))
    log.append(0, [event("a", 1, T0)])
    shutil.rmtree(checkpoint / "spark")
    fresh = EventLog(checkpoint / "events")
    fresh.follow(checkpoint / "spark")  # the job names the log before the query exists
    spark_checkpoint(checkpoint / "spark")  # the query is created: Spark writes its metadata
    fresh.append(0, [event("a", 5, T0 + 50)])
    assert fresh.run_id != log.run_id
    assert [e.new_generation for e in fresh.read("a")] == [2, 6]


def test_the_run_is_spark_s_query_id(tmp_path):
    checkpoint = spark_checkpoint(tmp_path / "spark")
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert spark_run_id(checkpoint) == query_id
    log = EventLog(tmp_path / "events")
    log.follow(checkpoint)
    log.append(0, [event("a", 1, T0)])
    assert (tmp_path / "events" / f"run={query_id}" / "batch=0.parquet").exists()
    assert spark_run_id(tmp_path / "nowhere") is None
    (checkpoint / "metadata").write_text("{not json")
    with pytest.raises(ValueError, match="not a Spark checkpoint metadata file"):
        spark_run_id(checkpoint)
    (checkpoint / "metadata").write_text('{"id": "../x"}')
    with pytest.raises(ValueError, match="unexpected query id"):
        spark_run_id(checkpoint)


def test_appending_before_spark_wrote_its_checkpoint_is_an_error(tmp_path):
    log = EventLog(tmp_path / "events")
    log.follow(tmp_path / "spark")
    with pytest.raises(RuntimeError, match="no Spark checkpoint metadata"):
        log.append(0, [event("a", 1, T0)])


def test_a_rebalance_logged_by_two_runs_is_read_once(tmp_path):
    """A new checkpoint replays the topic's uncompacted tail: the rebalances the first run logged are
    logged again, the first of them with an older previous generation (the new run's baseline came
    from the compacted head). history and churn give each rebalance once."""
    log_dir = tmp_path / "events"
    first = EventLog(log_dir, run_id="first")
    first.append(0, [event("a", 3, T0), event("a", 4, T0 + 10, joined_clients=("x@/h",))])
    first.append(1, [event("b", 1, T0 + 5)])
    second = EventLog(log_dir, run_id="second")
    replayed = [event("a", 1, T0, new_generation=4, departures=("unknown",)),  # gen 4 at T0 again, seen from 1
                event("a", 4, T0 + 10, joined_clients=("x@/h",)), event("a", 5, T0 + 20)]
    second.append(0, replayed)
    events = second.read("a")
    assert [(e.old_generation, e.new_generation) for e in events] == [(3, 4), (4, 5), (5, 6)]
    assert len(second.read()) == 4
    assert churn(events) == [("app@/10.0.0.3", 2), ("x@/h", 1)]
    out = io.StringIO()
    assert print_history(log_dir, "a", out) == 3
    assert churn(first.read("a") + replayed) == churn(events)  # churn de-duplicates on its own too
    # A re-created group reusing a generation is another rebalance: its record time differs.
    assert event_identity(event("a", 3, T0)) != event_identity(event("a", 3, T0 + 1))


def test_run_ids_are_checked():
    with pytest.raises(ValueError):
        EventLog("x", run_id="../elsewhere")


def test_files_from_before_runs_are_still_read(tmp_path):
    legacy = EVENT_SCHEMA.remove(EVENT_SCHEMA.get_field_index("run_id"))
    for name in ("causes", "departures", "joined_clients", "left_clients", "duration_ms"):
        legacy = legacy.remove(legacy.get_field_index(name))
    old = event("a", 1, T0, causes=(), joined_clients=(), duration_ms=None)
    row = {"batch_id": 3, **old.to_dict()}
    pq.write_table(pa.Table.from_pylist([row], schema=legacy), tmp_path / "batch=3.parquet")
    EventLog(tmp_path, run_id="new").append(0, [event("a", 2, T0 + 1)])
    assert EventLog(tmp_path).read("a") == [old, event("a", 2, T0 + 1)]


def test_timeline_line():
    line = format_event(event("a", 4, T0, leader_changed=True, leader="C1"))
    assert line == (
        "2023-11-14T22:13:20.000Z  gen 4 -> 5  causes=members_joined  protocol=range  leader=C1 (changed)"
        "  joined=[C2]  left=[]  members=3  moved=2 revoked=2 assigned=2  imbalance 1.33 -> 1.00"
        "  duration=0.120s"
    )
    left = format_event(event("a", 5, T0, protocol=None, leader=None, members_joined=(),
                              members_left=("C0", "C1"), departures=("left_cleanly", "poll_timeout"),
                              member_count=1, imbalance_after=None, causes=(), duration_ms=None))
    assert "causes=-  protocol=-  leader=-" in left and "imbalance 1.33 -> -" in left
    assert "left=[C0 (left_cleanly), C1 (poll_timeout)]" in left and left.endswith("duration=-")


def test_print_history(tmp_path):
    log = EventLog(tmp_path)
    log.append(1, [event("a", 1, T0), event("b", 1, T0)])
    log.append(2, [event("a", 2, T0 + 60_000, causes=("members_left", "leader_changed"), members_joined=(),
                         joined_clients=(), members_left=("C2",), left_clients=("app@/10.0.0.3",),
                         departures=("session_timeout",))])
    out = io.StringIO()
    assert print_history(tmp_path, "a", out) == 2
    lines = out.getvalue().splitlines()
    assert lines[0] == "group a (classic): 2 rebalance(s)"
    assert [line.split("  ")[1] for line in lines[1:3]] == ["gen 1 -> 2", "gen 2 -> 3"]
    assert lines[3] == "causes: leader_changed=1, members_joined=1, members_left=1"
    assert lines[4] == "churn (joins + leaves): app@/10.0.0.3 x2"
    out = io.StringIO()
    assert print_history(tmp_path, "zzz", out) == 0
    assert out.getvalue().startswith("no rebalance events for group 'zzz'")


def test_churn_ranks_and_caps():
    events = [event("a", i, T0 + i, joined_clients=(f"c{i}@h",), left_clients=("flappy@h",)) for i in range(15)]
    ranked = churn(events)
    assert ranked[0] == ("flappy@h", 15) and len(ranked) == 10


def copies(paths: list[Path], into: Path) -> dict[Path, Path]:
    """Copies of ``paths`` (mtimes kept), to put back as a crash would have left them."""
    into.mkdir()
    kept = {}
    for path in paths:
        kept[path] = into / path.name
        shutil.copy2(path, kept[path])
    return kept


def mixed_log(log_dir: Path) -> EventLog:
    """A legacy top-level file, an older run, and the current run with a rebalance the older run logged too."""
    log_dir.mkdir(parents=True)
    legacy = event("a", 1, T0, causes=(), joined_clients=(), duration_ms=None)
    pq.write_table(pa.Table.from_pylist([{"run_id": None, "batch_id": 3, **legacy.to_dict()}], schema=EVENT_SCHEMA),
                   log_dir / "batch=3.parquet")
    EventLog(log_dir, run_id="older").append(0, [event("a", 2, T0 + 10), event("b", 1, T0 + 15)])
    log = EventLog(log_dir, run_id="current")
    log.append(0, [event("a", 1, T0 + 10, new_generation=3, departures=("unknown",)), event("b", 1, T0 + 15)])
    for batch_id in range(1, 6):
        log.append(batch_id, [event("a", 2 + batch_id, T0 + 100 * batch_id),
                              event("c", batch_id, T0 + 100 * batch_id, members_joined=(f"m{batch_id}",))])
    return log


def test_compaction_merges_committed_batches_and_reads_the_same(tmp_path, monkeypatch):
    log = mixed_log(tmp_path / "events")
    monkeypatch.setattr("streaming.logs.events.SEGMENT_MAX_PARTS", 2)
    monkeypatch.setattr("streaming.logs.events._ROW_GROUP_ROWS", 3)  # several row groups in one segment
    before, before_a, ids = log.read(), log.read("a"), log.batch_ids()
    assert log.compact(5) == 5  # appending batch 5: batches 0-4 are committed
    assert sorted(p.name for p in log.run_path.iterdir()) == [
        "batch=0-1.parquet", "batch=2-3.parquet", "batch=4-4.parquet", "batch=5.parquet"]
    assert log.read() == before and log.read("a") == before_a
    assert log.batch_ids() == ids == [0, 1, 2, 3, 4, 5]
    assert pq.ParquetFile(log.run_path / "batch=0-1.parquet").read().schema.equals(EVENT_SCHEMA)
    assert log.compact(5) == 0  # nothing new below batch 5
    out = io.StringIO()
    assert print_history(log.path, "c", out) == 5


def test_compaction_leaves_the_batch_spark_may_run_again(tmp_path):
    log = EventLog(tmp_path)
    for batch_id in range(4):
        log.append(batch_id, [event("a", batch_id + 1, T0 + batch_id)])
    log.compact(3)
    assert sorted(p.name for p in log.run_path.iterdir()) == ["batch=0-2.parquet", "batch=3.parquet"]
    log.append(3, [event("a", 4, T0 + 3, members_joined=("C9",))])  # Spark re-ran batch 3
    assert [e.members_joined for e in log.read()] == [("C2",)] * 3 + [("C9",)]
    log.append(3, [])  # ... and found nothing this time
    assert [e.new_generation for e in log.read()] == [2, 3, 4] and log.batch_ids() == [0, 1, 2]


def test_a_crash_between_a_segment_s_rename_and_its_parts_deletion(tmp_path):
    """The parts are still there beside the segment that holds them: read gives each event once, and
    the next compaction deletes them (and a dot-file a crash left half-written) without a new segment."""
    log = mixed_log(tmp_path / "events")
    before = log.read()
    parts = sorted(log.run_path.glob("batch=[0-3].parquet"))
    kept = copies(parts, tmp_path / "copies")
    log.compact(4)
    for path, copy in kept.items():
        shutil.copy2(copy, path)
    (log.run_path / ".batch=0-3.parquet.7.tmp").write_bytes(b"half")
    assert len(log.files()) == 1 + 1 + 1 + 4 + 2  # legacy, older run, segment, parts again, batches 4 and 5
    assert log.read() == before
    assert log.compact(4) == 0
    assert sorted(p.name for p in log.run_path.iterdir()) == ["batch=0-3.parquet", "batch=4.parquet",
                                                              "batch=5.parquet"]
    assert log.read() == before


def test_a_failed_segment_write_keeps_every_batch_file(tmp_path, monkeypatch):
    log = mixed_log(tmp_path / "events")
    before, files = log.read(), log.files()

    def full_disk(self, table):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"):
        log.compact(5)
    monkeypatch.undo()
    assert log.files() == files and log.read() == before
    log.compact(5)  # the next compaction clears the half-written segment and writes it
    assert not [p for p in log.run_path.iterdir() if p.name.startswith(".")]
    assert log.read() == before


def test_a_reader_lists_again_when_a_file_goes_under_it(tmp_path, monkeypatch):
    log = mixed_log(tmp_path / "events")
    before = log.read()
    stale = log.files()
    log.compact(5)
    listed = EventLog.files
    listings = iter([stale])  # listed before the compaction, read after it
    monkeypatch.setattr(EventLog, "files", lambda self: next(listings, None) or listed(self))
    assert log.read() == before


def newest_ms(path: Path) -> int:
    return max(pq.ParquetFile(path).read(columns=["event_time_ms"]).column("event_time_ms").to_pylist())


def test_retention_deletes_only_files_whose_every_event_is_older(tmp_path):
    log = mixed_log(tmp_path / "events")  # legacy: T0; older run: T0 + 15; current: T0 + 15, then T0 + 100 * batch
    (log.path / "run=older" / ".batch=1.parquet.9.tmp").write_bytes(b"crash")
    os.utime(log.path / "run=older" / ".batch=1.parquet.9.tmp", ns=(0, 0))
    log.compact(3)  # current: batch=0-2 (newest T0 + 200), batch 3, 4, 5
    cutoff = T0 + 300
    survivors = [p for p in log.files() if newest_ms(p) >= cutoff]
    assert log.expire(cutoff) == 3  # legacy, older run's batch 0, current batch=0-2
    assert log.files() == survivors
    assert [p.name for p in survivors] == ["batch=3.parquet", "batch=4.parquet", "batch=5.parquet"]
    assert log.runs() == ["current"]  # the older run's directory was left empty
    assert all(e.event_time_ms >= cutoff for e in log.read())


def test_retention_keeps_a_file_with_one_event_inside_it(tmp_path):
    log = EventLog(tmp_path)
    log.append(0, [event("a", 1, T0), event("a", 2, T0 + 1000)])
    assert log.expire(T0 + 1000) == 0
    assert len(log.read()) == 2
    assert log.expire(T0 + 1001) == 1 and log.read() == []
    assert log.run_path.is_dir()  # the current run's directory stays


def test_retention_keeps_a_file_it_cannot_read(tmp_path, caplog):
    log = EventLog(tmp_path)
    log.run_path.mkdir()
    (log.run_path / "batch=0.parquet").write_bytes(b"not parquet")
    assert log.expire(T0) == 0
    assert (log.run_path / "batch=0.parquet").exists() and "kept" in caplog.text


def test_retention_reads_the_column_when_a_file_has_no_statistics(tmp_path):
    log = EventLog(tmp_path)
    rows = [{"run_id": "default", "batch_id": 0, **event("a", 1, T0).to_dict()}]
    log.run_path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=EVENT_SCHEMA), log.run_path / "batch=0.parquet",
                   write_statistics=False)
    assert log.expire(T0) == 0
    assert log.expire(T0 + 1) == 1
