"""The checkpoint's age at each start, the limit it is held to, and the checkpoint set aside when older."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from streaming.cluster.client import DeleteRetention
from streaming.driver.rebuild import CheckpointCheck, RebuildLimit, rebuild_limit
from streaming.groups.store import last_batch_time_ms
from streaming.lag.tracker import LagTracker
from streaming.logs.events import spark_run_id
from streaming.metrics.instruments import JobMetrics

NOW = 1_800_000_000.0


def committed_batch(checkpoint: Path, batch: int, planned_ms: int | None) -> None:
    """Spark's offset log and commit log for ``batch``, as Spark 4 writes them (``planned_ms`` None: an
    offset-log entry Spark never finished writing)."""
    spark = checkpoint / "spark"
    (spark / "offsets").mkdir(parents=True, exist_ok=True)
    (spark / "commits").mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": planned_ms, "conf": {}}
    (spark / "offsets" / str(batch)).write_text(
        "v1\n" + (json.dumps(metadata) if planned_ms is not None else "") + '\n{"__consumer_offsets":{"0":5}}')
    (spark / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_age_is_from_when_the_last_committed_batch_was_planned(tmp_path):
    assert last_batch_time_ms(tmp_path / "spark") is None
    committed_batch(tmp_path, 0, 1_000)
    committed_batch(tmp_path, 1, 2_000)
    (tmp_path / "spark" / "offsets" / "2").write_text("v1\n{\"batchTimestampMs\": 9000}\n{}")  # planned, not committed
    assert last_batch_time_ms(tmp_path / "spark") == 2_000
    committed_batch(tmp_path, 2, None)
    commit = tmp_path / "spark" / "commits" / "2"
    os.utime(commit, (NOW - 50, NOW - 50))
    assert last_batch_time_ms(tmp_path / "spark") == int((NOW - 50) * 1000)  # unreadable entry: the commit's time


def checkpoint_with_history(tmp_path: Path, planned_ms: int) -> Path:
    checkpoint = tmp_path / "checkpoint"
    committed_batch(checkpoint, 7, planned_ms)
    for part in ("monitor/state/delta-7", "monitor/dead-letters", "events/run=old"):
        (checkpoint / part).mkdir(parents=True)
    (checkpoint / "events" / "run=old" / "batch=3.parquet").write_bytes(b"history")
    (checkpoint / "monitor" / "dead-letters" / "sample").write_bytes(b"kept")
    (checkpoint / "spark" / "metadata").write_text('{"id":"0f6b5c9e-query"}')
    return checkpoint


def check(checkpoint: Path, limit: RebuildLimit) -> tuple[bool, JobMetrics]:
    metrics = JobMetrics("c", LagTracker())
    rebuilt = CheckpointCheck(checkpoint, lambda: limit, metrics, clock=lambda: NOW).run()
    return rebuilt, metrics


def gauges(metrics: JobMetrics) -> tuple[float | None, float | None]:
    return (metrics.registry.get_sample_value("rebalance_monitor_checkpoint_age_seconds", {"cluster": "c"}),
            metrics.registry.get_sample_value("rebalance_monitor_state_rebuilds_total",
                                              {"cluster": "c", "reason": "checkpoint_age"}))


def test_a_checkpoint_younger_than_the_limit_is_resumed(tmp_path, caplog):
    checkpoint = checkpoint_with_history(tmp_path, int((NOW - 100) * 1000))
    run_id = spark_run_id(checkpoint / "spark")
    caplog.set_level(logging.INFO, logger="rebalance_monitor")
    rebuilt, metrics = check(checkpoint, RebuildLimit(101, "delete.retention.ms of topic __consumer_offsets"))
    assert not rebuilt
    assert gauges(metrics) == (100.0, 0.0)
    assert (checkpoint / "spark" / "commits" / "7").exists() and (checkpoint / "monitor" / "state").exists()
    assert spark_run_id(checkpoint / "spark") == run_id
    assert "checkpoint is 100s old; resuming from it" in caplog.text


def test_a_checkpoint_older_than_the_limit_is_set_aside_keeping_the_event_log_and_dead_letters(tmp_path, caplog):
    checkpoint = checkpoint_with_history(tmp_path, int((NOW - 100) * 1000))
    run_id = spark_run_id(checkpoint / "spark")
    caplog.set_level(logging.INFO, logger="rebalance_monitor")
    rebuilt, metrics = check(checkpoint, RebuildLimit(100, "delete.retention.ms of topic __consumer_offsets"))
    assert rebuilt
    assert gauges(metrics) == (100.0, 1.0)
    assert sorted(p.name for p in checkpoint.iterdir()) == ["events", "monitor"]  # no spark/, no run id
    assert sorted(p.name for p in (checkpoint / "monitor").iterdir()) == ["dead-letters"]
    assert (checkpoint / "events" / "run=old" / "batch=3.parquet").read_bytes() == b"history"
    assert (checkpoint / "monitor" / "dead-letters" / "sample").read_bytes() == b"kept"
    assert spark_run_id(checkpoint / "spark") != run_id  # the rebuilt query's batches go to a new run
    assert ("checkpoint is 100s old, older than 100s (delete.retention.ms of topic __consumer_offsets): "
            "tombstones written since may be gone") in caplog.text


def test_no_checkpoint_and_never_rebuilding(tmp_path):
    asked = []

    def limit() -> RebuildLimit:
        asked.append(1)
        return RebuildLimit(None, "--rebuild-after-seconds")

    metrics = JobMetrics("c", LagTracker())
    assert not CheckpointCheck(tmp_path / "checkpoint", limit, metrics, clock=lambda: NOW).run()
    assert gauges(metrics) == (0.0, 0.0) and not asked  # nothing to resume: the cluster is not asked
    checkpoint = checkpoint_with_history(tmp_path, 0)  # decades old
    assert not CheckpointCheck(checkpoint, limit, metrics, clock=lambda: NOW).run()
    assert (checkpoint / "spark").exists() and asked


def test_the_limit_from_the_option_the_cluster_or_kafkas_default(caplog):
    def never() -> DeleteRetention:
        raise AssertionError("the option was given: the cluster is not asked")

    assert rebuild_limit(600, never, "__consumer_offsets") == RebuildLimit(600, "--rebuild-after-seconds")
    assert rebuild_limit(0, never, "__consumer_offsets") == RebuildLimit(None, "--rebuild-after-seconds")
    assert rebuild_limit(None, lambda: DeleteRetention(3000, "topic __consumer_offsets"),
                         "__consumer_offsets") == RebuildLimit(3.0, "delete.retention.ms of topic __consumer_offsets")
    caplog.set_level(logging.WARNING, logger="rebalance_monitor")
    refused = DeleteRetention(None, "DescribeConfigs on topic __consumer_offsets gave no delete.retention.ms")
    assert rebuild_limit(None, lambda: refused, "__consumer_offsets") == RebuildLimit(
        86_400, "Kafka's default delete.retention.ms (assumed)", assumed=True)
    assert "could not read delete.retention.ms of __consumer_offsets (DescribeConfigs on topic" in caplog.text
    assert "Grant the job's principal DescribeConfigs on topic __consumer_offsets, or set --rebuild-after-seconds" in (
        caplog.text)


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_limit_is_refused(value):
    from streaming.options import parse_args
    from streaming.settings import OptionError

    with pytest.raises((OptionError, SystemExit)):
        parse_args(["--bootstrap-server", "b:9092", "--rebuild-after-seconds", value])


def test_the_limit_is_read_once_unless_it_was_assumed(tmp_path):
    answers = [RebuildLimit(86_400, "Kafka's default delete.retention.ms (assumed)", assumed=True),
               RebuildLimit(50, "delete.retention.ms of topic __consumer_offsets"),
               RebuildLimit(10, "should not be asked")]
    checkpoint = checkpoint_with_history(tmp_path, int((NOW - 100) * 1000))
    check = CheckpointCheck(checkpoint, lambda: answers.pop(0), JobMetrics("c", LagTracker()), clock=lambda: NOW - 60)
    assert not check.run()  # 40 s old, 86,400 s assumed
    assert not check.run()  # 40 s old, 50 s read
    assert len(answers) == 1
    check.clock = lambda: NOW
    assert check.run()  # 100 s old against the 50 s read before, not asked again
    assert len(answers) == 1


def test_a_set_aside_cut_short_is_finished_at_the_next_start(tmp_path):
    checkpoint = checkpoint_with_history(tmp_path, int(NOW * 1000))  # young: no reason of its own
    run_id = spark_run_id(checkpoint / "spark")
    (checkpoint / "spark").rename(checkpoint / "spark.discarded")  # killed right after the rename
    rebuilt, metrics = check(checkpoint, RebuildLimit(100, "delete.retention.ms of topic __consumer_offsets"))
    assert rebuilt
    assert sorted(p.name for p in checkpoint.iterdir()) == ["events", "monitor"]
    assert spark_run_id(checkpoint / "spark") != run_id
    assert gauges(metrics) == (0.0, 0.0)  # the rebuild was counted by the process that started it
