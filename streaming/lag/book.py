"""The lag book: what each group's lag is computed over, and what follows from it.

Per group the book keeps the committed offsets (the job's, with newer ones a scrape fetched from
the coordinators laid over them), the partitions each member owns and when the group last
committed. From those and the tracker's samples it derives, once per refresh, one
:class:`GroupLag` per group (the rows the metrics stage renders), and as it does, the state that
only a sequence of refreshes has: truncations counted once per commit, records lost to retention
(:mod:`streaming.lag.retention`) and the health verdict's windows (:mod:`streaming.lag.health`), as
Burrow's evaluator is fed from its storage. It is also the one place that tells the tracker what
to poll (:meth:`LagTracker.set_wanted`), and the one that freshens log ends and committed offsets
for a scrape, within a time budget.

Records below a committed offset that the log start passed are counted lost only when that offset is
known to be current as of the log-start sample (:meth:`LagBook._certain`): the job is ready, and either
it has folded every commit written before the sample (:meth:`folded_through`, from each batch) or an
OffsetFetch sent after the sample found it (a scrape's, or one the refresh sends for the loss candidate
itself, within a budget). What was counted is kept in a file beside the checkpoint
(:mod:`streaming.lag.loss_file`).

Threads: the batch thread calls :meth:`update`, :meth:`remove`, :meth:`rebalanced`,
:meth:`folded_through` and :meth:`batch`; the live poller :meth:`state`; the refresh thread
:meth:`refresh`; scrapes :meth:`freshen` (the round itself on a thread of its own, when a scrape bounds its
wait); the job's exit :meth:`close`. Every :class:`GroupLag` is
handed to ``show`` under the book's lock, so a refresh can never put back a group's older rows after
an update showed newer ones.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from streaming.lag.config import TopicFilter
from streaming.lag.health import HealthWindows
from streaming.lag.loss_file import LossFile
from streaming.lag.owned import Owned, Owner
from streaming.lag.retention import LostRecords, margin
from streaming.lag.tracker import LagTracker
from streaming.protocol import TopicPartition

log = logging.getLogger(__name__)

# When fetching log ends and re-rendering for a scrape take longer than SCRAPE_BUDGET_S several
# scrapes in a row (a cluster too large to re-render per scrape, not one busy moment), scrapes stop
# asking for SCRAPE_BACKOFF_S and lag follows the poll interval instead.
SCRAPE_BUDGET_S = 2.0
SCRAPE_OVER_BUDGET = 3
SCRAPE_BACKOFF_S = 120.0
# Groups whose last commit the job saw this recently are the ones whose committed offsets a scrape
# also fetches (OffsetFetch, one request per coordinator for all of them): the job learns commits a
# trigger and a batch late, so a group committing as it consumes would read high by that much.
ACTIVE_WINDOW_S = 120.0
# At most this many groups' committed offsets are fetched for a scrape (the most recently committed).
ACTIVE_GROUPS_MAX = 2_000

# Records below a committed offset are counted lost only once that offset is known to be current as of
# the log-start sample (see LagBook._certain): the job folded every commit written before the sample (its
# newest folded record written at least FOLD_MARGIN_S after the sample, a margin for the brokers' clocks
# against this host's), or an OffsetFetch sent after the sample confirmed it. At most LOSS_CONFIRM_MAX
# groups' offsets are fetched to confirm a loss per refresh, each at most once per log-start sample.
FOLD_MARGIN_S = 2.0
LOSS_CONFIRM_MAX = 100
# What was counted lost is written to the loss file at most this often (and at close).
LOSS_SAVE_S = 30.0

NOTHING_OWNED = Owned()  # a group no member is known to own anything of
Row = tuple[int, float | None]  # a partition's lag in records and when its next record was written
CompatRow = tuple[str, int, int, int | None]  # topic, partition, committed (-1: none), lag (None: unknown)


@dataclass(frozen=True)
class GroupLag:
    """One group's lag as of a refresh: what the metrics stage renders, nothing it has to compute again.

    ``rows`` holds the committed partitions with a fresh sample (never one whose commit overtook its
    sample: the consumer moved on since), ``methods`` how each one's seconds were found,
    ``uncommitted`` the owned partitions never committed (lag from the log start), ``owned`` each
    member's partitions. ``margins``, ``lost`` and ``retention_deadline`` are the retention series;
    ``verdict`` the health (status, reason), None before a sample; ``compat_rows`` what
    kafka_exporter's families need.
    """

    group: str
    rows: Mapping[TopicPartition, Row] = field(default_factory=dict)
    methods: Mapping[TopicPartition, str] = field(default_factory=dict)
    uncommitted: Mapping[TopicPartition, int] = field(default_factory=dict)
    owned: Mapping[Owner, Sequence[TopicPartition]] = field(default_factory=dict)
    truncations: Mapping[str, int] = field(default_factory=dict)
    margins: Mapping[TopicPartition, int] = field(default_factory=dict)
    lost: Mapping[str, int] = field(default_factory=dict)
    retention_deadline: float | None = None
    verdict: tuple[str, str] | None = None
    compat_rows: tuple[CompatRow, ...] = ()


class LagShow(Protocol):
    """Where the book's results go (the driver renders them into the exporter)."""

    def group(self, view: GroupLag) -> None:
        """A group's lag rows, under the book's lock."""

    def log_ends(self, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """(log start, log end) of every sampled partition some group commits to or owns, after a refresh."""


def _ended() -> threading.Event:
    ended = threading.Event()
    ended.set()
    return ended


class LagBook:
    """Every group's committed offsets and owned partitions, and what the tracker's samples make of them."""

    def __init__(self, tracker: LagTracker, show: LagShow, health: HealthWindows | None = None,
                 fetch_log_ends: Callable[[], bool | None] | None = None, max_age_s: float = 0.0,
                 fetch_committed: Callable[[list[str]], dict[str, dict[TopicPartition, int]]] | None = None,
                 on_refresh: Sequence[Callable[[float], None]] = (), ready: Callable[[], bool] | None = None,
                 loss_file: LossFile | None = None, loss_save_s: float = LOSS_SAVE_S,
                 clock: Callable[[], float] = time.time, topics: TopicFilter | None = None) -> None:
        self.tracker = tracker
        self._topics = topics  # --include-topics/--exclude-topics: the rest is never polled, shown or counted
        self._clock = clock  # when an OffsetFetch is sent, on the tracker's clock (its samples' times)
        self.health = health or HealthWindows()
        self._show = show
        self._fetch_log_ends, self._max_age_s, self._fetch_committed = fetch_log_ends, max_age_s, fetch_committed
        self._on_refresh = tuple(on_refresh)
        self._lock = threading.Lock()
        self._offsets: dict[str, Mapping[TopicPartition, int]] = {}
        self._owned: dict[str, Owned] = {}
        self._last_commit: dict[str, float] = {}  # group -> when the job last saw it commit (epoch s)
        self._fresh: dict[str, dict[TopicPartition, int]] = {}  # committed offsets a scrape fetched
        self._fresh_at: dict[str, float] = {}  # when the request that found a group's fresh offsets was sent
        self._fresh_missing: dict[str, frozenset[TopicPartition]] = {}  # partitions that request found no commit for
        # group -> partition -> the last commit counted as truncated there (one entry a partition: a group that
        # keeps committing past a truncated log must not add one a commit)
        self._truncated: dict[str, dict[TopicPartition, int]] = {}
        self._truncations: dict[str, dict[str, int]] = {}
        self._lost = LostRecords()
        # Losses are counted only once the job is ready (caught up: no hours-old committed offsets against
        # today's log starts), and only where the committed offset is known to be current (_certain).
        self._ready = ready or (lambda: True)
        self._folded_through_s = 0.0  # every commit written before this was folded (record time, epoch s)
        self._folding_through_s = 0.0  # what the batch being folded reaches, once it is done
        self._unconfirmed: dict[str, float] = {}  # group -> newest log-start sample a loss candidate awaits
        self._confirm_asked: dict[str, float] = {}  # group -> the log-start sample a confirmation was asked for
        self._loss_file, self._loss_save_s = loss_file, loss_save_s
        self._loss_loaded = loss_file is None
        self._loss_saved: tuple[int, float | None] = (0, None)  # (LostRecords.changes, time) as of the last write
        self._save_lock = threading.Lock()  # one writer of the loss file (refreshes run on two threads)
        self._has_lag: set[str] = set()  # groups whose last view showed lag
        self.overtaken = 0  # views that left out a partition whose commit overtook its log-end sample
        self._overtaken_since_fetch = False
        self._wanted_dirty = True  # the tracker's wanted partitions need a new set_wanted
        self._sampled: set[TopicPartition] = set()  # partitions with a log-end sample, as of the last refresh
        self._retention_s: dict[str, float] = {}  # topic -> retention.ms in seconds, as of the last refresh
        self._batch_active = threading.Event()  # a batch is being folded: refreshes wait
        self._batch_started = 0.0  # when the batch being folded started (monotonic)
        self.rendered_at = 0.0
        self.round: float | None = None  # the poll round the last refresh rendered
        # The CPU the last refresh took (its thread's, lock and GIL waits left out): what a scrape would spend
        # re-rendering. Wall time would count a batch holding the lock, and one refresh that waited out a long
        # batch would leave the next scrape's lag a poll interval stale.
        self._refresh_seconds = 0.0
        self._freshen_lock = threading.Lock()
        self._round_lock = threading.Lock()
        self._round = _ended(), 0.0  # the background round scrapes share: set once ended, when it began
        self._commits_asked_at = 0.0  # when a scrape last asked for the active groups' committed offsets
        self._skip_until = 0.0
        self._over_budget = 0  # freshens in a row that took longer than SCRAPE_BUDGET_S
        self._unreachable_at: float | None = None  # a scrape's fetch found the cluster unreachable then

    # -- the batch thread -----------------------------------------------------------

    def update(self, group: str, committed: Mapping[TopicPartition, int],
               owned: Mapping[Owner, Iterable[TopicPartition]] | None, last_commit_s: float = 0.0) -> None:
        """A group changed: keep what its lag is computed over and show its lag. ``committed`` is kept as
        given (the publisher hands over a copy); ``owned`` None keeps the members' partitions as they were
        (the group changed by commits alone)."""
        follows = None if self._topics is None else self._topics.follows
        if follows is not None:
            committed = {tp: o for tp, o in committed.items() if follows(tp[0])}
        kept = None if owned is None else Owned(owned if follows is None else {
            owner: [tp for tp in tps if follows(tp[0])] for owner, tps in owned.items()})
        with self._lock:
            self._load_losses()
            if kept is None:
                kept = self._owned.get(group, NOTHING_OWNED)
            if committed != self._offsets.get(group) or kept != self._owned.get(group):
                self._wanted_dirty = True
            self._offsets[group] = committed
            self._owned[group] = kept
            self._last_commit[group] = last_commit_s
            fresh = self._fresh.get(group)
            if fresh:  # a fetched offset the job has now seen committed (or passed) is not needed any more
                self._fresh[group] = {tp: o for tp, o in fresh.items() if o > committed.get(tp, o)}
            if group in self._has_lag or self._any_sampled(committed, kept, self._sampled):
                self._show.group(self._view(group))  # else nothing to show yet: the refresh after its first sample

    def remove(self, group: str) -> None:
        """Forget a deleted or expired group."""
        with self._lock:
            for state in (self._offsets, self._owned, self._truncated, self._truncations, self._last_commit,
                          self._fresh, self._fresh_at, self._fresh_missing):
                state.pop(group, None)
            self._lost.forget(group)
            self._unconfirmed.pop(group, None)
            self._confirm_asked.pop(group, None)
            self.health.forget(group)
            self._has_lag.discard(group)
            self._wanted_dirty = True

    def rebalanced(self, group: str, rebalances_total: int, at_s: float) -> None:
        """The group's rebalance count as published: the verdict's storm window reads it."""
        self.health.rebalanced(group, rebalances_total, at_s)

    def state(self, group: str, state: str) -> None:
        """The group's state as shown (offsets topic or live poll): the verdict reads rebalancing from it."""
        self.health.state(group, state)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around a batch's fold: refreshes wait rather than contend for the lock and the GIL
        (at 100,000 groups the two threads handing the lock back and forth doubled the fold)."""
        self._batch_started = time.monotonic()
        self._batch_active.set()
        try:
            yield
        finally:
            with self._lock:
                self._folded_through_s = max(self._folded_through_s, self._folding_through_s)
            if time.monotonic() - self._batch_started > SCRAPE_BUDGET_S:
                # A long batch (a catch-up) may have brought most of the groups: the last refresh's cost says
                # nothing of the next one's. Scrapes wait for the refresh thread to measure it rather than run
                # a second whole pass beside it (39 s of the driver's CPU after W2's first batch).
                self._refresh_seconds = math.inf
            self._batch_active.clear()

    def in_batch(self) -> bool:
        return self._batch_active.is_set()

    def folded_through(self, newest_record_ms: int | None) -> None:
        """The newest record (its broker timestamp) of the batch just folded: every commit written before it
        has been folded (a batch reads each partition of the offsets topic up to where it ended when the
        trigger fired). Within :meth:`batch` it counts once the batch is done (its groups updated)."""
        if not newest_record_ms:
            return
        with self._lock:
            self._folding_through_s = max(self._folding_through_s, newest_record_ms / 1000)
            if not self._batch_active.is_set():
                self._folded_through_s = max(self._folded_through_s, self._folding_through_s)

    # -- the refresh ------------------------------------------------------------------

    def refresh(self, now: float | None = None) -> None:
        """Tell the tracker what to poll, show every group's lag that can have changed, then the log ends.

        Groups none of whose partitions has a sample, and which show no lag now, are skipped.
        """
        started = time.thread_time()
        now = time.time() if now is None else now
        with self._lock:
            self._load_losses()
            wanted = None
            if self._wanted_dirty:
                committed = {(t, p, o) for group in self._offsets for (t, p), o in self._committed(group).items()}
                uncommitted = {tp for group, owned in self._owned.items() for tp in owned.partitions()
                               if tp not in self._offsets.get(group, {})}
                wanted = committed, uncommitted
                self._wanted_dirty = False
        if wanted is not None:
            self.tracker.set_wanted(*wanted)
        sampled = self.tracker.sampled_at()
        self._sampled = set(sampled)
        self._retention_s = self.tracker.retention_seconds()
        with self._lock:
            groups = list(self._offsets.items())
        for group, offsets in groups:
            # The lock is taken per group: a batch's updates interleave instead of waiting for a
            # whole pass over every partition.
            with self._lock:
                if self._offsets.get(group) is not offsets:
                    continue  # changed or removed meanwhile: update showed it afresh
                owned = self._owned.get(group, NOTHING_OWNED)
                if group in self._has_lag or self._any_sampled(offsets, owned, sampled):
                    self._show.group(self._view(group))
        self._confirm_losses()
        self._save_losses(now)
        with self._lock:
            grouped = {tp for offsets in self._offsets.values() for tp in offsets}
            grouped.update(tp for owned in self._owned.values() for tp in owned.partitions())
            ends = {}
            for tp in sorted(grouped & sampled.keys()):
                found = self.tracker.lag_uncommitted(*tp)
                if found is not None:
                    ends[tp] = (found.log_start, found.log_end)
            self._show.log_ends(ends)
            self.rendered_at, self.round = now, self.tracker.last_round_at()
        self._refresh_seconds = time.thread_time() - started
        for callback in self._on_refresh:
            callback(now)

    # -- scrape time ------------------------------------------------------------------

    def freshen(self, wait_s: float | None = None) -> bool:
        """Make the lag a scrape shows as fresh as Kafka's own tool: its log ends at most ``max_age_s`` old.

        With ``wait_s`` the round runs on its own thread, and the scrape waits for it at most until
        ``wait_s`` after the round began (a round another scrape started is shared, not waited for anew):
        a scrape that outlasts Prometheus's timeout fails, and every series of the job goes stale with it.
        Returns whether the round ended in time; one that did not goes on, and a later scrape shows what
        it found.
        """
        if self._fetch_log_ends is None or self._max_age_s <= 0 or time.time() < self._skip_until:
            return True  # no round to run: nothing to wait for, no thread to start
        if wait_s is None:
            self._freshen()
            return True
        with self._round_lock:
            done, began = self._round
            if done.is_set():
                done, began = threading.Event(), time.monotonic()
                self._round = done, began
                threading.Thread(target=self._background_round, args=(done,), name="lag-freshen",
                                 daemon=True).start()
        return done.wait(max(0.0, began + wait_s - time.monotonic()))

    def _background_round(self, done: threading.Event) -> None:
        try:
            self._freshen()
        except Exception:  # a scrape already served what was rendered: the next one asks afresh
            log.exception("freshening the lag for a scrape failed")
        finally:
            done.set()

    def _freshen(self) -> None:
        assert self._fetch_log_ends is not None
        if self._refresh_seconds > SCRAPE_BUDGET_S:  # re-rendering alone would blow the budget: don't start
            return
        if self._batch_active.is_set() and time.monotonic() - self._batch_started > SCRAPE_BUDGET_S:
            # A long batch (a catch-up) is being folded: its groups' lag is shown as it publishes them, and
            # a whole refresh now would take the driver's one interpreter from it (scrapes during W2's first
            # batch took 15 s each and made the fold 70 % longer).
            return
        if self._unreachable_at is not None:
            # The cluster was unreachable: every scrape would wait out the quick timeout again. Scrapes
            # ask afresh once the poller's own round has reached it.
            last = self.tracker.last_round_at()
            if last is None or last <= self._unreachable_at:
                return
            self._unreachable_at = None
        with self._freshen_lock:  # concurrent scrapes share one round
            last = self.tracker.last_round_at()
            # A poll round's log ends alone are not enough when scrapes fetch commits too: the committed offsets
            # beside them would be the last scrape's, a second or more older than the log ends (lag read high by
            # that many records: 214 above Kafka's tool in 1 of 20 runs of test_lag_freshness).
            commits_fresh = self._fetch_committed is None or time.time() - self._commits_asked_at <= self._max_age_s
            if (last is not None and time.time() - last <= self._max_age_s and commits_fresh
                    and not self._overtaken_since_fetch):
                if last != self.round:  # a poll round just ended: show its samples, not the older ones
                    self.refresh()
                return
            started = time.monotonic()
            self._overtaken_since_fetch = False
            # Committed offsets first, then the log ends, as Kafka's kafka-consumer-groups asks: a commit made
            # between the two requests can then only make the lag read high for a moment, never low. The other
            # order read a group that committed right after the log-end fetch exactly at that log end: lag 0
            # while Kafka's tool, a moment later, said 97 (1 run in 20 of test_lag_freshness).
            self._commits_asked_at = time.time()
            commits = self._fetch_committed is not None and self._fetch_active_commits()
            fetched = self._fetch_log_ends()
            if fetched is None:
                self._unreachable_at = time.time()
                log.warning("the cluster did not answer a scrape's log-end fetch; scrapes use the poller's "
                            "samples until one of its rounds reaches it")
                return
            fetched = commits or fetched
            if fetched:
                self.refresh()
            cost = time.monotonic() - started
            self._over_budget = self._over_budget + 1 if cost > SCRAPE_BUDGET_S else 0
            if self._over_budget >= SCRAPE_OVER_BUDGET:
                self._skip_until, self._over_budget = time.time() + SCRAPE_BACKOFF_S, 0
                log.warning("fresh log ends for a scrape took %.1fs %d times in a row; scrapes use the poll "
                            "interval's samples for the next %.0fs", cost, SCRAPE_OVER_BUDGET, SCRAPE_BACKOFF_S)

    def _fetch_active_commits(self) -> bool:
        """Committed offsets of the groups that committed within ACTIVE_WINDOW_S, fetched now."""
        assert self._fetch_committed is not None
        since = time.time() - ACTIVE_WINDOW_S
        with self._lock:
            recent = [(at, g) for g, at in self._last_commit.items() if at >= since and g in self._offsets]
        active = [g for _, g in sorted(recent, reverse=True)[:ACTIVE_GROUPS_MAX]]
        asked_at = self._clock()
        found = self._fetch_committed(active) if active else {}
        with self._lock:
            # A group asked but not answered (its coordinator failed, the fetch timed out) keeps the offsets the
            # last fetch found for it, rather than falling back to the job's older ones for a scrape; a group
            # no longer asked for (no recent commit) has had its last commit folded by the job.
            kept = {g for g in active if g not in found and g in self._fresh}
            self._fresh = {g: self._fresh[g] for g in kept}
            self._fresh_at = {g: self._fresh_at.get(g, 0.0) for g in kept}
            self._fresh_missing = {g: self._fresh_missing[g] for g in kept if g in self._fresh_missing}
            for group, answered in found.items():
                if group in self._offsets:
                    self._take_fetched(group, answered, asked_at)
            self._wanted_dirty = True
        return bool(found)

    # -- a group's view (under the lock) -------------------------------------------------------

    @staticmethod
    def _any_sampled(committed: Mapping[TopicPartition, int], owned: Owned,
                     sampled: Mapping[TopicPartition, float] | set[TopicPartition]) -> bool:
        if not sampled:  # before the first poll round: a first batch's every group would be searched in vain
            return False
        return any(tp in sampled for tp in committed) or any(tp in sampled for tp in owned.partitions())

    def _committed(self, group: str) -> Mapping[TopicPartition, int]:
        """What the group's lag is computed from: the job's committed offsets, newer ones a scrape fetched
        in their place (the offsets topic remains the source of which partitions the group has)."""
        committed = self._offsets[group]
        fresh = self._fresh.get(group)
        return {**committed, **fresh} if fresh else committed

    def _view(self, group: str) -> GroupLag:
        """The group's rows from the tracker's samples, feeding losses, truncations and the verdict.

        A partition without a fresh log-end sample has no row (never a stale number), nor has one
        whose commit overtook the last sample (the consumer moved on since: lag waits for a sample
        taken after the commit instead of showing 0).
        """
        committed = self._committed(group)
        rows: dict[TopicPartition, Row] = {}
        methods: dict[TopicPartition, str] = {}
        compat_rows: list[CompatRow] = []
        margins: dict[TopicPartition, int] = {}
        log_ends: dict[TopicPartition, int] = {}
        sampled_at_by_tp: Mapping[TopicPartition, float] | None = None  # read only for a loss candidate
        for (topic, partition), offset in sorted(committed.items()):
            lag = self.tracker.lag(topic, partition, offset)
            overtaken = lag is not None and lag.lag < 0 and not lag.truncated
            compat_rows.append((topic, partition, offset, None if lag is None or overtaken else lag.lag))
            if lag is None:
                continue
            tp = (topic, partition)
            margins[tp] = margin(offset, lag.log_start)
            log_ends[tp] = lag.log_end
            if self._lost.sample(group, tp, offset, lag.log_start, lag.log_end) > 0:
                if sampled_at_by_tp is None:
                    sampled_at_by_tp = self.tracker.sampled_at()
                log_start_at = sampled_at_by_tp.get(tp, math.inf)  # a later sample than lag's: later is safer
                if self._certain(group, tp, offset, log_start_at):
                    self._lost.observe(group, tp, offset, lag.log_start, lag.log_end)
            if lag.truncated:
                self._count_truncation(group, tp, offset)
            elif overtaken:
                self.overtaken += 1
                self._overtaken_since_fetch = True
                continue
            rows[tp] = (max(0, lag.lag), lag.since)
            if lag.since is not None:
                methods[tp] = lag.seconds_method or ""
        owned = self._owned.get(group, NOTHING_OWNED)
        uncommitted: dict[TopicPartition, int] = {}
        for tp in owned.partitions():
            if tp in committed or tp in rows or tp in uncommitted:
                continue
            compat_rows.append((*tp, -1, -1))
            lag = self.tracker.lag_uncommitted(*tp)
            if lag is not None:
                uncommitted[tp] = max(0, lag.lag)
        retention = self._retention_s
        deadlines = [since + retention[tp[0]] for tp, (_, since) in rows.items()
                     if since is not None and since != math.inf and tp[0] in retention]
        verdict = None
        sampled_at = self.tracker.last_round_at()
        # A group with members is judged on the topics they are assigned: records arriving on a topic it stopped
        # consuming (its old commits wait to expire there) are not a group that stopped (nor a page).
        assigned = {topic for topic, _ in owned.partitions()}
        judged = {tp: end for tp, end in log_ends.items() if not assigned or tp[0] in assigned}
        if sampled_at is not None and judged:
            # The job's offsets, as the offsets topic ordered the group's commits: a scrape's OffsetFetch laid
            # over them (newer, or kept from an earlier fetch when one failed) would read as a rewind.
            ordered = self._offsets[group]
            self.health.record(group, {tp: ordered[tp] for tp in judged if tp in ordered}, judged,
                               self._last_commit.get(group, 0.0), sampled_at)
            verdict = self.health.verdict(group, sampled_at)
        if rows or uncommitted:
            self._has_lag.add(group)
        else:
            self._has_lag.discard(group)
        return GroupLag(group, rows, methods, uncommitted, owned, dict(self._truncations.get(group, {})), margins,
                        self._lost.totals(group), min(deadlines) if deadlines else None, verdict, tuple(compat_rows))

    def _count_truncation(self, group: str, tp: TopicPartition, offset: int) -> None:
        """Once per commit found truncated, however many refreshes see it."""
        seen = self._truncated.setdefault(group, {})
        if seen.get(tp) != offset:
            seen[tp] = offset
            by_topic = self._truncations.setdefault(group, {})
            by_topic[tp[0]] = by_topic.get(tp[0], 0) + 1

    # -- records lost (under the lock) ---------------------------------------------------------

    def _certain(self, group: str, tp: TopicPartition, offset: int, log_start_at: float) -> bool:
        """Whether ``offset`` is the group's committed offset as of the log start sampled at ``log_start_at``.

        Kafka Streams commits, then deletes the records below its commit (``repartition.purge.interval.ms``);
        the log start sampled between the two and the job's older commit would read as records lost. So a
        loss is counted only when the job is ready, and the offset either came from an OffsetFetch sent after
        the sample, or is the job's and the job has folded every commit written before the sample. Otherwise
        the group waits for a confirmation fetch (:meth:`_confirm_losses`) or a later batch.
        """
        if not self._ready():
            return False
        fresh = self._fresh.get(group)
        fetched_at = self._fresh_at.get(group, 0.0)
        if fresh is not None and tp in fresh and fresh[tp] == offset:
            if fetched_at >= log_start_at:
                return True
        elif fetched_at >= log_start_at:
            # Fetched after the sample, and this partition was not in the answer above the job's offset: the
            # job's offset is current if the fetch found it (pruned from fresh once the job saw it), and the
            # group has no commit there any more if not. Either way the job's offset is no worse than current.
            return tp not in self._fresh_missing.get(group, ())
        if self._folded_through_s >= log_start_at + FOLD_MARGIN_S:
            return True
        self._unconfirmed[group] = max(self._unconfirmed.get(group, 0.0), log_start_at)
        return False

    def _confirm_losses(self) -> None:
        """Fetch the committed offsets of groups with a loss candidate the job has not confirmed (at most
        LOSS_CONFIRM_MAX, each once per log-start sample), then show those groups again."""
        with self._lock:
            waiting, self._unconfirmed = self._unconfirmed, {}
            due = sorted(g for g, at in waiting.items() if g in self._offsets and self._confirm_asked.get(g) != at)
            due = due[:LOSS_CONFIRM_MAX]
            if self._fetch_committed is None or not due or self._batch_active.is_set() or not self._ready():
                return
            for group in due:
                self._confirm_asked[group] = waiting[group]
        asked_at = self._clock()
        found = self._fetch_committed(due)
        with self._lock:
            for group in due:
                if group not in found or group not in self._offsets:
                    continue  # not answered: waits for the job, or the next sample
                self._take_fetched(group, found[group], asked_at)
                self._wanted_dirty = True
                self._show.group(self._view(group))

    def _take_fetched(self, group: str, answered: Mapping[TopicPartition, int], asked_at: float) -> None:
        """A group's committed offsets as an OffsetFetch sent at ``asked_at`` found them: laid over the job's
        where they are newer (the partitions the job knows of), and which of those it found no commit for.

        Only newer ones: a batch may have folded commits written after the coordinator answered (the fetch
        and the batch run on different threads), and an older fetched offset laid over the job's newer one
        would show the group behind by what it consumed since, until the next fetch (the lag-freshness
        scenario once read 303 records where Kafka's tool read 14)."""
        offsets = self._offsets[group]
        self._fresh[group] = {tp: o for tp, o in answered.items() if tp in offsets and o > offsets[tp]}
        self._fresh_missing[group] = frozenset(tp for tp in offsets if tp not in answered)
        self._fresh_at[group] = asked_at

    def _load_losses(self) -> None:
        """What earlier runs counted, read once before anything is counted or shown."""
        if self._loss_loaded or self._loss_file is None:
            return
        self._loss_loaded = True
        self._lost.restore(self._loss_file.load())
        self._loss_saved = (self._lost.changes, None)

    def _save_losses(self, now: float, force: bool = False) -> None:
        if self._loss_file is None or not self._loss_loaded:
            return
        with self._save_lock:
            changes, saved_at = self._loss_saved
            if saved_at is None:  # the first refresh starts the clock: what was read needs no writing
                saved_at = now
                self._loss_saved = (changes, now)
            if self._lost.changes == changes or (not force and now - saved_at < self._loss_save_s):
                return
            changes = self._lost.changes
            if self._loss_file.save(self._lost.state()):
                self._loss_saved = (changes, now)

    def close(self) -> None:
        """Write what was counted lost since the last write (at the job's stop)."""
        self._save_losses(time.time(), force=True)
