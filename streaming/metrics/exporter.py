"""The Prometheus exposition: group series from cached text, then the job's own metrics.

The exporter only stores and serves. Group series mirror state the job keeps elsewhere, so
they are rendered to text when something changes (:mod:`streaming.metrics.groups`,
:mod:`streaming.metrics.lag`) and :meth:`Exporter.put` keeps that text per family and group;
a scrape (:meth:`Exporter.render`) only joins cached bytes (see
:mod:`streaming.metrics.exposition`), then appends the text of its ``sources`` (state
rendered at scrape time) and the job's instruments (:mod:`streaming.metrics.instruments`).
Label values are bounded by groups, members, topics and partitions (nothing per record);
``--max-series`` caps the group series and ``rebalance_monitor_series_dropped`` says how many a
scrape left out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import generate_latest

from streaming.metrics.exposition import Family, FamilyCache, Lines
from streaming.metrics.instruments import JobMetrics


class Exporter:
    """Cached group series in family order, scrape-time ``sources`` (text rendered at each scrape, after the
    group series: their families complete), then ``instruments``."""

    def __init__(self, families: Iterable[Family], instruments: JobMetrics, max_series: int | None = None,
                 sources: Sequence[Callable[[], bytes]] = ()) -> None:
        self.instruments = instruments
        self.max_series = max_series
        self._sources = tuple(sources)
        self._lock = threading.Lock()
        self._cache = FamilyCache(families)

    def put(self, group: str, lines: Lines, names: Iterable[str], *, if_present: bool = False) -> None:
        """Replace ``group``'s text in the families ``names``; ``if_present``: only if the group is
        still exported (a background publisher must not bring a removed group back)."""
        with self._lock:
            if if_present and not self._cache.has(group):
                return
            self._cache.put(group, lines, names)

    def remove(self, group: str) -> None:
        """Forget a deleted or expired group: its series leave the next scrape."""
        with self._lock:
            self._cache.remove(group)

    def group_text(self, group: str) -> bytes:
        """The text a scrape serves for one group (what the latency benchmark watches)."""
        with self._lock:
            return self._cache.group_text(group)

    def render(self) -> bytes:
        with self._lock:
            chunks, kept, dropped = self._cache.render(self.max_series)
            groups = self._cache.groups()
        self.instruments.count_series(groups, kept, dropped)
        # Sources are called outside the lock: they take their own locks, which writers hold while
        # they put text here.
        return b"".join([*chunks, *(source() for source in self._sources), generate_latest(self.instruments.registry)])
