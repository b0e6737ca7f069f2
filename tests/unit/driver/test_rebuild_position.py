"""The checkpoint's age from its data position: the input lag when the job stopped plus the time it was down."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streaming.driver.floor_log import FloorLog
from streaming.driver.floors import CounterFloors
from streaming.driver.rebuild import RebuildLimit
from tests.unit.driver.test_rebuild import NOW, check, checkpoint_with_history, gauges

HOUR_MS = 3_600_000
DAY = RebuildLimit(86_400, "delete.retention.ms of topic __consumer_offsets")


def stopped(tmp_path: Path, behind_h: float, down_h: float, with_position: bool = True) -> Path:
    """A checkpoint whose last committed batch (7) was planned ``down_h`` hours ago and folded records up to
    ``behind_h`` hours older than that."""
    planned_ms = int(NOW * 1000 - down_h * HOUR_MS)
    checkpoint = checkpoint_with_history(tmp_path, planned_ms)
    if with_position:
        FloorLog(checkpoint).write(7, int(planned_ms - behind_h * HOUR_MS), CounterFloors())
    return checkpoint


def test_twenty_hours_behind_and_six_down_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rebalance_monitor")
    rebuilt, metrics = check(stopped(tmp_path, 20, 6), DAY)
    assert rebuilt
    assert gauges(metrics) == (26 * 3600.0, 1.0)
    assert "folded records up to 72000s before it was planned (the job's input lag when it stopped), 21600s ago" in (
        caplog.text)


def test_one_hour_behind_and_six_down_is_resumed(tmp_path: Path) -> None:
    checkpoint = stopped(tmp_path, 1, 6)
    rebuilt, metrics = check(checkpoint, DAY)
    assert not rebuilt and gauges(metrics) == (7 * 3600.0, 0.0)
    assert (checkpoint / "spark" / "commits" / "7").exists()


def test_a_checkpoint_without_a_data_position_keeps_the_rule_before(tmp_path: Path) -> None:
    rebuilt, metrics = check(stopped(tmp_path, 20, 6, with_position=False), DAY)
    assert not rebuilt and gauges(metrics) == (6 * 3600.0, 0.0)  # from when the batch was planned, as before
    rebuilt, _ = check(stopped(tmp_path / "older", 0, 25, with_position=False), DAY)
    assert rebuilt


def test_the_position_of_an_uncommitted_batch_or_of_another_query_does_not_count(tmp_path: Path) -> None:
    checkpoint = stopped(tmp_path, 20, 6)
    FloorLog(checkpoint).write(8, int(NOW * 1000), CounterFloors())  # batch 8: written, never committed
    assert check(checkpoint, DAY)[0]
    checkpoint = stopped(tmp_path / "other", 20, 6)
    (checkpoint / "spark" / "metadata").write_text('{"id":"0f6b5c9e-rebuilt"}')  # a new Spark checkpoint
    rebuilt, metrics = check(checkpoint, DAY)
    assert not rebuilt and gauges(metrics) == (6 * 3600.0, 0.0)


def test_a_record_time_ahead_of_the_drivers_clock_never_makes_the_checkpoint_younger(tmp_path: Path) -> None:
    rebuilt, metrics = check(stopped(tmp_path, -2, 25), DAY)  # the broker's clock two hours ahead
    assert rebuilt and gauges(metrics) == (25 * 3600.0, 1.0)
