"""Records a group lost to retention before it read them, and how close each group is to losing more.

A committed offset below the partition's log start means retention (or kafka-delete-records)
removed records the group never consumed: its next fetch gets OFFSET_OUT_OF_RANGE and
``auto.offset.reset`` decides where it goes, usually the new log start. :class:`LostRecords`
counts those records once each, per group and topic: for every partition it remembers up to
which offset loss was already counted, so a log start that keeps advancing past a stuck
commit adds only the newly deleted records, and a group that rewinds below a counted offset
does not count it again. The *margin* is ``committed - log start``: the records retention may
still delete before the group loses any (negative: already lost).
"""

from __future__ import annotations

import threading

from streaming.protocol import TopicPartition


def margin(committed: int, log_start: int) -> int:
    """Records between the log start and the group's committed offset (negative: lost)."""
    return committed - log_start


class LostRecords:
    """Per group and topic, the records deleted below the group's committed offsets (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counted_to: dict[tuple[str, TopicPartition], int] = {}
        self._totals: dict[str, dict[str, int]] = {}

    def observe(self, group: str, tp: TopicPartition, committed: int, log_start: int) -> int:
        """One sample of a committed offset against its partition's log start; the records newly counted lost."""
        if committed < 0 or committed >= log_start:
            return 0
        key = (group, tp)
        with self._lock:
            counted_from = max(committed, self._counted_to.get(key, committed))
            lost = log_start - counted_from
            if lost <= 0:
                return 0
            self._counted_to[key] = log_start
            by_topic = self._totals.setdefault(group, {})
            by_topic[tp[0]] = by_topic.get(tp[0], 0) + lost
            return lost

    def totals(self, group: str) -> dict[str, int]:
        """Records lost so far by topic (topics with none absent)."""
        with self._lock:
            return dict(self._totals.get(group, {}))

    def forget(self, group: str) -> None:
        with self._lock:
            self._totals.pop(group, None)
            for key in [k for k in self._counted_to if k[0] == group]:
                del self._counted_to[key]
