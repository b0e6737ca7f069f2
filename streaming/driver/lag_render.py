"""The lag book's results rendered where scrapes read them.

:class:`LagLines` is the book's :class:`~streaming.lag.book.LagShow`: each group's rows become its
lag series in the exporter's cache, and the log ends of a refresh become text kept for scrapes.
:class:`ScrapeText` is what a scrape appends after the cached group series: those log ends, the lag
poller's health and the live poller's last round, rendered then (:mod:`streaming.metrics.lag`,
:mod:`streaming.metrics.live`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from streaming.lag.book import GroupLag
from streaming.lag.tracker import LagTracker
from streaming.live.poller import LivePollStats
from streaming.metrics import compat
from streaming.metrics.exporter import Exporter
from streaming.metrics.exposition import Lines
from streaming.metrics.lag import LAG_NAMES, LOG_END_FAMILY, lag_lines, log_end_text, poller_text
from streaming.metrics.live import poller_text as live_poller_text
from streaming.protocol import TopicPartition


class ScrapeText:
    """Scrape-time text: the last refresh's log ends, the lag poller's health, the live poller's last round
    (``live``: the live poller runs, so its families are served from the start)."""

    def __init__(self, cluster: str, tracker: LagTracker, unresolved: Callable[[], Mapping[str, int]] = dict,
                 kafka_exporter: bool = False, live: bool = False) -> None:
        self.cluster = cluster
        self._tracker = tracker
        self._unresolved = unresolved  # KIP-848 topic ids with no name, by reason
        self._kafka_exporter = kafka_exporter
        self._log_ends = LOG_END_FAMILY.header
        self._live = LivePollStats() if live else None

    def log_ends(self, ends: Mapping[TopicPartition, tuple[int, int]]) -> None:
        self._log_ends = log_end_text(self.cluster, ends, self._kafka_exporter)

    def live_round(self, stats: LivePollStats) -> None:
        """The live poller's instruments after its latest round."""
        self._live = stats

    def text(self) -> bytes:
        tracker = self._tracker
        lag = poller_text(self.cluster, tracker.last_round_at(), tracker.errors(), self._unresolved(),
                          tracker.timestamp_types(), tracker.offsets_topic_gaps(), time.time())
        live = b"" if self._live is None else live_poller_text(self.cluster, self._live)
        return b"".join((self._log_ends, lag, live))


class LagLines:
    """Renders the lag book's results: a group's rows into ``exporter``, a refresh's log ends into ``text``."""

    def __init__(self, exporter: Exporter, text: ScrapeText, per_partition: bool = True,
                 kafka_exporter: bool = False) -> None:
        self._exporter = exporter
        self._text = text
        self._per_partition = per_partition
        self._kafka_exporter = kafka_exporter
        self._names = (*LAG_NAMES, *(f.name for f in compat.LAG_FAMILIES)) if kafka_exporter else LAG_NAMES

    def group(self, view: GroupLag) -> None:
        lines = Lines(self._text.cluster)
        lag_lines(lines, view, self._per_partition, self._kafka_exporter)
        self._exporter.put(view.group, lines, self._names)

    def log_ends(self, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        self._text.log_ends(offsets)
