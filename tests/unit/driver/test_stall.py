"""/-/healthy turns 503 when the query completes no batch for --stall-seconds while records wait, and only
then: a query with nothing new to read runs no batch and is healthy (issue 28)."""

from __future__ import annotations

import logging

import pytest

from streaming.driver.health import Health
from streaming.lag.tracker import LagTracker
from streaming.options import parse_args

T = 1_700_000_000.0
OFFSETS = ("__consumer_offsets", 0)
STALL = 900.0


class Clock:
    def __init__(self) -> None:
        self.now = T

    def __call__(self) -> float:
        return self.now


def watched(behind: list[int | None], active: bool = True, stall: float = STALL) -> tuple[Health, Clock]:
    clock = Clock()
    return Health(LagTracker(clock=clock), lambda: active, 100, clock, stall, lambda: behind[0]), clock


def test_a_first_batch_that_never_completes_with_records_waiting_is_unhealthy(
        caplog: pytest.LogCaptureFixture) -> None:
    behind: list[int | None] = [1_100_000]
    probe, clock = watched(behind)
    assert probe.healthy() == (True, "ok")  # the query has not started
    probe.query_started()
    clock.now += STALL
    assert probe.healthy() == (True, "ok")  # a long first batch on a big backlog is not a stall
    clock.now += 1
    with caplog.at_level(logging.ERROR, logger="rebalance_monitor"):
        assert probe.healthy() == (False, "streaming query stalled: no batch completed for 901s with 1100000 "
                                          "records waiting (--stall-seconds 900)")
        probe.healthy()
    assert len([r for r in caplog.records if "stalled" in r.getMessage()]) == 1  # logged once, not per probe
    probe.observe_batch({OFFSETS: 10})  # a batch completes: healthy again, and the bound starts over
    assert probe.healthy() == (True, "ok")
    clock.now += STALL + 1
    assert not probe.healthy()[0]


def test_no_new_data_is_never_a_stall() -> None:
    behind: list[int | None] = [0]
    probe, clock = watched(behind)
    probe.query_started()
    clock.now += 10 * STALL  # no batch, nothing to read: Spark runs no batch
    assert probe.healthy() == (True, "ok")
    behind[0] = None  # input lag not known (no log-end sample): no verdict either
    assert probe.healthy() == (True, "ok")


def test_idle_triggers_are_progress() -> None:
    behind: list[int | None] = [0]
    probe, clock = watched(behind)
    probe.query_started()
    clock.now += STALL
    probe.observe_idle()  # caught up a moment ago
    behind[0] = 50  # records arrived since; their batch is under way
    clock.now += STALL - 1
    assert probe.healthy() == (True, "ok")
    clock.now += 2
    assert not probe.healthy()[0]


def test_a_restart_starts_the_bound_over_and_a_pending_restart_is_healthy() -> None:
    behind: list[int | None] = [500]
    probe, clock = watched(behind)
    probe.query_started()
    clock.now += STALL - 10
    probe.query_failed(restart_in=30)
    clock.now += 30
    assert probe.healthy() == (True, "streaming query restarting in 30s")
    probe.query_started()
    clock.now += STALL - 1
    assert probe.healthy() == (True, "ok")


def test_stalls_are_not_watched_at_0_or_unless_asked() -> None:
    behind: list[int | None] = [500]
    probe, clock = watched(behind, stall=0)
    probe.query_started()
    clock.now += 10 * STALL
    assert probe.healthy() == (True, "ok")
    plain = Health(LagTracker(clock=clock), lambda: True, 100, clock)
    plain.query_started()
    clock.now += 10 * STALL
    assert plain.healthy() == (True, "ok")


def test_a_stopped_query_or_a_dead_jvm_says_so_first() -> None:
    behind: list[int | None] = [500]
    probe, clock = watched(behind, active=False)
    probe.query_started()
    clock.now += 2 * STALL
    assert probe.healthy() == (False, "streaming query is not running")


def test_the_option() -> None:
    assert parse_args(["--bootstrap-server", "b"], environ={}).driver.stall_seconds == 900.0
    assert parse_args(["--bootstrap-server", "b", "--stall-seconds", "0"], environ={}).driver.stall_seconds == 0
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b", "--stall-seconds", "-1"], environ={})
