"""Progress: Spark's query events (built as Spark builds them) to the job's metrics and one log line."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter

import pytest
from pyspark.sql.streaming.listener import QueryIdleEvent, QueryProgressEvent, StreamingQueryProgress

from streaming.driver.progress import ProgressListener, batch_offsets, source_offsets
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


def test_the_listener_feeds_its_own_querys_progress_to_the_metrics(caplog: pytest.LogCaptureFixture) -> None:
    metrics = JobMetrics("c", LagTracker())
    report = BatchReport(3, Counter({1: 80, 2: 10}), Counter({"truncated_value": 2}), groups=4, rebalances=1,
                         collect_seconds=0.4, fold_seconds=0.2)
    listener = ProgressListener(metrics, lambda: str(QUERY), lambda: report)
    with caplog.at_level(logging.INFO, logger="rebalance_monitor"):
        listener.onQueryProgress(QueryProgressEvent(progress(QUERY, 3, {"t": {"0": 0}}, {"t": {"0": 100}}, 90)))
        listener.onQueryProgress(QueryProgressEvent(progress(uuid.uuid4(), 9, None, {"t": {"0": 5}}, 5)))
    assert metrics.registry.get_sample_value("rebalance_monitor_batch_duration_seconds_count", {"cluster": "c"}) == 1
    assert metrics.registry.get_sample_value("rebalance_monitor_batch_duration_seconds_sum", {"cluster": "c"}) == 1.5
    assert sample(metrics, "rebalance_monitor_skipped_offsets_total") == 10
    assert metrics.tracker.partitions() == {("t", 0)}  # the source partition is now polled for input lag
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch ")]
    assert line.startswith("batch 3: 90 records [t1=80 t2=10] errors=2 groups=4 rebalances=1")
    assert "(collect 0.40s, fold 0.20s)" in line and line.endswith("behind=0")
    before = sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds")
    listener.onQueryIdle(QueryIdleEvent(QUERY, uuid.uuid4(), "2026-11-24T00:00:01.000Z"))
    assert sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds") >= before
    assert metrics.last_progress == sample(metrics, "rebalance_monitor_last_batch_timestamp_seconds")
