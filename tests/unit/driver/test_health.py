"""Liveness and readiness: caught up once since the query started, unready again only after a failure."""

from __future__ import annotations

from streaming.driver.health import Health
from streaming.lag.tracker import LagTracker

T = 1_700_000_000.0
OFFSETS = ("__consumer_offsets", 0)


class Clock:
    def __init__(self) -> None:
        self.now = T

    def __call__(self) -> float:
        return self.now


def health(max_behind: int = 100, active: bool = True) -> tuple[Health, LagTracker, Clock]:
    clock = Clock()
    tracker = LagTracker(clock=clock)
    return Health(tracker, lambda: active, max_behind, clock), tracker, clock


def test_not_ready_until_a_batch_ends_near_log_ends_sampled_after_the_start() -> None:
    probe, tracker, clock = health()
    assert probe.ready() == (False, "restoring state from the checkpoint")
    tracker.record_offsets({OFFSETS: (0, 5_000)}, T - 5)  # sampled before the query started
    probe.query_started()
    assert probe.ready() == (False, "waiting for the first batch since the query started")
    probe.observe_batch({OFFSETS: 4_990})
    ready, reason = probe.ready()
    assert not ready and "without a log-end sample since the query started" in reason
    clock.now += 10
    tracker.record_offsets({OFFSETS: (0, 9_000)}, clock.now)
    probe.refresh()
    assert probe.ready() == (False, "catching up: 4010 records behind the offsets topic")
    probe.observe_batch({OFFSETS: 8_950})
    assert probe.ready() == (True, "caught up")
    clock.now += 10
    tracker.record_offsets({OFFSETS: (0, 90_000)}, clock.now)  # falling behind under load: still ready
    probe.observe_batch({OFFSETS: 10_000})
    assert probe.ready()[0]


def test_an_idle_trigger_is_caught_up_and_a_failure_is_unready_until_the_restart_catches_up() -> None:
    probe, _, _ = health()
    probe.query_started()
    probe.observe_idle()
    assert probe.ready() == (True, "caught up")
    probe.query_failed(restart_in=4)
    assert probe.ready() == (False, "streaming query failed; restarting it from the checkpoint")
    probe.observe_idle()  # a late event of the failed query changes nothing
    assert not probe.ready()[0]
    assert probe.healthy() == (True, "streaming query restarting in 4s")
    probe.query_started()
    probe.observe_idle()
    assert probe.ready()[0]
    probe.query_failed(restart_in=None)
    assert probe.ready() == (False, "streaming query failed; the job is exiting")


def test_healthy_asks_whether_the_query_runs() -> None:
    assert health(active=True)[0].healthy() == (True, "ok")
    assert health(active=False)[0].healthy() == (False, "streaming query is not running")

    def gone() -> bool:
        raise ConnectionRefusedError("py4j gateway")

    assert Health(LagTracker(), gone).healthy() == (False, "Spark's JVM does not answer: ConnectionRefusedError")
