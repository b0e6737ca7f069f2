"""Records a group lost to retention before it read them, and how close each group is to losing more.

A committed offset below the partition's log start means retention (or kafka-delete-records)
removed records the group never consumed: its next fetch gets OFFSET_OUT_OF_RANGE and
``auto.offset.reset`` decides where it goes, usually the new log start. :class:`LostRecords`
counts those records once each, per group and topic: for every partition it remembers up to
which offset loss was already counted, so a log start that keeps advancing past a stuck
commit adds only the newly deleted records, and a group that rewinds below a counted offset
does not count it again. The *margin* is ``committed - log start``: the records retention may
still delete before the group loses any (negative: already lost).

What was counted is remembered per partition *incarnation*: a log end below the one seen when
loss was last counted there, or a log start below it, is a re-created (or truncated) partition,
and counting starts afresh instead of waiting for the new log start to pass the old one's.

Whether a loss is *certain* (the committed offset is the group's current one, not one the job
has not caught up with) is the lag book's to decide (:mod:`streaming.lag.book`): it asks
:meth:`LostRecords.uncounted` first and counts (:meth:`LostRecords.observe`) only then.
:meth:`LostRecords.state` and :meth:`LostRecords.restore` carry what was counted across restarts
(:mod:`streaming.lag.loss_file`), so the counter never steps back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from streaming.protocol import TopicPartition


def margin(committed: int, log_start: int) -> int:
    """Records between the log start and the group's committed offset (negative: lost)."""
    return committed - log_start


@dataclass
class _Counted:
    """Up to which offset loss was counted on one partition for one group, and the incarnation it was
    counted in (the log start and end last seen there)."""

    to: int
    log_start: int
    log_end: int


class LostRecords:
    """Per group and topic, the records deleted below the group's committed offsets (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counted: dict[tuple[str, TopicPartition], _Counted] = {}
        self._totals: dict[str, dict[str, int]] = {}
        self.changes = 0  # how many times anything counted changed (for whoever persists it)

    def seen(self, group: str, tp: TopicPartition, log_start: int, log_end: int) -> None:
        """A sample of the partition: a log start or end below the last seen one is a new incarnation
        (re-created or truncated), whose records are counted afresh."""
        key = (group, tp)
        with self._lock:
            counted = self._counted.get(key)
            if counted is None:
                return
            if log_end < counted.log_end or log_start < counted.log_start:
                del self._counted[key]
                self.changes += 1
            else:
                counted.log_start, counted.log_end = log_start, log_end

    def sample(self, group: str, tp: TopicPartition, committed: int, log_start: int, log_end: int) -> int:
        """:meth:`seen` then :meth:`uncounted` under one lock (the lag book's call for every sampled partition)."""
        key = (group, tp)
        with self._lock:
            counted = self._counted.get(key)
            if counted is not None:
                if log_end < counted.log_end or log_start < counted.log_start:
                    del self._counted[key]
                    self.changes += 1
                    counted = None
                else:
                    counted.log_start, counted.log_end = log_start, log_end
            if committed < 0 or committed >= log_start:
                return 0
            return log_start - max(committed, counted.to if counted is not None else committed)

    def uncounted(self, group: str, tp: TopicPartition, committed: int, log_start: int) -> int:
        """The records below ``committed`` that the log start passed and that were not counted yet."""
        if committed < 0 or committed >= log_start:
            return 0
        with self._lock:
            counted = self._counted.get((group, tp))
            return log_start - max(committed, counted.to if counted is not None else committed)

    def observe(self, group: str, tp: TopicPartition, committed: int, log_start: int,
                log_end: int | None = None) -> int:
        """Count a committed offset known to be current against its partition's log start (and end: the
        incarnation); the records newly counted lost."""
        if log_end is not None:
            self.seen(group, tp, log_start, log_end)
        lost = self.uncounted(group, tp, committed, log_start)
        if lost <= 0:
            return 0
        with self._lock:
            self._counted[(group, tp)] = _Counted(log_start, log_start, log_start if log_end is None else log_end)
            by_topic = self._totals.setdefault(group, {})
            by_topic[tp[0]] = by_topic.get(tp[0], 0) + lost
            self.changes += 1
            return lost

    def totals(self, group: str) -> dict[str, int]:
        """Records lost so far by topic (topics with none absent)."""
        with self._lock:
            return dict(self._totals.get(group, {}))

    def forget(self, group: str) -> None:
        with self._lock:
            if self._totals.pop(group, None) is not None:
                self.changes += 1
            for key in [k for k in self._counted if k[0] == group]:
                del self._counted[key]

    def state(self) -> dict[str, Any]:
        """Everything counted, as JSON-ready data."""
        with self._lock:
            return {"totals": {g: dict(t) for g, t in self._totals.items()},
                    "counted": [[g, t, p, c.to, c.log_start, c.log_end]
                                for (g, (t, p)), c in sorted(self._counted.items())]}

    def restore(self, state: dict[str, Any]) -> None:
        """Counts from :meth:`state` (a previous run's), added under whatever this run counted already."""
        with self._lock:
            for group, by_topic in state.get("totals", {}).items():
                mine = self._totals.setdefault(str(group), {})
                for topic, count in by_topic.items():
                    mine[str(topic)] = mine.get(str(topic), 0) + int(count)
            for group, topic, partition, to, log_start, log_end in state.get("counted", []):
                key = (str(group), (str(topic), int(partition)))
                self._counted.setdefault(key, _Counted(int(to), int(log_start), int(log_end)))
