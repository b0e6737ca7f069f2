"""The driver sink of the state-store fold (``--fold state-store``): it publishes what the executors folded.

The same order as :class:`~streaming.driver.sink.BatchSink` for restarts: events and dead letters under the
batch id, risen floors on disk, then publishing; the group state itself is Spark's, committed with the batch.
The driver keeps no group state: only what it serves, plus, for each group shown without members, its last
whole change until ``--abandoned-after`` runs out, so the group turns abandoned on time with no batch to
say so (:meth:`publish_due`).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from streaming.cluster.metadata import TopicNames
from streaming.driver.floor_log import FloorLog
from streaming.driver.publish import Publisher
from streaming.driver.sink import Outputs, young_garbage_only
from streaming.groups.stage import StageLimits
from streaming.groups.stateful.rows import Handed, changes_in
from streaming.groups.summary import turned_abandoned
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.logs.upkeep import EventLogUpkeep
from streaming.protocol import INACTIVE, BatchReport, GroupChange

log = logging.getLogger(__name__)

# Changes unpickled and shown at a time (about 1.5 KB each pickled): a backlog's first batch hands over one a
# group, 300,000 of them at W3.
CHANGES_AT_ONCE = 20_000


class ChangesSink(Outputs):
    """``foreachBatch`` body over the fold's rows (:class:`~streaming.groups.stateful.rows.Handed`)."""

    def __init__(self, limits: StageLimits, publisher: Publisher, event_log: EventLog, dead_letters: DeadLetterLog,
                 topic_names: TopicNames, restored: pa.Table | None = None, floor_log: FloorLog | None = None,
                 upkeep: EventLogUpkeep | None = None) -> None:
        super().__init__(publisher, event_log, dead_letters, topic_names, floor_log, upkeep)
        self.limits = limits
        self.groups: set[str] = set()  # the groups shown
        self._members_dropped: dict[str, int] = {}
        self._inactive: dict[str, tuple[int, GroupChange]] = {}  # group -> (abandoned at, its last whole change)
        self._deadlines: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        if restored is not None:  # the change rows of every group the state store held (restore.py)
            with young_garbage_only():
                for changes in changes_in(restored, CHANGES_AT_ONCE):
                    self._publish(changes, set(), None, None)

    def carry_over(self, previous: ChangesSink) -> None:
        """Take what the sink of the query's last run kept (a query restarted in this process: the groups it
        showed, the deadlines of those shown inactive, the members left out); its state store is Spark's."""
        self.groups = previous.groups
        self._members_dropped = previous._members_dropped
        self._inactive, self._deadlines = previous._inactive, previous._deadlines

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        table = df.toArrow()
        collected_bytes = table.nbytes
        handed = Handed.without_changes(table)
        collected = time.monotonic()
        full = self._next_batch_full()
        with young_garbage_only(full=full), self.publisher.batch():
            changed = self.handle(handed, batch_id, changes_in(table, CHANGES_AT_ONCE))
        del table
        counts = handed.counts
        self.last_report = BatchReport(batch_id, counts.records, counts.errors, changed + len(handed.removed),
                                       len(handed.events), collected - started, time.monotonic() - collected)
        self._release_after(full, collected_bytes)

    def handle(self, handed: Handed, batch_id: int, more: Iterable[list[GroupChange]] = ()) -> int:
        """Log, count and show one batch: ``handed`` and the changes ``more`` yields, a slice at a time;
        how many changes."""
        with self._lock:
            counts = handed.counts
            self._log(batch_id, self.topic_names.resolve(handed.events), counts.dead_letters)
            changed = 0
            for changes in itertools.chain([handed.changes], more):
                self._publish(changes, set(), batch_id, counts.folded_through_ms)
                changed += len(changes)
                for change in changes:
                    if change.summary is not None:
                        self._members_dropped.pop(change.group, None)
            self._publish([], handed.removed, batch_id, counts.folded_through_ms)
            self.publisher.book.folded_through(counts.folded_through_ms)
            # Counted once shown, as the driver fold counts them.
            instruments = self.publisher.instruments
            instruments.count_records(counts.records, counts.newest_record_ms)
            instruments.count_decode_errors(counts.errors)
            self._members_dropped.update((g, n) for g, n in counts.members_dropped.items() if n)
            for group in handed.removed:
                self._members_dropped.pop(group, None)
            instruments.count_limits(counts.limit_hits, 0, sum(self._members_dropped.values()))
            return changed

    def publish_due(self, now_ms: int) -> int:
        """Publish the groups shown inactive whose ``--abandoned-after`` ran out by ``now_ms`` (the activity
        clock's thread); how many. Skipped while a batch is handled: its changes come first."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            due: list[GroupChange] = []
            while self._deadlines and self._deadlines[0][0] <= now_ms:
                deadline, group = heapq.heappop(self._deadlines)
                kept = self._inactive.get(group)
                if kept is not None and kept[0] == deadline:
                    del self._inactive[group]
                    due.append(self._abandoned(kept[1], now_ms))
            self._publish(due, set(), None, None)
            return len(due)
        finally:
            self._lock.release()

    def _abandoned(self, change: GroupChange, now_ms: int) -> GroupChange:
        """The group's last whole change as the fold would hand it over at ``now_ms``."""
        assert change.summary is not None
        return dataclasses.replace(change, summary=turned_abandoned(change.summary, now_ms,
                                                                    self.limits.abandoned_after_ms))

    def _publish(self, changes: list[GroupChange], removed: set[str], batch_id: int | None,
                 folded_through_ms: int | None) -> None:
        super()._publish(changes, removed, batch_id, folded_through_ms)
        for change in changes:
            self.groups.add(change.group)
            self._keep_if_inactive(change)
        for group in removed:
            self.groups.discard(group)
            self._inactive.pop(group, None)

    def _keep_if_inactive(self, change: GroupChange) -> None:
        summary = change.summary
        if summary is None:
            return
        if summary.activity != INACTIVE:
            self._inactive.pop(change.group, None)
            return
        deadline = max(summary.last_member_ms or 0, summary.last_commit_ms or 0) + self.limits.abandoned_after_ms + 1
        self._inactive[change.group] = (deadline, change)
        heapq.heappush(self._deadlines, (deadline, change.group))
        if len(self._deadlines) > 2 * len(self._inactive) + 1000:
            self._deadlines = [(at, g) for g, (at, _) in self._inactive.items()]
            heapq.heapify(self._deadlines)
