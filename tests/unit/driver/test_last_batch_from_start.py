"""The last-batch gauge exists from the job's start (issue 28): an absent series let a job that never
completed a batch escape MonitorStalled."""

from __future__ import annotations

import json
import os
from pathlib import Path

from streaming.driver.progress import checkpoint_progress_time
from streaming.lag.tracker import LagTracker
from streaming.metrics.instruments import JobMetrics

T = 1_700_000_000.0
GAUGE = "rebalance_monitor_last_batch_timestamp_seconds"


def gauge(metrics: JobMetrics) -> float | None:
    return metrics.registry.get_sample_value(GAUGE, {"cluster": "c"})


def test_the_checkpoint_says_when_its_query_last_made_progress(tmp_path: Path) -> None:
    spark = tmp_path / "spark"
    assert checkpoint_progress_time(spark) is None  # a new checkpoint: the job's start is all there is
    spark.mkdir()
    (spark / "metadata").write_text('{"id":"q"}')
    os.utime(spark / "metadata", (T, T))
    # Started, never a committed batch (a first batch that kills the job at every start): the first start,
    # which later restarts do not move.
    assert checkpoint_progress_time(spark) == T
    (spark / "offsets").mkdir()
    (spark / "commits").mkdir()
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": int((T + 600) * 1000), "conf": {}}
    (spark / "offsets" / "0").write_text(f'v1\n{json.dumps(metadata)}\n{{"t":{{"0":5}}}}')
    (spark / "commits" / "0").write_text("v1\n{}")
    assert checkpoint_progress_time(spark) == T + 600  # when its last committed batch was planned


def test_the_gauge_holds_the_previous_progress_until_progress_here() -> None:
    metrics = JobMetrics("c", LagTracker())
    assert gauge(metrics) is None
    metrics.observe_previous_progress(T)
    assert gauge(metrics) == T and metrics.last_progress == T
    metrics.observe_idle(T + 100)
    metrics.observe_previous_progress(T)  # too late: progress here was seen
    assert gauge(metrics) == T + 100
    fresh = JobMetrics("c", LagTracker())
    fresh.observe_batch(1.0, 0, {("t", 0): 5}, T + 50)
    fresh.observe_previous_progress(T)
    assert gauge(fresh) == T + 50
