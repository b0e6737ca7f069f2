"""The event log's upkeep in the job: retention and compaction after a batch's append, about once an hour.

Once an hour keeps a batch from paying for it (listing the log and reading footers takes time in
proportion to its files) and makes each segment about an hour of batches (:mod:`streaming.logs.events`).
The first append after the job starts runs it, so a job restarted more often than hourly still keeps
its log bounded. A failure (a full disk, a permission) is logged and tried again an interval later: it
never fails the batch, and loses no event, since compaction deletes a batch file only once a renamed
segment holds its rows and retention only a file whose every event is past the retention.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from streaming.logs.events import EventLog

log = logging.getLogger(__name__)

UPKEEP_SECONDS = 3600.0


class EventLogUpkeep:
    """Runs :meth:`EventLog.expire` (with a retention) and :meth:`EventLog.compact` at most once per interval.

    ``monotonic`` paces it; ``wall`` (seconds since the epoch) dates the retention's cutoff, since event
    times are record times. Both are injectable for tests.
    """

    def __init__(self, event_log: EventLog, retention_seconds: float, interval_seconds: float = UPKEEP_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.event_log = event_log
        self.retention_ms = int(retention_seconds * 1000)
        self.interval_seconds = interval_seconds
        self._monotonic = monotonic
        self._wall = wall
        self._last: float | None = None

    def after_append(self, batch_id: int) -> bool:
        """Called once ``batch_id``'s events are appended; True when the upkeep ran and succeeded."""
        now = self._monotonic()
        if self._last is not None and now - self._last < self.interval_seconds:
            return False
        self._last = now
        try:
            self._run(batch_id)
        except Exception:  # the batch goes on; the next interval tries again
            log.warning("event log upkeep failed in %s; trying again in %.0f s", self.event_log.path,
                        self.interval_seconds, exc_info=True)
            return False
        return True

    def _run(self, batch_id: int) -> None:
        expired = 0
        if self.retention_ms > 0:  # 0: keep every event
            expired = self.event_log.expire(int(self._wall() * 1000) - self.retention_ms)
        merged = self.event_log.compact(batch_id)
        if expired or merged:
            log.info("event log %s: %d file(s) past the retention deleted, %d batch file(s) merged into segments",
                     self.event_log.path, expired, merged)
