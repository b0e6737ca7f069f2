"""The supervisor's decisions when Spark's JVM goes away: exit non-zero, saying why; never sit silent."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JNetworkError

from streaming.driver.health import OOM_EXIT_STATUS, jvm_gone, launched_jvm_status, query_verdict
from streaming.job import _supervise


def gone() -> bool:
    raise Py4JNetworkError("Answer from Java side is empty")


def test_a_running_query_is_not_asked_about_the_jvm() -> None:
    def status(_wait: float) -> int | None:
        raise AssertionError("not asked while the query runs")

    assert query_verdict(lambda: True, status) == (True, None)


def test_a_failed_query_in_a_live_jvm_is_for_the_retry_clock() -> None:
    asked: list[float] = []
    assert query_verdict(lambda: False, lambda wait: asked.append(wait) or None) == (False, None)
    assert asked == [0.0]  # no wait for a JVM that answered


def test_a_jvm_out_of_memory_ends_the_job_saying_so() -> None:
    asked: list[float] = []

    def status(wait: float) -> int:
        asked.append(wait)
        return OOM_EXIT_STATUS

    active, why = query_verdict(gone, status)
    assert not active and why is not None
    assert why.startswith("Spark's JVM ran out of memory and exited (status 3")
    assert "spark.driver.memory" in why and "--max-offsets-per-trigger" in why
    assert asked and asked[0] > 0  # given a moment to be reaped


def test_a_jvm_that_exited_while_the_query_looked_stopped_is_gone_too() -> None:
    assert query_verdict(lambda: False, lambda _wait: OOM_EXIT_STATUS)[1] == jvm_gone(OOM_EXIT_STATUS)


@pytest.mark.parametrize(("status", "error", "expected"), [
    (-9, None, "Spark's JVM was killed by SIGKILL (the kernel's OOM killer at the container's memory limit, "
               "or kill -9)"),
    (-15, None, "Spark's JVM was killed by SIGTERM"),
    (1, None, "Spark's JVM exited with status 1"),
    (None, Py4JNetworkError("Answer from Java side is empty\nmore"),
     "Spark's JVM does not answer (Py4JNetworkError: Answer from Java side is empty)"),
    (None, ConnectionRefusedError(), "Spark's JVM does not answer (ConnectionRefusedError)"),
])
def test_why_the_jvm_is_gone(status: int | None, error: BaseException | None, expected: str) -> None:
    assert jvm_gone(status, error) == expected


def test_the_launched_jvms_exit_status() -> None:
    """pyspark keeps the JVM it launched as SparkContext._gateway.proc; under spark-submit there is none."""
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({OOM_EXIT_STATUS})"])
    spark = SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=process)))
    assert launched_jvm_status(spark, 10.0) == OOM_EXIT_STATUS
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=killed)))
        assert launched_jvm_status(running) is None
        assert launched_jvm_status(running, 0.05) is None
    finally:
        killed.kill()
    assert launched_jvm_status(running, 10.0) == -9
    assert launched_jvm_status(SimpleNamespace(sparkContext=SimpleNamespace(_gateway=None))) is None


class Query:
    def __init__(self, active: Any) -> None:
        self._active = active

    @property
    def isActive(self) -> bool:  # pyspark's name
        return bool(self._active())


def fake_monitor(active: Any, failure: str | None = None) -> Any:
    failed: list[float | None] = []
    return SimpleNamespace(
        options=SimpleNamespace(driver=SimpleNamespace(query_retry_seconds=0.0),
                                kafka=SimpleNamespace(kafka_options={})),
        query=Query(active), runner=SimpleNamespace(failure=lambda: failure),
        instruments=SimpleNamespace(last_progress=None),
        health=SimpleNamespace(query_failed=failed.append, failed=failed))


def test_the_supervisor_exits_with_why_the_jvm_died() -> None:
    why = _supervise(fake_monitor(gone), threading.Event(), lambda _wait: OOM_EXIT_STATUS)
    assert why is not None and why.startswith("Spark's JVM ran out of memory")


def test_the_supervisor_exits_when_the_jvm_stops_answering_without_a_known_status() -> None:
    why = _supervise(fake_monitor(gone), threading.Event(), lambda _wait: None)
    assert why == "Spark's JVM does not answer (Py4JNetworkError: Answer from Java side is empty)"


def test_a_query_stopped_outside_the_job_is_no_silent_exit() -> None:
    assert _supervise(fake_monitor(lambda: False), threading.Event()) == \
        "the streaming query was stopped outside the job"


def test_a_stop_signal_that_took_the_jvm_with_it_is_a_clean_stop() -> None:
    stop = threading.Event()

    def ctrl_c() -> bool:  # the terminal's SIGINT reached both processes
        stop.set()
        return gone()

    assert _supervise(fake_monitor(ctrl_c), stop, lambda _wait: -2) is None


def test_a_failure_past_the_retry_limit_ends_the_job() -> None:
    monitor = fake_monitor(lambda: False, failure="boom")
    assert _supervise(monitor, threading.Event()) == "streaming query failed: boom"
    assert monitor.health.failed == [None]
