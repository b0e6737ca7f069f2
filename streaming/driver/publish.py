"""What the driver does with a group once a batch changed it: its series, its lag, the advisor.

The group stage hands over one change per changed group (:class:`~streaming.protocol.GroupChange`);
:class:`Publisher` renders what it is given, never reaching back into the stage: the group series
(:mod:`streaming.metrics.groups`) into the exporter, gives the lag book what lag is computed over
(:mod:`streaming.lag.book`, which tells the lag tracker what to poll and hands its rows back to be
rendered, :mod:`streaming.driver.lag_render`) and offers the group to the assignor advisor, whose
results are rendered back. The group's state series go through the state view
(:mod:`streaming.live.view`), which reconciles the offsets topic's state with the live poll's.
The exporter only stores.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from streaming.advisor.background import AdvisorPass
from streaming.driver.floors import CounterFloors
from streaming.driver.lag_render import LagLines, ScrapeText
from streaming.lag.book import LagBook
from streaming.lag.config import DEFAULT_HEALTH_WINDOW_S, TopicFilter
from streaming.lag.health import HealthWindows
from streaming.lag.loss_file import LossFile
from streaming.lag.tracker import LagTracker
from streaming.live.config import DEFAULT_INTERVAL_S as LIVE_INTERVAL_S
from streaming.live.state import LiveStates
from streaming.live.view import Shown, StateView
from streaming.metrics import compat
from streaming.metrics.exporter import Exporter
from streaming.metrics.exposition import ExportPolicy
from streaming.metrics.groups import (
    ADVISOR_FAMILY,
    GROUP_FAMILIES,
    GROUP_NAMES,
    OFFSET_FAMILIES,
    OFFSET_NAMES,
    advice_lines,
    group_lines,
    offset_lines,
)
from streaming.metrics.instruments import JobMetrics
from streaming.metrics.lag import LAG_FAMILIES, member_partitions
from streaming.metrics.live import HEALTH, LIVE_FAMILIES, LIVE_NAMES, RETENTION_FAMILIES, state_lines
from streaming.metrics.server import DEFAULT_SCRAPE_TIMEOUT_S
from streaming.protocol import GroupChange, GroupSummary, TopicPartition

# A scrape waits for fresh lag at most this share of its timeout; the rest is left to render and send.
FRESHEN_SHARE = 0.5


class Publisher:
    """Publishes changed and removed groups to the metrics and the advisor."""

    def __init__(self, exporter: Exporter, book: LagBook, instruments: JobMetrics,
                 advisor: AdvisorPass | None = None, per_partition: bool = True, member_mode: str = "client",
                 kafka_exporter: bool = False, live_poll_seconds: float = LIVE_INTERVAL_S) -> None:
        self.exporter = exporter
        self.book = book
        self.instruments = instruments
        self.advisor = advisor
        self.per_partition = per_partition
        self.member_mode = member_mode
        self.kafka_exporter = kafka_exporter
        self._group_names = (*GROUP_NAMES, *(f.name for f in compat.GROUP_FAMILIES)) if kafka_exporter else GROUP_NAMES
        self.cluster = instruments.cluster
        # A live observation older than three polls (two missed) no longer wins over the offsets topic.
        self.states = StateView(LiveStates(), self._put_state, 3 * live_poll_seconds if live_poll_seconds > 0 else 0.0)
        self.floors = CounterFloors()

    def apply(self, change: GroupChange) -> None:
        """One group's series from the change the group stage handed over (see
        :class:`~streaming.protocol.GroupChange`): every series when it carries a summary, else only the
        series commits move (its offsets, commit count, lag); the rest show what the last whole change
        rendered."""
        if change.summary is not None:
            self._publish(change.summary, change)
            return
        group = change.group
        commits_total = self.floors.hold_commits(group, change.commits_total)
        if commits_total is None:  # no whole change since this process started: none to keep a floor from
            commits_total = change.commits_total
        self.exporter.put(group, offset_lines(self.cluster, group, change.committed, commits_total,
                                              self.per_partition), OFFSET_NAMES)
        self.book.update(group, change.committed, None, change.last_commit_ms / 1000)

    def _publish(self, summary: GroupSummary, change: GroupChange) -> None:
        group = summary.group
        shown, commits_total = self.floors.hold(summary, change.commits_total)
        lines = group_lines(self.cluster, shown, change.committed, commits_total,
                            self.per_partition, self.member_mode, self.kafka_exporter)
        self.exporter.put(group, lines, self._group_names)
        self.book.rebalanced(group, summary.rebalances_total, time.time())
        self.states.from_offsets(summary)
        self.book.update(group, change.committed, member_partitions(summary, change.assignments, self.member_mode),
                         change.last_commit_ms / 1000)
        if self.advisor is not None:
            self.advisor.offer(summary, change.assignments)

    def remove(self, group: str) -> None:
        """A deleted or expired group: the lag book first, so a lag refresh cannot put it back."""
        self.book.remove(group)
        self.states.forget(group)
        self.exporter.remove(group)
        self.floors.forget(group)
        if self.advisor is not None:
            self.advisor.forget(group)

    def _put_state(self, group: str, shown: Shown, durations: tuple[tuple[int, ...], float]) -> None:
        """The state view's result for ``group`` (the sink's or the live poller's thread): only while the group
        is exported, so a poll cannot bring back a group that was removed."""
        self.book.state(group, shown.state)
        self.exporter.put(group, state_lines(self.cluster, group, shown, durations), LIVE_NAMES, if_present=True)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around a batch's fold (see :meth:`streaming.lag.book.LagBook.batch`)."""
        with self.book.batch():
            yield

    def scrape(self, timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S) -> bytes:
        """What ``/metrics`` serves: the lag freshened as Kafka's own tool would show it, then everything.

        The freshen round is waited for at most FRESHEN_SHARE of the scrape's ``timeout_s``, so that the
        rest is left to render and send; past that the scrape serves the lag as last rendered.
        """
        if not self.book.freshen(timeout_s * FRESHEN_SHARE):
            self.instruments.freshen_late.labels(self.instruments.cluster).inc()
        return self.exporter.render()


