"""Progress reporting: one log line per micro-batch and the job's own metrics, from the query's own progress."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from streaming.decode.checkpoint import checkpoint_offsets, source_offsets
from streaming.driver.health import Health
from streaming.groups.store import last_batch_time_ms, last_committed_batch
from streaming.lifecycle import PollingThread
from streaming.metrics.instruments import JobMetrics
from streaming.protocol import BatchReport, TopicPartition

log = logging.getLogger("rebalance_monitor")

# What Spark's query status says (MicroBatchExecution) between triggers and while a trigger finds nothing;
# "not isDataAvailable" with one of these: the last trigger found no new data. Not "Initializing sources".
IDLE_MESSAGES = ("Waiting for next trigger", "Waiting for data to arrive")


def checkpoint_start_offsets(spark_checkpoint: Path) -> dict[TopicPartition, int]:
    """Where the query's next batch starts, from Spark's checkpoint: the end offsets of the last batch Spark
    committed, else the offsets the Kafka source started from in this checkpoint; empty before either.

    What input lag counts from before the query's first batch in this process: a first batch too large to
    complete would otherwise show no partition and 0 records behind."""
    return checkpoint_offsets(spark_checkpoint, last_committed_batch(spark_checkpoint)) or {}


def checkpoint_progress_time(spark_checkpoint: Path) -> float | None:
    """When the checkpoint's query last made progress, as far as the checkpoint tells (Unix seconds): when its
    last committed batch was planned, else, having committed none, when the query was first started (Spark
    writes ``metadata``, the query's id, once); None for a new checkpoint.

    What ``rebalance_monitor_last_batch_timestamp_seconds`` shows until the query makes progress in this
    process: exported from the start, never absent, so MonitorStalled fires for a job that never completes a
    batch. Not the process start: a job whose first batch kills it at every start (a heap too small) would
    then look fresh after each restart and never fire."""
    last_ms = last_batch_time_ms(spark_checkpoint)
    if last_ms is not None:
        return last_ms / 1000
    try:
        return (spark_checkpoint / "metadata").stat().st_mtime
    except OSError:
        return None


def batch_offsets(progress: Any) -> tuple[dict[TopicPartition, int], int]:
    """Where the batch ended per source partition, and the offsets it spanned without a record
    (compacted away, transaction markers, aborts)."""
    processed: dict[TopicPartition, int] = {}
    spanned = 0
    for source in progress.sources:
        start, end = source_offsets(source.startOffset), source_offsets(source.endOffset)
        spanned += sum(end[tp] - start.get(tp, end[tp]) for tp in end)
        processed.update(end)
    skipped = max(0, spanned - int(progress.numInputRows)) if progress.numInputRows is not None else 0
    return processed, skipped


def batch_end(started: str, duration_s: float) -> float:
    """When a batch ended, in Unix seconds: Spark stamps its progress with the trigger's start (ISO 8601, UTC)."""
    try:
        return datetime.fromisoformat(started).timestamp() + duration_s
    except (TypeError, ValueError):
        return time.time()


def progress_line(progress: Any, report: BatchReport, skipped: int, behind: int | None) -> str:
    records = " ".join(f"t{k}={v}" for k, v in sorted(report.records.items()))
    return (f"batch {progress.batchId}: {progress.numInputRows} records [{records or 'none'}] "
            f"errors={sum(report.errors.values())} groups={report.groups} rebalances={report.rebalances} "
            f"skipped_offsets={skipped} took={progress.batchDuration / 1000:.2f}s "
            f"(collect {report.collect_seconds:.2f}s, fold {report.fold_seconds:.2f}s) "
            f"behind={behind if behind is not None else '?'}")


class ProgressWatcher(PollingThread):
    """Feeds the running query's progress to the job's metrics and health, asking the query itself every
    ``interval_s`` (a component, see :mod:`streaming.lifecycle`).

    Not a StreamingQueryListener: Spark delivers listener events on one asynchronous bus, drops them when
    its queue is full, and in whole test runs here stopped delivering them to a listener added after
    other monitors had run in the same process, while batches went on; the last-batch gauge behind
    MonitorStalled and the readiness probe must not depend on that. Every completed batch is seen once,
    in order (``recentProgress`` keeps Spark's last 100), from the run that completed it; a query whose
    last trigger found no new data (its status, see IDLE_MESSAGES) counts as caught up.
    """

    def __init__(self, instruments: JobMetrics, query: Callable[[], Any], report: Callable[[], BatchReport],
                 health: Health | None = None, interval_s: float = 1.0,
                 start_offsets: Callable[[], Mapping[TopicPartition, int]] | None = None) -> None:
        super().__init__("progress-watcher")
        self.instruments = instruments
        self.health = health
        # Where the query starts (see checkpoint_start_offsets), asked at each look until a batch completes:
        # input lag counts from there meanwhile.
        self.start_offsets = start_offsets
        self._query = query
        self._report = report
        self._interval_s = interval_s
        self._run_id: str | None = None
        self._seen: int | None = None  # the last batch id observed in that run

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            self.check()

    def check(self) -> None:
        """One look at the query; Spark's JVM going away (a stop) is not an error."""
        query = self._query()
        if query is None:
            return
        try:
            self._check(query)
        except Exception as exc:  # py4j's errors when the JVM or the query is gone
            log.debug("progress check skipped: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _check(self, query: Any) -> None:
        if self.start_offsets is not None and not self.instruments.batch_seen:
            self.instruments.observe_start(self.start_offsets(), time.time())
        run_id = str(query.runId)
        if run_id != self._run_id:  # a new query or a restart: its batch ids follow on from the checkpoint
            self._run_id, self._seen = run_id, None
        last = query.lastProgress
        if last is not None and (self._seen is None or last.batchId > self._seen):
            # The run's every batch so far at its first look, else only those since the last look.
            recent = [last] if self._seen is not None and last.batchId == self._seen + 1 else query.recentProgress
            for progress in recent:
                if self._seen is None or progress.batchId > self._seen:
                    self._observe(progress)
                    self._seen = progress.batchId
        status = query.status
        if (status.get("message") in IDLE_MESSAGES and not status.get("isDataAvailable")
                and not status.get("isTriggerActive")):
            self.instruments.observe_idle(time.time())
            if self.health is not None:
                self.health.observe_idle()

    def _observe(self, progress: Any) -> None:
        processed, skipped = batch_offsets(progress)
        duration_s = progress.batchDuration / 1000
        self.instruments.observe_batch(duration_s, skipped, processed, batch_end(progress.timestamp, duration_s))
        if self.health is not None:
            self.health.observe_batch(processed)
        log.info(progress_line(progress, self._report(), skipped, self.instruments.records_behind))
