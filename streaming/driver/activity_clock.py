"""The activity clock: a thread that has groups turn abandoned on time, batch or no batch.

A group without members turns abandoned once ``--abandoned-after`` has passed since its last member
and its last commit (:func:`streaming.groups.summary.activity`): nothing is written for it then, only
the clock moves. The group stage keeps each inactive group's deadline, but was asked for them only as
a batch ran, and on a quiet cluster (nothing new in the offsets topic) no batch runs: the group stayed
shown inactive, and kept paging, for as long as the cluster stayed quiet. Every ``interval_s`` this
thread has the query's current sink publish the groups whose deadline passed
(:meth:`streaming.driver.sink.Sink.publish_due`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from streaming.driver.sink import Sink
from streaming.lifecycle import PollingThread

log = logging.getLogger(__name__)

# How late past its deadline a group may be shown abandoned, at most (beside the deadline's own day).
INTERVAL_S = 1.0


class ActivityClock(PollingThread):
    """A component (see :mod:`streaming.lifecycle`) publishing due abandoned groups every ``interval_s``;
    ``sink`` gives the sink in use (the query runner makes a new one at each restore), None before one."""

    def __init__(self, sink: Callable[[], Sink | None], interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__("activity-clock")
        self._sink, self.interval_s, self._clock = sink, interval_s, clock

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            sink = self._sink()
            if sink is None:
                continue
            try:
                sink.publish_due(int(self._clock() * 1000))
            except Exception:  # the next tick tries again; a dead thread would leave groups inactive for ever
                log.exception("publishing the groups turned abandoned failed")
