"""Input lag before the first batch: counted from where the query starts, so a first batch too large to
complete shows the records waiting instead of 0 behind (issue 28)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from pyspark.sql.streaming.listener import StreamingQueryProgress

from streaming.driver.progress import ProgressWatcher, checkpoint_start_offsets
from streaming.lag.tracker import LagTracker
from streaming.metrics.instruments import JobMetrics
from streaming.protocol import BatchReport

TOPIC = "__consumer_offsets"
T = 1_700_000_000.0


def write_offsets_log(spark: Path, batch: int, offsets: dict, committed: bool = True) -> None:
    """Spark's offset log entry (version, metadata, one line per source) and its commit."""
    (spark / "offsets").mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000, "conf": {}}
    (spark / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(metadata)}\n{json.dumps(offsets)}")
    if committed:
        (spark / "commits").mkdir(exist_ok=True)
        (spark / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def write_initial_offsets(spark: Path, offsets: dict, zero_byte: bool = True) -> None:
    """The Kafka source's initial offsets as its KafkaSourceInitialOffsetWriter writes them (a zero byte
    first, for Spark 2.1.0's reader)."""
    (spark / "sources" / "0").mkdir(parents=True)
    (spark / "sources" / "0" / "0").write_bytes((b"\0" if zero_byte else b"") + f"v1\n{json.dumps(offsets)}".encode())


def test_start_offsets_from_the_checkpoint(tmp_path: Path) -> None:
    spark = tmp_path / "spark"
    assert checkpoint_start_offsets(spark) == {}  # no checkpoint yet
    write_initial_offsets(spark, {TOPIC: {"0": 0, "1": 5}})
    assert checkpoint_start_offsets(spark) == {(TOPIC, 0): 0, (TOPIC, 1): 5}
    write_offsets_log(spark, 0, {TOPIC: {"0": 700, "1": 900}}, committed=False)  # planned, not committed
    assert checkpoint_start_offsets(spark) == {(TOPIC, 0): 0, (TOPIC, 1): 5}
    write_offsets_log(spark, 0, {TOPIC: {"0": 700, "1": 900}})
    write_offsets_log(spark, 1, {TOPIC: {"0": 800, "1": 950}}, committed=False)  # the batch in flight
    assert checkpoint_start_offsets(spark) == {(TOPIC, 0): 700, (TOPIC, 1): 900}


def test_start_offsets_without_the_zero_byte_and_from_junk(tmp_path: Path) -> None:
    write_initial_offsets(tmp_path / "a", {TOPIC: {"3": 42}}, zero_byte=False)
    assert checkpoint_start_offsets(tmp_path / "a") == {(TOPIC, 3): 42}
    (tmp_path / "b" / "sources" / "0").mkdir(parents=True)
    (tmp_path / "b" / "sources" / "0" / "0").write_text("v1\n[1, 2]")
    assert checkpoint_start_offsets(tmp_path / "b") == {}


class StartingQuery:
    """A query whose first batch runs and never completes (the JVM's heap overflowed in it)."""

    def __init__(self) -> None:
        self.runId = str(uuid.uuid4())
        self.recentProgress: list[StreamingQueryProgress] = []
        self.status = {"message": "Processing new data", "isDataAvailable": True, "isTriggerActive": True}

    @property
    def lastProgress(self) -> StreamingQueryProgress | None:
        return self.recentProgress[-1] if self.recentProgress else None


def lag(metrics: JobMetrics) -> float | None:
    return metrics.registry.get_sample_value("rebalance_monitor_input_lag_records", {"cluster": "c"})


def test_input_lag_counts_from_the_start_until_the_first_batch(tmp_path: Path) -> None:
    clock = [T]
    tracker = LagTracker(clock=lambda: clock[0])
    metrics = JobMetrics("c", tracker)
    start = {(TOPIC, 0): 0, (TOPIC, 1): 100}
    query = StartingQuery()
    watcher = ProgressWatcher(metrics, lambda: query, BatchReport, start_offsets=lambda: start)
    watcher.check()
    assert tracker.partitions() == set(start)  # the lag poller now samples the source's log ends
    assert lag(metrics) == 0  # no sample yet: nothing known to wait
    tracker.record_offsets({(TOPIC, 0): (0, 600_000), (TOPIC, 1): (0, 500_100)}, clock[0])
    metrics.refresh_input_lag(clock[0])  # what each lag refresh does
    assert lag(metrics) == 1_100_000 and metrics.records_behind == 1_100_000
    clock[0] += 60
    tracker.record_offsets({(TOPIC, 0): (0, 600_010), (TOPIC, 1): (0, 500_100)}, clock[0])
    watcher.check()  # each look refreshes it too
    assert lag(metrics) == 1_100_010


def test_a_completed_batch_takes_over_and_the_start_is_no_longer_read() -> None:
    tracker = LagTracker(clock=lambda: T)
    metrics = JobMetrics("c", tracker)
    asked: list[int] = []

    def start() -> dict:
        asked.append(1)
        return {(TOPIC, 0): 0}

    metrics.observe_batch(1.0, 0, {(TOPIC, 0): 400}, T)
    tracker.record_offsets({(TOPIC, 0): (0, 1_000)}, T)
    metrics.refresh_input_lag(T)
    query = StartingQuery()
    ProgressWatcher(metrics, lambda: query, BatchReport, start_offsets=start).check()
    assert not asked and lag(metrics) == 600


def test_offsets_below_the_log_start_are_not_waiting() -> None:
    """The Kafka source's "earliest" marker (-2), or records deleted before they were read."""
    tracker = LagTracker(clock=lambda: T)
    metrics = JobMetrics("c", tracker)
    metrics.observe_start({(TOPIC, 0): -2, (TOPIC, 1): 10}, T)
    tracker.record_offsets({(TOPIC, 0): (50, 80), (TOPIC, 1): (40, 90)}, T)
    metrics.refresh_input_lag(T)
    assert lag(metrics) == 30 + 50
