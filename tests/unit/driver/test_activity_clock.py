"""Groups turn abandoned on time with no batch to hand them over (a quiet cluster writes nothing)."""

from __future__ import annotations

import time
from pathlib import Path

from streaming.cluster.metadata import TopicNames
from streaming.driver.activity_clock import ActivityClock
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from tests.support.stage_records import commit, generation
from tests.unit.driver.test_sink import batch, value

ABANDONED_AFTER_MS = 60_000


def emptied_sink(tmp_path: Path, left_ms: int) -> BatchSink:
    """A sink whose one group ``g`` had a member and committed, then went Empty at ``left_ms``."""
    sink = BatchSink(GroupsConfig(), GroupStage(StageLimits(abandoned_after_ms=ABANDONED_AFTER_MS)),
                     StateStore(tmp_path / "state"), build_publishing("c", LagTracker()), EventLog(tmp_path / "events"),
                     DeadLetterLog(tmp_path / "dead-letters", "__consumer_offsets", 10), TopicNames(dict))
    sink.handle(batch([generation("g", 1, {"m": {"t": [0]}}, ts=left_ms - 5_000),
                       commit("g", "t", 0, 3, ts=left_ms - 5_000)], 0, time_ms=left_ms - 5_000), 0)
    sink.handle(batch([generation("g", 2, {}, ts=left_ms)], 2, time_ms=left_ms), 1)
    return sink


def activity(sink: BatchSink) -> list[str]:
    return [a for a in ("active", "inactive", "abandoned")
            if value(sink, "kafka_consumergroup_activity", group="g", activity=a) == 1]


def test_a_group_turns_abandoned_between_batches(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000  # ten seconds before the deadline
    sink = emptied_sink(tmp_path, left)
    assert activity(sink) == ["inactive"]
    assert sink.publish_due(left + ABANDONED_AFTER_MS) == 0  # at the deadline, not past it
    assert activity(sink) == ["inactive"]
    assert sink.publish_due(left + ABANDONED_AFTER_MS + 1) == 1
    assert activity(sink) == ["abandoned"]
    assert sink.publish_due(left + 2 * ABANDONED_AFTER_MS) == 0  # handed over once


def test_a_batch_being_folded_keeps_the_clock_out(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000
    sink = emptied_sink(tmp_path, left)
    with sink._lock:  # a batch on the query's thread
        assert sink.publish_due(left + ABANDONED_AFTER_MS + 1) == 0
    assert activity(sink) == ["inactive"]
    assert sink.publish_due(left + ABANDONED_AFTER_MS + 1) == 1


def test_the_clock_thread_publishes_without_a_batch(tmp_path: Path) -> None:
    left = int(time.time() * 1000) - ABANDONED_AFTER_MS + 10_000
    sink = emptied_sink(tmp_path, left)
    now = [left + ABANDONED_AFTER_MS - 1]  # the clock the thread reads, moved by the test
    clock = ActivityClock(lambda: sink, interval_s=0.01, clock=lambda: now[0] / 1000)
    clock.start()
    try:
        time.sleep(0.2)
        assert activity(sink) == ["inactive"]
        now[0] = left + ABANDONED_AFTER_MS + 1_000
        deadline = time.monotonic() + 5
        while activity(sink) != ["abandoned"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert activity(sink) == ["abandoned"]
    finally:
        clock.stop()

