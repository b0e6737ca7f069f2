"""Progress reporting: one log line per micro-batch and the job's own metrics, from Spark's query events."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from streaming.driver.health import Health
from streaming.metrics.instruments import JobMetrics
from streaming.protocol import BatchReport, TopicPartition

log = logging.getLogger("rebalance_monitor")


def source_offsets(text: str | None) -> dict[TopicPartition, int]:
    """Spark's Kafka offsets JSON (``{"topic": {"0": 42}}``) as (topic, partition) -> offset."""
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:  # pyspark 4.0 renders a missing offset as "None"
        return {}
    if not isinstance(parsed, dict):  # "null": pyspark 4.2 builds progress from JSON (first batch: no start)
        return {}
    return {(topic, int(p)): int(o) for topic, parts in parsed.items() for p, o in parts.items()}


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


def progress_line(progress: Any, report: BatchReport, skipped: int, behind: int | None) -> str:
    records = " ".join(f"t{k}={v}" for k, v in sorted(report.records.items()))
    return (f"batch {progress.batchId}: {progress.numInputRows} records [{records or 'none'}] "
            f"errors={sum(report.errors.values())} groups={report.groups} rebalances={report.rebalances} "
            f"skipped_offsets={skipped} took={progress.batchDuration / 1000:.2f}s "
            f"(collect {report.collect_seconds:.2f}s, fold {report.fold_seconds:.2f}s) "
            f"behind={behind if behind is not None else '?'}")


class ProgressListener(StreamingQueryListener):
    """Feeds one query's progress to the job's metrics; ``query_id`` and ``report`` are read per event."""

    def __init__(self, instruments: JobMetrics, query_id: Callable[[], str | None],
                 report: Callable[[], BatchReport], health: Health | None = None) -> None:
        self.instruments = instruments
        self.health = health
        self.query_id = query_id
        self.report = report

    def _ours(self, event_id: Any) -> bool:
        # Events carry a uuid.UUID, the query a str.
        return self.query_id() is not None and str(event_id) == str(self.query_id())

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started", event.id)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if not self._ours(progress.id):
            return
        processed, skipped = batch_offsets(progress)
        self.instruments.observe_batch(progress.batchDuration / 1000, skipped, processed, time.time())
        if self.health is not None:
            self.health.observe_batch(processed)
        log.info(progress_line(progress, self.report(), skipped, self.instruments.records_behind))

    def onQueryIdle(self, event: Any) -> None:
        if self._ours(event.id):
            self.instruments.observe_idle(time.time())
            if self.health is not None:
                self.health.observe_idle()

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query terminated: %s", event.exception)
