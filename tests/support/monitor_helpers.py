"""Helpers for the end-to-end tests: start the real job, scrape its real /metrics."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streaming.driver.config import DriverConfig
from streaming.job import Monitor
from streaming.lag.config import LagConfig
from streaming.options import parse_args
from tests.support.exposition import Samples, fetch, value


def start_monitor(spark: Any, bootstrap: str, workdir: Path, *extra: str) -> Monitor:
    options = parse_args(["--bootstrap-server", bootstrap, "--checkpoint-dir", str(workdir / "checkpoint"),
                          "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--trigger-seconds", "1",
                          "--lag-poll-seconds", "1", "--state-partitions", "2", "--cluster", "test", *extra])
    return Monitor(spark, options).start()


def busy_and_idle(bootstrap: str, admin: Any, members: list[Any], prefix: str
                  ) -> tuple[str, list[tuple[str, int]], dict[str, list[Any]]]:
    """Topic ``{prefix}-t`` (4 partitions) and two classic groups of two members each, balanced: ``{prefix}-busy``
    (which the restart tests rebalance) and ``{prefix}-idle``; the topic, its partitions and the members by group."""
    from testbed.workload import Member, start_members, wait_balanced

    topic = f"{prefix}-t"
    admin.create_topic(topic, 4)
    parts = [(topic, p) for p in range(4)]
    crew = {g: [Member(bootstrap, g, [topic], f"{g}-C{i}") for i in range(2)] for g in (f"{prefix}-busy",
                                                                                          f"{prefix}-idle")}
    members.extend(m for ms in crew.values() for m in ms)
    for ms in crew.values():
        start_members(ms)
    for ms in crew.values():
        wait_balanced(ms, parts)
    return topic, parts, crew


def default_cadence() -> tuple[str, ...]:
    """Flags (given after start_monitor's) that put back the trigger and lag-poll intervals it shortens: the job
    at its defaults, as an operator runs it, where the time between a commit and its batch is seconds."""
    return ("--trigger-seconds", str(DriverConfig.trigger_seconds), "--lag-poll-seconds", str(LagConfig.poll_seconds))


def scrape(monitor: Monitor) -> Samples:
    return fetch(monitor.metrics_url)


def wait_for(monitor: Monitor, check: Callable[[Samples], bool], what: str, timeout: float = 90) -> Samples:
    """Scrape until ``check`` holds; fail with the last scrape's relevant lines otherwise."""
    deadline = time.monotonic() + timeout
    samples: Samples = {}
    while time.monotonic() < deadline:
        if monitor.query is not None and monitor.query.exception():
            raise AssertionError(f"streaming query failed: {monitor.query.exception()}")
        samples = scrape(monitor)
        if check(samples):
            return samples
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def owner_changes(before: dict[str, frozenset], after: dict[str, frozenset]) -> int:
    """Partitions whose owner differs between two stable assignments (client id -> partitions)."""
    owner_before = {tp: owner for owner, parts in before.items() for tp in parts}
    owner_after = {tp: owner for owner, parts in after.items() for tp in parts}
    return sum(1 for tp, owner in owner_after.items() if tp in owner_before and owner_before[tp] != owner)


def wait_generation(monitor: Monitor, group: str, member: Any, what: str, members: int | None = None) -> Samples:
    """Scrape until the job's generation for ``group`` is the one ``member`` reports now
    (and, when given, the job counts ``members`` members)."""

    def caught_up(s: Samples) -> bool:
        return value(s, "kafka_consumergroup_generation", group=group) == member.generation and (
            members is None or value(s, "kafka_consumergroup_current_members", group=group) == members)

    return wait_for(monitor, caught_up, what)


# A Spark JVM starting on a loaded two-core machine.
JOB_START_TIMEOUT_S = 180


def wait_for_url(job: subprocess.Popen[bytes], output: Path, timeout_s: float = JOB_START_TIMEOUT_S) -> str:
    """The metrics URL a job run as a process prints once it serves (port 0: the job picks one);
    fails with the end of its output if it exits first or never prints it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(r"^Metrics: (\S+)$", output.read_text(errors="replace"), re.MULTILINE)
        if match:
            return match.group(1)
        if job.poll() is not None:
            pytest.fail(f"job exited with {job.returncode}:\n{output.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    pytest.fail("the job did not print its metrics URL in time")
