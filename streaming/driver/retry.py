"""When to start a failed streaming query again, and when to give up and exit for the supervisor."""

from __future__ import annotations


class RetryClock:
    """When to start a failed query again: 1 s after the first failure, doubling to 60 s while failures
    follow each other without a batch in between; give up once failing has lasted ``limit_seconds``."""

    FIRST_SECONDS = 1.0
    MAX_SECONDS = 60.0

    def __init__(self, limit_seconds: float) -> None:
        self.limit_seconds = limit_seconds
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self.last_batch: float | None = None  # the last batch time at that failure
        self.failures = 0

    def failed(self, now: float, last_batch: float | None) -> float | None:
        """A failure at ``now`` (the last batch at ``last_batch``): seconds to wait before the restart, or
        None to give up."""
        if self.failing_since is None or last_batch != self.last_batch:  # a batch since: a new run of failures
            self.failing_since, self.last_batch, self.failures = now, last_batch, 0
        self.failures += 1
        if now - self.failing_since >= self.limit_seconds:
            return None
        return min(self.MAX_SECONDS, self.FIRST_SECONDS * 2 ** (self.failures - 1))
