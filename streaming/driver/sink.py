"""The driver sink (``foreachBatch``): one Arrow collect, the group stage, then event log, state, metrics.

Order matters for restarts: the batch's events and its state delta are written before Spark
records the batch as committed; if the driver dies in between, Spark runs the batch again and
both are rewritten under the same batch id (see :mod:`streaming.groups.store`). The counters'
floors the batch raises, and the newest record time it folded, are written before anything of the
batch is published (see :mod:`streaming.driver.floor_log`): a kill after publishing leaves them on
disk, and the next process never shows less.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from streaming.cluster.metadata import TopicNames
from streaming.driver.floor_log import FloorLog
from streaming.driver.malloc import release_free_memory
from streaming.driver.publish import Publisher
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage
from streaming.groups.store import StateStore
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.logs.upkeep import EventLogUpkeep
from streaming.protocol import BatchInput, BatchReport, BatchResult, DeadLetter, GroupChange, RebalanceEvent

log = logging.getLogger(__name__)

# Frozen objects are never scanned again, so garbage in a reference cycle that was frozen while
# alive stays forever. The batch's own DataFrame is such a thing: it is alive when the batch's
# survivors are frozen, and its py4j proxy caches bound methods that point back at it, so it kept
# one Dataset per batch alive in the JVM (a soak's heap grew with every batch). Once in this many
# batches, everything is unfrozen and collected in full.
FULL_COLLECTION_BATCHES = 100
# A batch slower than this is logged with where its time went (a whole test run once saw one
# batch take over 20 s where the same batch alone takes under one).
SLOW_BATCH_S = 10.0
# After a batch whose collected table was at least this large, the allocators' free memory goes back to the
# system once the batch is dropped (a backlog's first batch: see streaming.driver.malloc).
RELEASE_AFTER_BYTES = 64 << 20


class Sink(Protocol):
    """What the query runner and the activity clock ask of either fold's sink."""

    last_report: BatchReport

    @property
    def groups(self) -> set[str]: ...

    def __call__(self, df: Any, batch_id: int) -> None: ...

    def publish_due(self, now_ms: int) -> int: ...


@contextlib.contextmanager
def young_garbage_only(full: bool = False) -> Iterator[None]:
    """Run a batch without the cyclic collector, then collect only what the batch created
    (``full``: everything, frozen objects included).

    The driver keeps every group's state (hundreds of thousands of long-lived objects, no
    reference cycles); a full collection scans all of it, and allocating a batch's worth of
    objects set one off again and again (more than half of a 100,000-group batch). Objects
    that survive a batch are frozen (``gc.freeze``): never scanned again, still freed by
    reference counting when the state replaces them.
    """
    gc.disable()
    try:
        yield
    finally:
        if full:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        gc.enable()


class Outputs:
    """Where either fold's sink puts a batch: the event log and dead letters under the batch id, then the
    changes shown, with the counter floors they raise written first (with a floor log)."""

    def __init__(self, publisher: Publisher, event_log: EventLog, dead_letters: DeadLetterLog,
                 topic_names: TopicNames, floor_log: FloorLog | None = None,
                 upkeep: EventLogUpkeep | None = None) -> None:
        self.publisher = publisher
        self.event_log = event_log
        self.dead_letters = dead_letters
        self.topic_names = topic_names
        self.floor_log = floor_log
        self.upkeep = upkeep
        self.last_report = BatchReport()
        self._batches = 0

    def _next_batch_full(self) -> bool:
        """Count a batch; whether it is the one in :data:`FULL_COLLECTION_BATCHES` collected in full."""
        self._batches += 1
        return self._batches % FULL_COLLECTION_BATCHES == 0

    @staticmethod
    def _release_after(full: bool, collected_bytes: int) -> None:
        """Once a batch is dropped: what the allocators keep free goes back after a full collection or a large
        batch (see :mod:`streaming.driver.malloc`)."""
        if full or collected_bytes >= RELEASE_AFTER_BYTES:
            release_free_memory()

    def _log(self, batch_id: int, events: list[RebalanceEvent], dead_letters: list[DeadLetter]) -> None:
        self.event_log.append(batch_id, events)
        if self.upkeep is not None:
            self.upkeep.after_append(batch_id)
        self.dead_letters.append(batch_id, dead_letters)

    def _publish(self, changes: list[GroupChange], removed: set[str], batch_id: int | None,
                 folded_through_ms: int | None) -> None:
        """Changes and removals shown, what they raise on disk first (with a floor log)."""
        if self.floor_log is not None:
            self.publisher.floors.prepare(changes, removed)
            self.floor_log.write(batch_id, folded_through_ms, self.publisher.floors)
        for change in changes:
            self.publisher.apply(change)
        for group in removed:
            self.publisher.remove(group)


