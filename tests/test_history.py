"""The Parquet event log: exactly once per batch id, ordering, filtering, the timeline printout."""

from __future__ import annotations

import io

import pyarrow.parquet as pq

from streaming.history import EVENT_SCHEMA, EventLog, format_event, print_history
from streaming.state import RebalanceEvent

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def event(group: str, old: int, t: int, **overrides) -> RebalanceEvent:
    fields = dict(
        group=group, group_type="classic", old_generation=old, new_generation=old + 1, event_time_ms=t,
        protocol="range", leader="C0", leader_changed=False, members_joined=("C2",), members_left=(),
        member_count=3, partitions_moved=2, moved_partitions=("t0:1", "t0:2"), partitions_revoked=2,
        partitions_assigned=2, imbalance_before=4 / 3, imbalance_after=1.0,
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
    assert sorted(p.name for p in tmp_path.iterdir()) == []


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
    log = EventLog(tmp_path)
    log.append(5, [event("a", 1, T0)])
    (path,) = tmp_path.iterdir()
    assert path.name == "batch=5.parquet"
    table = pq.read_table(path)
    assert table.schema.equals(EVENT_SCHEMA)
    assert table.column("batch_id").to_pylist() == [5]
    assert table.column("moved_partitions").to_pylist() == [["t0:1", "t0:2"]]


def test_timeline_line():
    line = format_event(event("a", 4, T0, leader_changed=True, leader="C1"))
    assert line == (
        "2023-11-14T22:13:20.000Z  gen 4 -> 5  protocol=range  leader=C1 (changed)"
        "  joined=[C2]  left=[]  members=3  moved=2 revoked=2 assigned=2  imbalance 1.33 -> 1.00"
    )
    empty = format_event(event("a", 5, T0, protocol=None, leader=None, members_joined=(),
                               members_left=("C0", "C1"), member_count=0, imbalance_after=None))
    assert "protocol=-  leader=-" in empty and "left=[C0, C1]" in empty and "imbalance 1.33 -> -" in empty


def test_print_history(tmp_path):
    log = EventLog(tmp_path)
    log.append(1, [event("a", 1, T0), event("b", 1, T0)])
    log.append(2, [event("a", 2, T0 + 60_000)])
    out = io.StringIO()
    assert print_history(tmp_path, "a", out) == 2
    lines = out.getvalue().splitlines()
    assert lines[0] == "group a (classic): 2 rebalance(s)"
    assert [line.split("  ")[1] for line in lines[1:]] == ["gen 1 -> 2", "gen 2 -> 3"]
    out = io.StringIO()
    assert print_history(tmp_path, "zzz", out) == 0
    assert out.getvalue().startswith("no rebalance events for group 'zzz'")
