"""The event log's upkeep: at most once an interval, retention optional, a failure logged and survived."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streaming.logs.events import EventLog
from streaming.logs.upkeep import EventLogUpkeep
from tests.unit.logs.test_events import T0, event

DAY_S = 86_400.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def names(log: EventLog) -> list[str]:
    return sorted(p.name for p in log.files())


def filled(path: Path, batches: int) -> EventLog:
    log = EventLog(path)
    for batch_id in range(batches):
        log.append(batch_id, [event("a", batch_id + 1, T0 + batch_id)])
    return log


def test_it_runs_at_the_first_append_then_once_an_interval(tmp_path: Path) -> None:
    log = filled(tmp_path, 2)
    monotonic = Clock(100.0)
    upkeep = EventLogUpkeep(log, 0, interval_seconds=3600, monotonic=monotonic)
    assert upkeep.after_append(1)
    assert names(log) == ["batch=0-0.parquet", "batch=1.parquet"]
    log.append(2, [event("a", 3, T0 + 2)])
    monotonic.now += 3599
    assert not upkeep.after_append(2)
    assert names(log) == ["batch=0-0.parquet", "batch=1.parquet", "batch=2.parquet"]
    monotonic.now += 1
    assert upkeep.after_append(2)
    assert names(log) == ["batch=0-0.parquet", "batch=1-1.parquet", "batch=2.parquet"]


def test_retention_goes_by_the_wall_clock_and_0_keeps_everything(tmp_path: Path) -> None:
    log = filled(tmp_path / "events", 3)
    wall = Clock(T0 / 1000 + 10 * DAY_S)
    EventLogUpkeep(log, 0, wall=wall).after_append(2)
    assert len(log.read()) == 3 and names(log) == ["batch=0-1.parquet", "batch=2.parquet"]
    assert EventLogUpkeep(log, 7 * DAY_S, wall=wall).after_append(2)
    assert log.read() == []


def test_a_failure_is_logged_once_and_keeps_every_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    log = filled(tmp_path, 3)
    before = log.read()
    monotonic = Clock(0.0)
    upkeep = EventLogUpkeep(log, 7 * DAY_S, interval_seconds=60, monotonic=monotonic, wall=Clock(T0 / 1000))

    def full_disk(self: EventLog, appending: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(EventLog, "compact", full_disk)
    with caplog.at_level(logging.WARNING, "streaming.logs.upkeep"):
        assert not upkeep.after_append(2)
        assert not upkeep.after_append(2)  # within the interval: not tried, not logged again
    # Only this logger's records: a client thread left by an earlier test may log meanwhile.
    assert [r.getMessage() for r in caplog.records if r.name == "streaming.logs.upkeep"] == [
        f"event log upkeep failed in {tmp_path}; trying again in 60 s"]
    assert log.read() == before
    monkeypatch.undo()
    monotonic.now += 60
    assert upkeep.after_append(2) and log.read() == before
