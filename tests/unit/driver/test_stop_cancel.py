"""A stop cancels the batch in flight even when its Spark job starts after Spark's own cancel (real Spark)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from streaming.driver.query import cancelling

SLEEP_S = 20  # a task that long: the job ends early only if it is cancelled


def slow_job(spark: Any, group: str, outcome: dict[str, str]) -> None:
    """A collect in ``group``, as a foreachBatch's collect runs in the query's run id (interrupt on cancel)."""
    context = spark.sparkContext
    context.setJobGroup(group, "a batch's collect", interruptOnCancel=True)
    try:
        context.parallelize(range(2), 2).map(lambda x: time.sleep(SLEEP_S) or x).collect()
        outcome["result"] = "finished"
    except Exception as exc:
        outcome["result"] = str(exc)[:300]


def test_a_job_submitted_after_the_first_cancel_is_cancelled_while_the_stop_waits(spark: Any) -> None:
    group = f"stop-{uuid.uuid4()}"
    outcome: dict[str, str] = {}
    with cancelling(spark, group, every_s=0.2):
        spark.sparkContext.cancelJobGroup(group)  # what query.stop() does first: nothing runs yet
        started = time.monotonic()
        job = threading.Thread(target=slow_job, args=(spark, group, outcome))
        job.start()
        job.join(timeout=SLEEP_S * 3)
        took = time.monotonic() - started
    result = outcome.get("result", "still running")
    assert result != "finished" and "cancel" in result.lower(), outcome
    assert took < SLEEP_S / 2, f"the job ended after {took:.1f}s: it ran, it was not cancelled"


def test_nothing_is_cancelled_once_the_stop_is_done(spark: Any) -> None:
    group = f"stop-{uuid.uuid4()}"
    with cancelling(spark, group, every_s=0.1):
        pass
    context = spark.sparkContext
    context.setJobGroup(group, "the next run's batch", interruptOnCancel=True)
    try:  # a job of a second: ten of the cancel thread's periods, had it kept running
        assert context.parallelize(range(4), 2).map(lambda x: time.sleep(0.5) or x * 2).collect() == [0, 2, 4, 6]
    finally:
        context.setJobGroup("", "")
