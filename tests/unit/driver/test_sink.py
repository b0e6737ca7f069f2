"""The sink's handle: one batch folded and published, in the order a restart relies on."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from streaming.cluster.metadata import TopicNames
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.logs.upkeep import EventLogUpkeep
from streaming.protocol import BatchInput, GroupChange
from tests.support import exposition
from tests.support.decoder_encoder import encode_key
from tests.support.exposition import Samples, parse
from tests.support.log_records import records
from tests.support.stage_records import commit, generation, kafka_batch
from tests.unit.decode.test_stage import run_task

TS = 1_700_000_000_000


def batch(rows: list, first_offset: int, time_ms: int = TS) -> BatchInput:
    return BatchInput.from_arrow(run_task(kafka_batch(rows, first_offset=first_offset, time_ms=time_ms)))


def series(sink: BatchSink) -> Samples:
    return parse(sink.publisher.exporter.render().decode())


def value(sink: BatchSink, name: str, **labels: str) -> float | None:
    found = exposition.series(series(sink), name, **labels)
    return next(iter(found.values())) if found else None


def make_sink(tmp_path: Path, config: GroupsConfig | None = None, upkeep: EventLogUpkeep | None = None) -> BatchSink:
    return BatchSink(config or GroupsConfig(), GroupStage(), StateStore(tmp_path / "state"),
                     build_publishing("c", LagTracker()), upkeep.event_log if upkeep else EventLog(tmp_path / "events"),
                     DeadLetterLog(tmp_path / "dead-letters", "__consumer_offsets", 10), TopicNames(dict),
                     upkeep=upkeep)


def test_a_batch_reaches_the_event_log_the_state_and_the_metrics(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.handle(batch([generation("g", 1, {"m1": {"t": [0, 1]}, "m2": {"t": [2]}}),
                       commit("g", "t", 0, 10), commit("g", "t", 2, 7)], 0), 0)
    assert value(sink, "kafka_consumergroup_current_members", group="g") == 2
    assert value(sink, "kafka_consumergroup_committed_offset", group="g", topic="t", partition="2") == 7
    assert value(sink, "rebalance_monitor_records_total", record_type="OffsetCommit") == 2
    assert sink.event_log.read() == []  # the first assignment is a baseline
    assert (tmp_path / "state" / "delta-0").is_dir()

    result = sink.handle(batch([generation("g", 2, {"m1": {"t": [0]}, "m2": {"t": [2]}, "m3": {"t": [1]}})], 3), 1)
    [event] = sink.event_log.read()
    assert event == result.events[0] and event.members_joined == ("m3",) and event.moved_partitions == (("t", 1),)
    assert value(sink, "kafka_consumergroup_rebalances_total", group="g") == 1
    assert (tmp_path / "state" / "delta-1").is_dir()
    restored = StateStore(tmp_path / "state").load(1)
    assert restored.snapshots["g"].rebalances_total == 1 and restored.offsets["g"].commits_total == 2


def test_a_batchs_records_are_counted_once_its_groups_are_shown(tmp_path: Path) -> None:
    """A scrape between the two must not see the records counted and the commits they made not yet shown
    (a restart test saw 450 records counted beside the last run's commit counts)."""
    sink = make_sink(tmp_path)
    counted_while_shown: list[float | None] = []
    apply = sink.publisher.apply

    def showing(change: GroupChange) -> None:
        counted_while_shown.append(value(sink, "rebalance_monitor_records_total", record_type="OffsetCommit"))
        apply(change)

    sink.publisher.apply = showing  # type: ignore[method-assign]
    sink.handle(batch([generation("g", 1, {"m1": {"t": [0]}}), commit("g", "t", 0, 10)], 0), 0)
    assert counted_while_shown == [None]  # not yet counted
    assert value(sink, "rebalance_monitor_records_total", record_type="OffsetCommit") == 1


def test_bad_records_are_counted_and_kept_and_a_deleted_group_leaves(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.handle(batch([generation("g", 1, {"m1": {"t": [0]}}), commit("g", "t", 0, 1),
                       (b"\x00\x63junk", b"x")], 0), 0)
    assert value(sink, "rebalance_monitor_decode_errors_total", reason="unknown_record_type") == 1
    assert sink.dead_letters.read().column("reason").to_pylist() == ["unknown_record_type"]
    sink.handle(batch([(encode_key(2, {"group": "g"}), None), commit("g", "t", 0, None)], 3), 1)
    assert value(sink, "kafka_consumergroup_current_members", group="g") is None
    assert "g" not in sink.stage.groups


def test_the_expiry_sweep_forgets_silent_empty_groups_and_records_it(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, GroupsConfig(group_ttl_seconds=60, expiry_sweep_seconds=0.001))
    old = int(time.time() * 1000) - 3_600_000
    sink.handle(batch([generation("quiet", 4, {}, ts=old)], 0, time_ms=old), 0)  # Empty, an hour silent
    assert "quiet" not in sink.stage.groups and value(sink, "kafka_consumergroup_generation", group="quiet") is None
    restored = StateStore(tmp_path / "state").load(0)
    assert "quiet" not in restored.groups


@pytest.mark.parametrize("publish_restored", [False, True])
def test_a_query_restarted_in_process_never_shows_older_counters(tmp_path: Path, publish_restored: bool) -> None:
    """Batch 1 is folded and published, then fails before Spark commits it: the restarted query reloads
    the state of batch 0. Showing that state would step rebalances_total back from 1 to 0 until Spark
    runs batch 1 again (a counter reset to Prometheus): the restart does not publish it, and were it
    published, the counters' floors keep what was shown."""
    sink = make_sink(tmp_path)
    first = batch([generation("g", 1, {"m1": {"t": [0, 1]}})], 0)
    second = batch([generation("g", 2, {"m1": {"t": [0]}, "m2": {"t": [1]}})], 1)
    sink.handle(first, 0)
    sink.handle(second, 1)
    assert value(sink, "kafka_consumergroup_rebalances_total", group="g") == 1
    restored = StateStore(tmp_path / "state").load(0)  # Spark committed batch 0 only
    assert restored.summary("g", 0).rebalances_total == 0
    again = BatchSink(GroupsConfig(), restored, StateStore(tmp_path / "state"), sink.publisher, sink.event_log,
                      sink.dead_letters, sink.topic_names, publish_restored=publish_restored)
    assert value(again, "kafka_consumergroup_rebalances_total", group="g") == 1
    again.handle(second, 1)  # Spark runs the failed batch again
    assert value(again, "kafka_consumergroup_rebalances_total", group="g") == 1
    assert len(again.event_log.read()) == 1  # the re-run replaced its own first attempt


def test_a_rerun_batch_that_reads_fewer_records_never_steps_counters_back(tmp_path: Path) -> None:
    """Batch 1 publishes a rebalance and 2 commits, then fails before Spark commits it. Before Spark runs it
    again, the log cleaner compacts the range: the rebalance's record is superseded by generation 3 (in the
    next batch) and one commit by a later one, so the re-run reads fewer records and counts less. Every
    counter shown keeps its value until the group's own count passes it."""
    sink = make_sink(tmp_path)
    sink.handle(batch([generation("g", 1, {"m1": {"t": [0, 1]}})], 0), 0)
    sink.handle(batch([generation("g", 2, {"m1": {"t": [0]}, "m2": {"t": [1]}}), commit("g", "t", 0, 5),
                       commit("g", "t", 0, 6)], 1), 1)
    shown = {name: value(sink, name, group="g") for name in (
        "kafka_consumergroup_rebalances_total", "kafka_consumergroup_partitions_moved_total",
        "kafka_consumergroup_offset_commits_total")}
    assert shown == {"kafka_consumergroup_rebalances_total": 1, "kafka_consumergroup_partitions_moved_total": 1,
                     "kafka_consumergroup_offset_commits_total": 2}
    restored = StateStore(tmp_path / "state").load(0)  # Spark committed batch 0 only
    again = BatchSink(GroupsConfig(), restored, StateStore(tmp_path / "state"), sink.publisher, sink.event_log,
                      sink.dead_letters, sink.topic_names, publish_restored=False)
    again.handle(batch([commit("g", "t", 0, 6)], 1), 1)  # the compacted re-run: one commit, no generation
    for name, before in shown.items():
        assert value(again, name, group="g") == before, name
    assert value(again, "kafka_consumergroup_rebalance_causes_total", group="g", cause="members_joined") == 1
    again.handle(batch([generation("g", 3, {"m1": {"t": [1]}, "m2": {"t": [0]}})], 4), 2)
    assert value(again, "kafka_consumergroup_rebalances_total", group="g") == 1  # the state's own 1 now
    again.handle(batch([generation("g", 4, {"m1": {"t": [0]}, "m2": {"t": [1]}})], 5), 3)
    assert value(again, "kafka_consumergroup_rebalances_total", group="g") == 2  # past the floor: counts again


class ArrowFrame:
    """What foreachBatch hands the sink, as far as the sink uses it."""

    def __init__(self, table: object) -> None:
        self.table = table

    def toArrow(self) -> object:  # PySpark's name
        return self.table


def test_a_slow_batch_is_logged_with_where_its_time_went(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    sink = make_sink(tmp_path)
    frame = ArrowFrame(run_task(kafka_batch([commit("g", "t", 0, 10), commit("g", "t", 1, 3)], first_offset=0,
                                            time_ms=TS)))
    monkeypatch.setattr("streaming.driver.sink.SLOW_BATCH_S", math.inf)  # a loaded machine makes no batch slow here
    sink(frame, 0)
    assert not records(caplog, "streaming.driver.sink")  # under the bound: nothing said
    monkeypatch.setattr("streaming.driver.sink.SLOW_BATCH_S", 0.0)
    sink(frame, 1)
    [record] = records(caplog, "streaming.driver.sink")
    assert record.levelname == "WARNING" and record.getMessage().startswith("batch 1 took ")
    assert "(2 records)" in record.getMessage() and "(1 groups)" in record.getMessage()
    assert sink.last_report.batch_id == 1


def _group_series(sink: BatchSink) -> dict[tuple[str, frozenset], float]:
    """The group series but ages (lag in seconds: as old as the scrape); times read when a sink first saw a group
    (a state's start without records telling it) to the second, the two sinks handle a batch moments apart."""
    return {key: round(v) if key[0].endswith("timestamp_seconds") else v for key, v in series(sink).items()
            if key[0].startswith("kafka_") and "lag_seconds" not in key[0]}


def test_groups_changed_by_commits_alone_show_what_a_whole_publish_would(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits alone re-render only the offset series and lag; every series must read as if the group had
    been summarized and rendered whole, and only the groups whose other series may move are."""
    now = int(time.time() * 1000)
    recent, old = now - 60_000, TS  # a member change inside the churn window, one long before it
    batches = [
        [generation("quiet", 1, {"a": {"t": [0, 1]}, "b": {"t": [2]}}, old),
         generation("churning", 1, {"a": {"u": [0]}}, recent), generation("churning", 2, {"a": {"u": [0]},
                                                                                          "b": {"u": [1]}}, recent),
         commit("quiet", "t", 0, 5), commit("quiet", "t", 1, 6), commit("churning", "u", 0, 1)],
        [commit("quiet", "t", 0, 9), commit("quiet", "t", 2, 3), commit("churning", "u", 1, 4),
         commit("offsets-only", "t", 0, 2)],
        [commit("quiet", "t", 1, None), commit("quiet", "t", 0, 12), commit("offsets-only", "t", 0, 3)],
        [generation("quiet", 2, {"a": {"t": [0]}, "b": {"t": [1, 2]}}, old), commit("quiet", "t", 2, 8)],
        [commit("quiet", "t", 2, 11), commit("churning", "u", 0, 7)],
    ]
    fast, whole = make_sink(tmp_path / "fast"), make_sink(tmp_path / "whole")
    monkeypatch.setattr(whole.stage, "_may_move", lambda group, now_ms: True)  # every change carries a summary
    summarized: list[str] = []
    summary = fast.stage.summary
    monkeypatch.setattr(fast.stage, "summary", lambda group, now_ms: summarized.append(group) or summary(group, now_ms))
    # One clock for both sinks' state views: a group's state-since is the wall-clock second it was first seen,
    # and the two sinks' batches straddled a second once (a whole run's one failure).
    moment = [time.time()]
    for sink in (fast, whole):
        monkeypatch.setattr(sink.publisher.states, "_clock", lambda: moment[0])
    offset = 0
    for batch_id, rows in enumerate(batches):
        summarized.clear()
        moment[0] = time.time()
        for sink in (fast, whole):
            sink.handle(batch(rows, offset), batch_id)
            sink.publisher.book.tracker.record_offsets({("t", p): (0, 20) for p in range(3)} | {("u", p): (0, 9)
                                                                                         for p in range(2)},
                                                  time.time())
            sink.publisher.book.refresh()
        offset += len(rows)
        assert _group_series(fast) == _group_series(whole), batch_id
        # commits alone: only a group new to the publisher or with churn in its window is summarized
        assert summarized == {0: ["churning", "quiet"], 1: ["churning", "offsets-only"], 2: [], 3: ["quiet"],
                              4: ["churning"]}[batch_id], batch_id
    shown = _group_series(fast)
    assert shown[("kafka_consumergroup_offset_commits_total", frozenset({("cluster", "c"), ("group", "quiet")}))] == 7
    assert any(name == "kafka_consumergroup_member_churn" for name, _ in shown)
    assert any(name == "kafka_consumergroup_partition_lag" and ("group", "quiet") in labels
               for name, labels in shown)


def rebalance(batch_id: int) -> BatchInput:
    """Batch ``batch_id``: generation ``batch_id + 1`` of group g, one member more than the last."""
    return batch([generation("g", batch_id + 1, {f"m{i}": {"t": [i]} for i in range(batch_id + 1)})], 10 * batch_id)


def test_the_event_log_upkeep_runs_after_the_append_at_its_own_pace(tmp_path: Path) -> None:
    clock = [0.0]
    sink = make_sink(tmp_path, upkeep=EventLogUpkeep(EventLog(tmp_path / "events"), 0, monotonic=lambda: clock[0]))
    for batch_id in range(3):
        sink.handle(rebalance(batch_id), batch_id)  # the upkeep runs at batch 0 only, with nothing to merge
    assert sorted(p.name for p in sink.event_log.files()) == ["batch=1.parquet", "batch=2.parquet"]
    clock[0] += 3600
    sink.handle(rebalance(3), 3)
    assert sorted(p.name for p in sink.event_log.files()) == ["batch=1-2.parquet", "batch=3.parquet"]
    assert [e.new_generation for e in sink.event_log.read()] == [2, 3, 4]


def test_a_failing_event_log_upkeep_does_not_fail_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def permission_denied(self: EventLog, appending: int) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(EventLog, "compact", permission_denied)
    sink = make_sink(tmp_path, upkeep=EventLogUpkeep(EventLog(tmp_path / "events"), 0, interval_seconds=0))
    for batch_id in range(3):
        sink.handle(rebalance(batch_id), batch_id)
    assert [e.new_generation for e in sink.event_log.read()] == [2, 3]
    assert value(sink, "kafka_consumergroup_rebalances_total", group="g") == 2
    assert (tmp_path / "state" / "delta-2").is_dir()
