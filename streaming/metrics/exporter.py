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

The :class:`~streaming.metrics.exposition.ExportPolicy` (``--label``, ``--metrics-allow``,
``--metrics-deny``) shapes all three: a left-out group family is never stored (nor counted in
``rebalance_monitor_series``), stored group text takes the static labels once as it is put, and the
scrape-time text and the instruments' are filtered and labelled as a scrape renders them (they are
small: the instruments a few hundred lines, the sources a line per polled partition at most).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import generate_latest

from streaming.metrics.exposition import ExportPolicy, Family, FamilyCache, Lines
from streaming.metrics.instruments import JobMetrics


class Exporter:
    """Cached group series in family order, scrape-time ``sources`` (text rendered at each scrape, after the
    group series: their families complete), then ``instruments``."""

    def __init__(self, families: Iterable[Family], instruments: JobMetrics, max_series: int | None = None,
                 sources: Sequence[Callable[[], bytes]] = (), policy: ExportPolicy | None = None) -> None:
        self.instruments = instruments
        self.max_series = max_series
        self.policy = policy or ExportPolicy(instruments.cluster)
        self._sources = tuple(sources)
        self._lock = threading.Lock()
        families = list(families)
        served = [f for f in families if self.policy.allows(f.name)]
        self._left_out = frozenset(f.name for f in families) - {f.name for f in served}
        self._cache = FamilyCache(served, self.policy.label_text)

    def put(self, group: str, lines: Lines, names: Iterable[str], *, if_present: bool = False) -> None:
        """Replace ``group``'s text in the families ``names``; ``if_present``: only if the group is
        still exported (a background publisher must not bring a removed group back)."""
        if self._left_out:
            names = [name for name in names if name not in self._left_out]
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
        policy = self.policy
        return b"".join([*chunks, *(policy.text(source()) for source in self._sources),
                         policy.text(generate_latest(self.instruments.registry))])