class AdviceLines:
    """The advisor pass's results (its own thread), rendered into a group's series while it is exported."""

    def __init__(self, cluster: str, exporter: Exporter) -> None:
        self.cluster = cluster
        self.exporter = exporter

    def __call__(self, group: str, ratios: Mapping[str, float] | None) -> None:
        self.exporter.put(group, advice_lines(self.cluster, group, ratios), (ADVISOR_FAMILY.name,), if_present=True)


def build_publishing(cluster: str, tracker: LagTracker, lag_granularity: str = "partition",
                     max_series: int | None = None, member_mode: str = "client",
                     compat_mode: str = "none", live_poll_seconds: float = LIVE_INTERVAL_S, *,
                     text: ScrapeText | None = None, instruments: JobMetrics | None = None, advisor: bool = False,
                     fetch_log_ends: Callable[[], bool | None] | None = None, max_age_s: float = 0.0,
                     fetch_committed: Callable[[list[str]], dict[str, dict[TopicPartition, int]]] | None = None,
                     on_refresh: Sequence[Callable[[float], None]] = (), ready: Callable[[], bool] | None = None,
                     loss_file: Path | None = None, health_window_s: float = DEFAULT_HEALTH_WINDOW_S,
                     labels: Sequence[tuple[str, str]] = (), metrics_allow: str | None = None,
                     metrics_deny: str | None = None, topics: TopicFilter | None = None) -> Publisher:
    """The metrics side of the job wired together: instruments, exporter, lag book, advisor, publisher.

    ``text`` is what scrapes append after the group series, ``instruments`` the job's own (each built
    here when not given). After each
    refresh the lag book refreshes the job's input lag, then ``on_refresh``. A scrape
    (:meth:`Publisher.scrape`) first fetches log ends older than ``max_age_s`` (``fetch_log_ends``)
    and the committed offsets of the groups committing now (``fetch_committed``). ``labels`` go on every
    served series, ``metrics_allow``/``metrics_deny`` choose the families served (``--label``,
    ``--metrics-allow``, ``--metrics-deny``); the lag book follows the ``topics`` the filter lets through
    (``--include-topics``, ``--exclude-topics``; all when None).

    Records lost are counted once ``ready`` says the job is (always, when not given), and kept in
    ``loss_file`` across restarts (written at most every LOSS_SAVE_S, and as the lag refresh stops); the
    health verdict judges ``health_window_s`` of samples, a sampling gap being the tracker's staleness limit.
    """
    per_partition = lag_granularity == "partition"
    kafka_exporter = compat_mode == "kafka_exporter"
    instruments = instruments or JobMetrics(cluster, tracker)
    families = [*GROUP_FAMILIES, *LIVE_FAMILIES, ADVISOR_FAMILY, *OFFSET_FAMILIES, *LAG_FAMILIES, *RETENTION_FAMILIES,
                HEALTH]
    if kafka_exporter:
        families += [*compat.GROUP_FAMILIES, *compat.LAG_FAMILIES]
    text = text or ScrapeText(cluster, tracker, kafka_exporter=kafka_exporter)
    exporter = Exporter(families, instruments, max_series, sources=(text.text,),
                        policy=ExportPolicy.of(cluster, labels, metrics_allow, metrics_deny))
    book = LagBook(tracker, LagLines(exporter, text, per_partition, kafka_exporter),
                   HealthWindows(health_window_s, max_gap_s=tracker.stale_after_s),
                   fetch_log_ends=fetch_log_ends, max_age_s=max_age_s, fetch_committed=fetch_committed,
                   on_refresh=(instruments.refresh_input_lag, *on_refresh), ready=ready,
                   loss_file=LossFile(loss_file) if loss_file is not None else None, topics=topics)
    return Publisher(exporter, book, instruments, AdvisorPass(AdviceLines(cluster, exporter)) if advisor else None,
                     per_partition=per_partition, member_mode=member_mode, kafka_exporter=kafka_exporter,
                     live_poll_seconds=live_poll_seconds)
