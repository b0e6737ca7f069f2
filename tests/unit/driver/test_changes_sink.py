"""The state-store fold's driver sink: what the executors hand over, shown as the driver fold would show it.

The executors' fold is the driver fold's own stage; what the driver sink adds is the clock: a group shown
without members turns abandoned when ``--abandoned-after`` runs out with no batch to say so. The driver fold
(a GroupStage fed the same batches) is the oracle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from decoders.records import RECORD_TYPE_NAMES
from streaming.cluster.metadata import TopicNames
from streaming.driver import changes_sink as changes_sink_module
from streaming.driver.changes_sink import ChangesSink
from streaming.driver.publish import build_publishing
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.stateful.rows import ARROW_SCHEMA, COLUMNS, Handed, KeyCounts, change_row, counts_row, removed_row
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import BatchResult, GroupChange
from tests.support.stage_records import commit, generation
from tests.unit.driver.test_sink import batch, value

ABANDONED_AFTER_MS = 60_000
LIMITS = StageLimits(abandoned_after_ms=ABANDONED_AFTER_MS)


def changes_sink(tmp_path: Path, restored: pa.Table | None = None) -> tuple[ChangesSink, list[GroupChange]]:
    """A sink (showing the ``restored`` change rows first) and the list of every change it publishes."""
    publisher = build_publishing("c", LagTracker())
    published: list[GroupChange] = []
    apply = publisher.apply

    def recording(change: GroupChange) -> None:
        published.append(change)
        apply(change)

    publisher.apply = recording  # type: ignore[method-assign]
    sink = ChangesSink(LIMITS, publisher, EventLog(tmp_path / "events"),
                       DeadLetterLog(tmp_path / "dead-letters", "__consumer_offsets", 10), TopicNames(dict), restored)
    return sink, published


def fed(sink: ChangesSink, stage: GroupStage, rows: list, batch_id: int, time_ms: int) -> None:
    """One batch folded by ``stage`` (as an executor folds it) and handed to ``sink``."""
    result = stage.apply(batch(rows, batch_id * 10, time_ms=time_ms))
    sink.handle(Handed(changes=stage.changes(result, time_ms), removed=result.removed,
                       counts=KeyCounts(records=batch(rows, batch_id * 10, time_ms=time_ms).records)), batch_id)


def activity(sink: ChangesSink) -> list[str]:
    return [a for a in ("active", "inactive", "abandoned")
            if value(sink, "kafka_consumergroup_activity", group="g", activity=a) == 1]  # type: ignore[arg-type]


def emptied(tmp_path: Path, left_ms: int) -> tuple[ChangesSink, list[GroupChange], GroupStage]:
    """Group ``g`` had a member and committed, then went Empty at ``left_ms``."""
    sink, published = changes_sink(tmp_path)
    stage = GroupStage(LIMITS)
    fed(sink, stage, [generation("g", 1, {"m": {"t": [0]}}, ts=left_ms - 5_000),
                      commit("g", "t", 0, 3, ts=left_ms - 5_000)], 0, left_ms - 5_000)
    fed(sink, stage, [generation("g", 2, {}, ts=left_ms)], 1, left_ms)
    return sink, published, stage


def test_a_group_shown_inactive_turns_abandoned_on_time_as_the_driver_fold_turns_it(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000
    sink, published, stage = emptied(tmp_path, left)
    assert activity(sink) == ["inactive"]
    assert sink.publish_due(left + ABANDONED_AFTER_MS) == 0  # at the deadline, not past it
    assert stage.changes(BatchResult(), left + ABANDONED_AFTER_MS) == []
    due = left + ABANDONED_AFTER_MS + 1
    assert sink.publish_due(due) == 1
    assert activity(sink) == ["abandoned"]
    assert published[-1] == stage.changes(BatchResult(), due)[0]  # the driver fold's change, field for field
    assert sink.publish_due(due + ABANDONED_AFTER_MS) == 0  # handed over once


def test_a_group_that_came_back_or_went_is_not_turned(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000
    sink, _, stage = emptied(tmp_path, left)
    fed(sink, stage, [generation("g", 3, {"m2": {"t": [0]}}, ts=left + 1_000)], 2, left + 1_000)
    assert activity(sink) == ["active"]
    assert sink.publish_due(left + 10 * ABANDONED_AFTER_MS) == 0
    assert activity(sink) == ["active"]

    sink, _, stage = emptied(tmp_path / "removed", left)
    sink.handle(Handed(removed={"g"}), 2)
    assert sink.publish_due(left + 10 * ABANDONED_AFTER_MS) == 0
    assert activity(sink) == [] and sink.groups == set()


def test_the_keys_counts_add_up_to_the_batchs(tmp_path: Path) -> None:
    sink, _ = changes_sink(tmp_path)
    one = KeyCounts(records={1: 3}, errors={"bad_value": 1}, newest_record_ms=50, read_through_ms=40,
                    members_dropped={"a": 2})
    two = KeyCounts(records={1: 2, 2: 1}, newest_record_ms=70, read_through_ms=30, limit_hits={"x": 1})
    rest = KeyCounts(records={0: 4}, newest_record_ms=90)  # the decode's counts without a partition
    total = KeyCounts()
    for counts in (one, two, rest):
        total.add(counts)
    assert (total.records, total.errors, total.newest_record_ms, total.folded_through_ms, total.members_dropped,
            total.limit_hits) == ({1: 5, 2: 1, 0: 4}, {"bad_value": 1}, 90, 30, {"a": 2}, {"x": 1})
    assert KeyCounts(newest_record_ms=90).folded_through_ms == 90  # no partition read: the newest record
    sink.handle(Handed(counts=total), 0)
    registry = sink.publisher.instruments.registry

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"cluster": "c", **labels})

    assert sample("rebalance_monitor_records_total", record_type=RECORD_TYPE_NAMES[1]) == 5
    assert sample("rebalance_monitor_members_dropped") == 2
    # A later batch that summarises group a again without dropping anyone: none left out now.
    now = int(time.time() * 1000)
    fed(sink, GroupStage(LIMITS), [generation("a", 1, {"m": {"t": [0]}}, ts=now)], 1, now)
    assert sample("rebalance_monitor_members_dropped") == 0


def test_a_batchs_records_are_counted_once_its_changes_are_shown(tmp_path: Path) -> None:
    """As the driver fold counts them: a scrape that sees the records counted sees their changes."""
    sink, published = changes_sink(tmp_path)
    counted_while_shown: list[float | None] = []
    apply = sink.publisher.apply

    def showing(change: GroupChange) -> None:
        counted_while_shown.append(value(sink, "rebalance_monitor_records_total",  # type: ignore[arg-type]
                                         record_type=RECORD_TYPE_NAMES[1]))
        apply(change)

    sink.publisher.apply = showing  # type: ignore[method-assign]
    now = int(time.time() * 1000)
    fed(sink, GroupStage(LIMITS), [generation("g", 1, {"m": {"t": [0]}}, ts=now), commit("g", "t", 0, 3, ts=now)],
        0, now)
    assert len(published) == 1 and counted_while_shown == [None]  # not yet counted
    assert value(sink, "rebalance_monitor_records_total", record_type=RECORD_TYPE_NAMES[1]) == 1  # type: ignore[arg-type]


def test_a_query_restarted_in_process_keeps_what_the_last_run_showed(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000
    failed, _, _ = emptied(tmp_path, left)
    restarted, published = changes_sink(tmp_path / "restarted")  # no restore: what is shown is at least as new
    restarted.carry_over(failed)
    assert restarted.groups == {"g"}
    assert restarted.publish_due(left + ABANDONED_AFTER_MS + 1) == 1
    assert [c.summary.activity for c in published if c.summary is not None] == ["abandoned"]


class Collected:
    """What ``foreachBatch`` hands the sink: here only its Arrow collect."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def toArrow(self) -> pa.Table:
        return self.table


