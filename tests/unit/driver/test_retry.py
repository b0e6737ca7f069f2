"""When the job starts a failed streaming query again, and when it gives up (``streaming.job.RetryClock``)."""

from __future__ import annotations

from streaming.driver.retry import RetryClock


def test_backoff_doubles_to_a_minute_while_failures_follow_each_other() -> None:
    clock = RetryClock(limit_seconds=3600)
    waits = [clock.failed(now=10.0 * i, last_batch=100.0) for i in range(9)]
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_a_batch_between_failures_starts_a_new_run() -> None:
    clock = RetryClock(limit_seconds=3600)
    assert [clock.failed(0, 100.0), clock.failed(5, 100.0), clock.failed(10, 100.0)] == [1, 2, 4]
    assert clock.failed(3000, 2900.0) == 1  # progress at 2900: the earlier failures are history
    assert clock.failed(3700, 2900.0) == 2  # 700 s into this run, not 3700 s


def test_gives_up_once_failing_has_lasted_the_limit() -> None:
    clock = RetryClock(limit_seconds=300)
    assert clock.failed(0, None) == 1
    assert clock.failed(299, None) == 2
    assert clock.failed(300, None) is None


def test_a_zero_limit_gives_up_at_the_first_failure() -> None:
    assert RetryClock(limit_seconds=0).failed(0, 50.0) is None