class BatchSink(Outputs):
    """``foreachBatch`` body; also publishes the checkpointed state when the process starts, before any batch.

    A query restarted in the same process (``publish_restored`` False) does not publish the state it
    reloads: that state is the last batch Spark committed, older than what the failed batch may
    already have published, and counters shown must never step back (Prometheus would read a
    reset). Spark runs the failed batch again, with the same records, and publishes the same counts.

    With a ``floor_log`` (the query runner hands it over), each batch's risen floors and data position are
    written before the batch publishes anything. With an ``upkeep``, the event log's retention and compaction
    run after a batch's events are appended, at the upkeep's pace.

    Between batches, :meth:`publish_due` publishes the groups the clock alone turned abandoned (the activity
    clock's thread calls it); one lock keeps it and a batch's fold apart.
    """

    def __init__(self, config: GroupsConfig, stage: GroupStage, store: StateStore, publisher: Publisher,
                 event_log: EventLog, dead_letters: DeadLetterLog, topic_names: TopicNames,
                 publish_restored: bool = True, floor_log: FloorLog | None = None,
                 upkeep: EventLogUpkeep | None = None) -> None:
        super().__init__(publisher, event_log, dead_letters, topic_names, floor_log, upkeep)
        self.config = config
        self.stage = stage
        self.store = store
        self._last_sweep = time.monotonic()
        self._lock = threading.Lock()  # the stage is folded or asked by one thread at a time
        if publish_restored:
            now_ms = int(time.time() * 1000)
            with young_garbage_only():
                for group in sorted(stage.groups):
                    publisher.apply(stage.change(group, now_ms))

    @property
    def groups(self) -> set[str]:
        return self.stage.groups

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        table = df.toArrow()
        collected_bytes = table.nbytes
        batch = BatchInput.from_arrow(table)
        del table
        collected = time.monotonic()
        full = self._next_batch_full()
        with young_garbage_only(full=full), self.publisher.batch():
            result = self.handle(batch, batch_id)
            handled = time.monotonic()
        done = time.monotonic()
        groups = len(result.changed | result.removed)
        self.last_report = BatchReport(batch_id, batch.records, batch.errors + result.errors, groups,
                                       len(result.events), collected - started, done - collected)
        if done - started > SLOW_BATCH_S:
            log.warning("batch %d took %.1f s: collect %.1f s (%d records), fold and publish %.1f s (%d groups), "
                        "garbage collection %.1f s (%s)", batch_id, done - started, collected - started,
                        sum(batch.records.values()), handled - collected, groups, done - handled,
                        "full" if full else "young only")
        del batch
        self._release_after(full, collected_bytes)

    def handle(self, batch: BatchInput, batch_id: int) -> BatchResult:
        """Fold one batch and publish it (apart from Spark, so tests can drive it with Arrow tables)."""
        with self._lock:
            return self._handle(batch, batch_id)

    def _handle(self, batch: BatchInput, batch_id: int) -> BatchResult:
        # Spark committed batch_id - 1 before starting this one: a safe point for a snapshot.
        self.store.maybe_compact(batch_id - 1 if batch_id > 0 else None, self.stage)
        result = self.stage.apply(batch)
        expired: set[str] = set()
        if time.monotonic() - self._last_sweep >= self.config.expiry_sweep_seconds:
            self._last_sweep = time.monotonic()
            expired = self.stage.expire(int(time.time() * 1000), int(self.config.group_ttl_seconds * 1000)).removed
            result.removed |= expired
            result.changed -= expired
        result.events = self.topic_names.resolve(result.events)
        self._log(batch_id, result.events, result.dead_letters)
        self.store.write_delta(batch_id, batch, expired)
        self._publish(self.stage.changes(result, int(time.time() * 1000)), result.removed, batch_id,
                      batch.folded_through_ms)
        # Counted once shown: a scrape that sees a batch's records sees what they did to the groups.
        instruments = self.publisher.instruments
        instruments.count_records(batch.records, batch.newest_record_ms)
        instruments.count_decode_errors(batch.errors + result.errors)
        self.publisher.book.folded_through(batch.folded_through_ms)
        instruments.count_limits(self.stage.take_limit_hits(), self.stage.groups_dropped,
                                 sum(self.stage.members_dropped.values()))
        return result

    def publish_due(self, now_ms: int) -> int:
        """Publish the groups whose ``--abandoned-after`` ran out by ``now_ms`` with nothing written for them
        (:meth:`GroupStage.changes` of an empty result); how many. On a quiet cluster no batch comes to hand
        them over, and a group left shown inactive keeps paging. Skipped while a batch is folded: that
        batch hands them over."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            changes = self.stage.changes(BatchResult(), now_ms)
            self._publish(changes, set(), None, None)
            return len(changes)
        finally:
            self._lock.release()