def test_a_batchs_changes_are_shown_a_slice_at_a_time_and_its_events_logged_once(tmp_path: Path,
                                                                                monkeypatch) -> None:
    now = int(time.time() * 1000)
    stage = GroupStage(LIMITS)
    groups = [f"g{i}" for i in range(5)]
    result = stage.apply(batch([generation(g, 1, {"m": {"t": [0]}}, ts=now) for g in groups], 0, time_ms=now))
    result = stage.apply(batch([generation(g, 2, {"m": {"t": [0]}, "n": {"t": [1]}}, ts=now + 1) for g in groups],
                               10, time_ms=now + 1))
    events = {e.group: [e] for e in result.events}
    rows = [change_row(c, events.get(c.group, [])) for c in stage.changes(result, now + 1)]
    rows += [removed_row("gone", []), counts_row(KeyCounts(records={2: 5}))]
    table = pa.Table.from_pylist([dict(zip(COLUMNS, r, strict=True)) for r in rows], schema=ARROW_SCHEMA)
    monkeypatch.setattr(changes_sink_module, "CHANGES_AT_ONCE", 2)
    sink, published = changes_sink(tmp_path)
    sink(Collected(table), 7)
    assert sorted(c.group for c in published) == groups
    assert len(sink.event_log.read()) == len(result.events) == 5
    assert sink.last_report.groups == 6 and sink.last_report.records == {2: 5}


def test_restored_rows_are_shown_a_slice_at_a_time_in_group_order(tmp_path: Path, monkeypatch) -> None:
    """What the restore reads back (one change row a group, in group order) is unpickled two rows at a time and
    shown as the driver fold shows its own restore: every group, and the one shown without members keeps its
    deadline for the clock."""
    now = int(time.time() * 1000)
    stage = GroupStage(LIMITS)
    stage.apply(batch([generation(g, 1, {"m": {"t": [0]}}, ts=now) for g in ("a", "b", "c", "d")]
                      + [commit("e", "t", 0, 3, ts=now)], 0, time_ms=now))
    changes = [stage.change(group, now) for group in sorted(stage.groups)]
    table = pa.Table.from_pylist([dict(zip(COLUMNS, change_row(c, []), strict=True)) for c in changes],
                                 schema=ARROW_SCHEMA)
    monkeypatch.setattr(changes_sink_module, "CHANGES_AT_ONCE", 2)
    unpickled: list[int] = []
    slices = changes_sink_module.changes_in

    def counted(rows: pa.Table, at_once: int) -> Iterator[list[GroupChange]]:
        for some in slices(rows, at_once):
            unpickled.append(len(some))
            yield some

    monkeypatch.setattr(changes_sink_module, "changes_in", counted)
    sink, published = changes_sink(tmp_path, table)
    assert unpickled == [2, 2, 1]
    assert published == changes and sink.groups == {"a", "b", "c", "d", "e"}
    assert sink.publish_due(now + 2 * ABANDONED_AFTER_MS) == 1  # e: commits only, no member ever
    assert published[-1].group == "e" and published[-1].summary.activity == "abandoned"
