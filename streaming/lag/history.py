"""A partition's coarse log-end history, and when a record was appended as estimated from it.

Where the record at a committed offset cannot be read (deleted by retention, lookup refused or
not done yet, or the topic is measured by append time), lag in seconds comes from here.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence


class LogEndRing:
    """Coarse log-end history of one partition: at most one sample per ``resolution_s``,
    a flat stretch kept as its two ends, ``capacity`` samples in two flat arrays (16 bytes
    each: 24 h at one a minute is 23 KB per partition)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._times = array("d")
        self._ends = array("q")
        self._head = 0  # index of the oldest sample once full

    def __len__(self) -> int:
        return len(self._times)

    def add(self, time_s: float, log_end: int, resolution_s: float) -> None:
        if self._times:
            last = (self._head - 1) % len(self._times)
            if log_end == self._ends[last] and len(self) >= 2 and self._ends[(last - 1) % len(self)] == log_end:
                self._times[last] = time_s  # stretch the flat run's end
                return
            if time_s - self._times[last] < resolution_s and log_end >= self._ends[last]:
                return
        if len(self._times) < self._capacity:
            self._times.append(time_s)
            self._ends.append(log_end)
            self._head = 0
        else:
            self._times[self._head] = time_s
            self._ends[self._head] = log_end
            self._head = (self._head + 1) % self._capacity

    def samples(self) -> list[tuple[float, int]]:
        n = len(self._times)
        order = range(self._head, self._head + n) if n == self._capacity else range(n)
        return [(self._times[i % n], self._ends[i % n]) for i in order]


def appended_at(samples: Sequence[tuple[float, int]], offset: int, bound: bool = True) -> float | None:
    """When the record at ``offset`` was appended, estimated from ``(time_s, log_end)`` samples.

    Between the last sample at or below ``offset`` and the next one, linear in offsets. Before
    the oldest sample, extrapolated back at the mean produce rate of the history, or the oldest
    sample's time (a lower bound on the age) without one, unless ``bound`` is False. Only samples
    since the log end last went down (truncation, topic re-created) describe this log. None without
    samples or when the log end has not passed ``offset``.
    """
    window: list[tuple[float, int]] = []
    for sample in samples:
        if window and sample[1] < window[-1][1]:
            window = []
        window.append(sample)
    if not window or offset >= window[-1][1]:
        return None
    (t0, end0), (t_last, end_last) = window[0], window[-1]
    if offset < end0:
        span, produced = t_last - t0, end_last - end0
        if span > 0 and produced > 0:
            return t0 - (end0 - offset) * span / produced
        return t0 if bound else None
    i = max(k for k, (_, end) in enumerate(window) if end <= offset)
    (t_a, end_a), (t_b, end_b) = window[i], window[i + 1]
    return t_a + (offset - end_a) * (t_b - t_a) / (end_b - end_a)
