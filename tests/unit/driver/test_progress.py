"""Progress: the query's progress (built as Spark builds it) to the job's metrics and one log line."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from streaming.driver.progress import IDLE_MESSAGES, ProgressWatcher, batch_offsets, source_offsets
from streaming.lag.tracker import LagTracker
from streaming.metrics.instruments import JobMetrics
from streaming.protocol import BatchReport

QUERY = uuid.uuid4()


def progress(query: uuid.UUID, batch_id: int, start: dict | None, end: dict, rows: int,
             duration_ms: int = 1500) -> StreamingQueryProgress:
    """A progress as Spark reports it: offsets as the source's JSON text."""
    return StreamingQueryProgress.fromJson({
        "id": str(query), "runId": str(uuid.uuid4()), "name": "q", "timestamp": "2026-11-24T00:00:00.000Z",
        "batchId": batch_id, "batchDuration": duration_ms, "stateOperators": [], "numInputRows": rows,
        "sources": [{"description": "KafkaV2[Subscribe[__consumer_offsets]]",
                     "startOffset": json.dumps(start) if start is not None else None,
                     "endOffset": json.dumps(end), "latestOffset": json.dumps(end), "numInputRows": rows,
                     "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0}],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    })


def sample(metrics: JobMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"cluster": "c"})


def test_source_offsets_parse_sparks_json_and_nothing_else() -> None:
    assert source_offsets('{"__consumer_offsets": {"0": 42, "7": 3}}') == {("__consumer_offsets", 0): 42,
                                                                         ("__consumer_offsets", 7): 3}
    assert source_offsets(None) == {} and source_offsets("") == {} and source_offsets("not json") == {}


def test_batch_offsets_count_what_the_batch_spanned_without_a_record() -> None:
    p = progress(QUERY, 3, {"t": {"0": 100, "1": 50}}, {"t": {"0": 160, "1": 90}}, rows=90)
    assert batch_offsets(p) == ({("t", 0): 160, ("t", 1): 90}, 10)
    first = progress(QUERY, 0, None, {"t": {"0": 20}}, rows=20)  # a new checkpoint: no start offsets yet
    assert batch_offsets(first) == ({("t", 0): 20}, 0)


class QueryStandIn:
    """What the watcher reads of a running query (pyspark's StreamingQuery properties); the real query is
    read in every scenario that starts the job (tests/scenarios/test_health_e2e.py, test_prometheus_e2e.py)."""

    def __init__(self) -> None:
        self.runId = str(uuid.uuid4())
        self.recentProgress: list[StreamingQueryProgress] = []
        self.status = {"message": "Initializing sources", "isDataAvailable": False, "isTriggerActive": False}

    @property
    def lastProgress(self) -> StreamingQueryProgress | None:
        return self.recentProgress[-1] if self.recentProgress else None


def test_the_watcher_feeds_each_batch_once_in_order_and_idle_triggers(caplog: pytest.LogCaptureFixture) -> None:
    tracker = LagTracker()
    metrics = JobMetrics("c", tracker)
    report = BatchReport(4, Counter({1: 80, 2: 10}), Counter({"truncated_value": 2}), groups=4, rebalances=1,
                         collect_seconds=0.4, fold_seconds=0.2)
    query = QueryStandIn()
    watcher = ProgressWatcher(metrics, lambda: query, lambda: report)
    watcher.check()  # started, no trigger yet: neither a batch nor caught up
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") is None
    # Two batches completed between two looks: both observed, oldest first, each once.
    query.recentProgress += [progress(QUERY, 3, {"t": {"0": 0}}, {"t": {"0": 20}}, 20, duration_ms=500),
                             progress(QUERY, 4, {"t": {"0": 20}}, {"t": {"0": 120}}, 90)]
    with caplog.at_level(logging.INFO, logger="rebalance_monitor"):
        watcher.check()
        watcher.check()
    assert metrics.registry.get_sample_value("rebalance_monitor_batch_duration_seconds_count", {"cluster": "c"}) == 2
    assert metrics.registry.get_sample_value("rebalance_monitor_batch_duration_seconds_sum", {"cluster": "c"}) == 2.0
    assert sample(metrics, "rebalance_monitor_skipped_offsets_total") == 10
    # The batch's end: Spark's trigger time (2026-11-24T00:00:00Z) plus its duration.
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") == 1_795_478_400 + 1.5
    assert tracker.partitions() == {("t", 0)}  # the source partition is now polled for input lag
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch ")]
    assert [line.split(":")[0] for line in lines] == ["batch 3", "batch 4"]
    assert lines[1].startswith("batch 4: 90 records [t1=80 t2=10] errors=2 groups=4 rebalances=1")
    assert "(collect 0.40s, fold 0.20s)" in lines[1] and lines[1].endswith("behind=0")
    # Between triggers after one that read data: not idle yet.
    query.status = {"message": IDLE_MESSAGES[0], "isDataAvailable": True, "isTriggerActive": False}
    watcher.check()
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") == 1_795_478_400 + 1.5
    # The last trigger found nothing new (Spark's status between triggers then, as a real query showed):
    # the job is alive and caught up, the gauge says now.
    query.status = {"message": IDLE_MESSAGES[0], "isDataAvailable": False, "isTriggerActive": False}
    before = time.time()
    watcher.check()
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") >= before
    assert metrics.last_progress == sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds")
    # A restarted query (a new run) goes on from the checkpoint's batch ids: its first batch counts.
    query.runId, query.recentProgress = str(uuid.uuid4()), [progress(QUERY, 5, {"t": {"0": 120}},
                                                                     {"t": {"0": 130}}, 10)]
    watcher.check()
    assert metrics.registry.get_sample_value("rebalance_monitor_batch_duration_seconds_count", {"cluster": "c"}) == 3


def test_a_query_that_went_away_is_skipped_quietly() -> None:
    metrics = JobMetrics("c", LagTracker())

    class Gone:
        @property
        def runId(self) -> str:
            raise ConnectionError("Spark's JVM is gone")

    ProgressWatcher(metrics, lambda: Gone(), lambda: BatchReport()).check()
    ProgressWatcher(metrics, lambda: None, lambda: BatchReport()).check()
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") is None
