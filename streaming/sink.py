"""The driver sink (``foreachBatch``): one Arrow collect, the group stage, then event log, state, exporter.

Order matters for restarts: the batch's events and its state delta are written before Spark
records the batch as committed; if the driver dies in between, Spark runs the batch again and
both are rewritten under the same batch id (see :mod:`streaming.statestore`).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from streaming.batch_input import BatchInput
from streaming.dead_letters import DeadLetterLog
from streaming.exporter import Exporter
from streaming.groups import BatchResult, GroupStage
from streaming.history import EventLog
from streaming.options import JobOptions
from streaming.statestore import StateStore
from streaming.topic_names import TopicNames


@dataclass(frozen=True)
class BatchReport:
    """What the progress line says about the latest batch the sink handled."""

    batch_id: int = -1
    records: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    groups: int = 0
    rebalances: int = 0
    collect_seconds: float = 0.0  # the Spark job: read, decode, Arrow to the driver
    fold_seconds: float = 0.0  # the group stage, event log, state delta, exporter


# Frozen objects are never scanned again, so garbage in a reference cycle that was frozen while
# alive stays forever. The batch's own DataFrame is such a thing: it is alive when the batch's
# survivors are frozen, and its py4j proxy caches bound methods that point back at it, so it kept
# one Dataset per batch alive in the JVM (a soak's heap grew with every batch). Once in this many
# batches, everything is unfrozen and collected in full.
FULL_COLLECTION_BATCHES = 100


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


class BatchSink:
    """``foreachBatch`` body; also restores the exporter from the checkpointed state at start."""

    def __init__(self, options: JobOptions, stage: GroupStage, store: StateStore, exporter: Exporter,
                 event_log: EventLog, dead_letters: DeadLetterLog, topic_names: TopicNames) -> None:
        self.options = options
        self.stage = stage
        self.store = store
        self.exporter = exporter
        self.event_log = event_log
        self.dead_letters = dead_letters
        self.topic_names = topic_names
        self.last_report = BatchReport()
        self._last_sweep = time.monotonic()
        self._batches = 0
        now_ms = int(time.time() * 1000)
        with young_garbage_only():
            for group in sorted(stage.groups):
                exporter.update_group(stage.summary(group, now_ms), stage.offsets.get(group), stage.assignments(group))

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        batch = BatchInput.from_arrow(df.toArrow())
        collected = time.monotonic()
        self._batches += 1
        with young_garbage_only(full=self._batches % FULL_COLLECTION_BATCHES == 0), self.exporter.batch():
            result = self.handle(batch, batch_id)
        self.last_report = BatchReport(batch_id, batch.records, batch.errors + result.errors,
                                       len(result.changed | result.removed), len(result.events),
                                       collected - started, time.monotonic() - collected)

    def handle(self, batch: BatchInput, batch_id: int) -> BatchResult:
        """Fold one batch and publish it (apart from Spark, so tests can drive it with Arrow tables)."""
        # Spark committed batch_id - 1 before starting this one: a safe point for a snapshot.
        self.store.maybe_compact(batch_id - 1 if batch_id > 0 else None, self.stage)
        result = self.stage.apply(batch)
        expired: set[str] = set()
        if time.monotonic() - self._last_sweep >= self.options.expiry_sweep_seconds:
            self._last_sweep = time.monotonic()
            expired = self.stage.expire(int(time.time() * 1000), int(self.options.group_ttl_seconds * 1000)).removed
            result.removed |= expired
            result.changed -= expired
        result.events = self.topic_names.resolve(result.events)
        self.event_log.append(batch_id, result.events)
        self.dead_letters.append(batch_id, result.dead_letters)
        self.store.write_delta(batch_id, batch, expired)
        self.exporter.count_records(batch.records, batch.newest_record_ms)
        self.exporter.count_decode_errors(batch.errors + result.errors)
        now_ms = int(time.time() * 1000)
        for group in sorted(result.changed):
            self.exporter.update_group(self.stage.summary(group, now_ms), self.stage.offsets.get(group),
                                       self.stage.assignments(group))
        for group in result.removed:
            self.exporter.remove_group(group)
        self.exporter.count_limits(self.stage.take_limit_hits(), self.stage.groups_dropped,
                                   sum(self.stage.members_dropped.values()))
        return result
