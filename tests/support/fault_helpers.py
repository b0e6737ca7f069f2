"""Helpers for the fault tests: the job as a real process, churning groups, Kafka's own view of them.

The job runs as its own process group (``python -m streaming.cli run`` or ``deploy/spark-submit``),
so a kill takes the Python driver and its JVM down together, as a crashed pod would.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from decoders import Record, decode
from streaming.logs.events import EventLog
from streaming.protocol import RebalanceEvent
from testbed.broker import free_port
from testbed.workload import Admin, Member, leave_all, wait_until
from tests.support.exposition import Samples, value

REPO = Path(__file__).resolve().parents[2]
# Series that depend on when they are scraped, not on the records read: lag, and the assignor
# advice, which the advisor pass publishes from its own thread some time after a group changes.
# Series that do not follow from the records alone: lag and log ends (sampled), the advisor's pass
# (background), and the live group-state poll's families (what the coordinators say at the moment of
# the scrape: the killed and the clean job scrape at different moments).
TIME_DEPENDENT = re.compile(r"lag|log_end|assignor_imbalance|consumergroup_state|rebalancing_|observed_rebalance"
                            r"|health|records_lost|retention_margin")


class RecordingMember(Member):
    """A member that keeps every generation it was assigned in, not only the latest."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "generation" and value is not None and value > 0:
            self.__dict__.setdefault("generations", []).append(value)
        super().__setattr__(name, value)

    @property
    def seen(self) -> set[int]:
        return set(self.__dict__.get("generations", []))


@dataclass
class JobProcess:
    """The monitor job in its own process group; ``command`` defaults to ``python -m streaming.cli run``."""

    workdir: Path
    bootstrap: str
    args: list[str]
    command: list[str] = field(default_factory=lambda: [sys.executable, "-m", "streaming.cli", "run"])
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    starts: int = 0
    started_at: float = 0.0  # time.time() of the latest start
    process: subprocess.Popen[bytes] | None = None

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def event_log(self) -> EventLog:
        return EventLog(self.workdir / "events")

    @property
    def log(self) -> Path:
        return self.workdir / f"job-{self.starts}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> JobProcess:
        self.starts += 1
        self.started_at = time.time()
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [*self.command, "--bootstrap-server", self.bootstrap, "--checkpoint-dir", str(self.checkpoint),
                "--event-log", str(self.workdir / "events"), "--metrics-host", "127.0.0.1",
                "--metrics-port", str(self.port), "--trigger-seconds", "1", "--lag-poll-seconds", "1",
                *self.args]
        # A file, not a pipe: a pipe nobody reads fills up and blocks the job.
        with self.log.open("w") as out:
            self.process = subprocess.Popen(argv, cwd=REPO, env={**os.environ, **self.env}, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def scrape(self) -> Samples | None:
        """The job's /metrics, or None while it does not answer."""
        try:
            text = urllib.request.urlopen(self.url, timeout=5).read().decode()
        except OSError:
            return None
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def wait(self, check: Callable[[Samples], bool], what: str, timeout: float = 180) -> Samples:
        """Scrape until ``check`` holds; the job dying or the timeout fails with its log."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.running, f"job exited with {self.process and self.process.returncode}:\n{self.tail()}"
            samples = self.scrape()
            if samples is not None and check(samples):
                return samples
            assert time.monotonic() < deadline, f"job never reported {what}:\n{self.tail()}"
            time.sleep(0.5)

    def kill(self) -> None:
        """SIGKILL the whole process group: driver, JVM and Python workers at once."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120, group: bool = False) -> float:
        """Send ``sig`` to the driver (as Kubernetes does to a pod's first process) or to its whole process
        group (as a terminal's Ctrl-C does), wait for the exit; seconds it took (SIGKILL after ``timeout``)."""
        assert self.process is not None
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if group else os.kill)(self.process.pid, sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return time.monotonic() - started

    def tail(self, lines: int = 40) -> str:
        """The first error lines (a JVM trace fills any tail) and the end of the current log."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        errors = [line for line in text.splitlines() if re.search(r"Error|Exception|Traceback", line)][:15]
        return "first errors:\n" + "\n".join(errors) + "\n...\n" + "\n".join(text.splitlines()[-lines:])


def batch_ids(checkpoint: Path) -> tuple[int | None, int | None]:
    """The newest batch Spark planned (offsets/) and the newest it committed (commits/)."""
    def newest(directory: Path) -> int | None:
        ids = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.is_dir() else []
        return max(ids) if ids else None

    return newest(checkpoint / "spark" / "offsets"), newest(checkpoint / "spark" / "commits")


def kill_mid_batch(job: JobProcess, rng: random.Random, max_delay: float, timeout: float = 180) -> bool:
    """Wait for the job to plan a new batch, SIGKILL it a random delay later; whether the batch was
    still uncommitted at the kill (the driver died mid-batch)."""
    first, _ = batch_ids(job.checkpoint)
    wait_until(lambda: (batch_ids(job.checkpoint)[0] or -1) > (first if first is not None else -1) or not job.running,
               timeout, "a new batch")
    assert job.running, f"job exited:\n{job.tail()}"
    planned, _ = batch_ids(job.checkpoint)
    time.sleep(rng.uniform(0, max_delay))
    _, committed = batch_ids(job.checkpoint)
    job.kill()
    return committed is None or planned is None or committed < planned


class Churn(threading.Thread):
    """Members join and leave the groups on a fixed schedule; each group keeps one anchor member, so
    none goes Empty and every generation has a member that reports it."""

    def __init__(self, bootstrap: str, topic: str, groups: Iterable[str], seed: int, every: float = 3.0) -> None:
        super().__init__(daemon=True, name="churn")
        self.bootstrap, self.topic, self.every = bootstrap, topic, every
        self.groups = list(groups)
        self.rng = random.Random(seed)
        self.anchors = {g: RecordingMember(bootstrap, g, [topic], f"{g}-anchor") for g in self.groups}
        self.guests: dict[str, list[RecordingMember]] = {g: [] for g in self.groups}
        self.everyone: list[RecordingMember] = list(self.anchors.values())
        self.steps = 0
        self._stop_event = threading.Event()

    def start_anchors(self) -> None:
        for anchor in self.anchors.values():
            anchor.start()
        for anchor in self.anchors.values():
            wait_until(functools.partial(getattr, anchor, "joined"), 60, f"{anchor.client_id} to join")

    def run(self) -> None:
        while not self._stop_event.wait(self.every):
            group = self.groups[self.steps % len(self.groups)]
            guests = self.guests[group]
            if len(guests) < 2 and (not guests or self.rng.random() < 0.6):
                member = RecordingMember(self.bootstrap, group, [self.topic], f"{group}-g{self.steps}")
                guests.append(member)
                self.everyone.append(member)
                member.start()
            else:
                guests.pop(self.rng.randrange(len(guests))).leave()
            self.steps += 1

    def stop(self) -> None:
        """Stop the schedule and every member (cleanly: they leave the group); also when it never started
        (a failed setup's cleanup must not hide the failure)."""
        self._stop_event.set()
        if self.ident is not None:
            self.join(60)
        leave_all(m for m in self.everyone if m.running)

    def seen(self, group: str) -> set[int]:
        return set().union(*(m.seen for m in self.everyone if m.group == group))


@dataclass(frozen=True)
class KafkaView:
    """What ``__consumer_offsets`` holds for some groups, decoded: generations with members, in order,
    Empty generations, and offset-commit records."""

    generations: dict[str, list[int]]
    empty: dict[str, list[int]]
    commits: Counter[str]

    def rebalances(self, group: str) -> list[int]:
        """The generations after the group's first (a baseline), Empty ones left out."""
        return self.generations.get(group, [])[1:]


def kafka_view(admin: Admin, groups: Iterable[str]) -> KafkaView:
    wanted = set(groups)
    generations: dict[str, list[int]] = {g: [] for g in wanted}
    empty: dict[str, list[int]] = {g: [] for g in wanted}
    commits: Counter[str] = Counter()
    for record in admin.read_all("__consumer_offsets"):
        decoded = decode(record.key, record.value)
        if not isinstance(decoded, Record) or decoded.group not in wanted or decoded.value is None:
            continue
        if decoded.record_type == 2:
            target = generations if decoded.value.members else empty
            target[decoded.group].append(decoded.value.generation)
        elif decoded.record_type in (0, 1):
            commits[decoded.group] += 1
    return KafkaView(generations, empty, commits)


@dataclass(frozen=True)
class EventCount:
    expected: int
    found: int
    duplicated: int
    missing: list[tuple[str, int]]
    unexpected: list[tuple[str, int]]

    def __str__(self) -> str:
        return f"events expected={self.expected} found={self.found} duplicated={self.duplicated}"


def count_events(events: list[RebalanceEvent], view: KafkaView, groups: Iterable[str]) -> EventCount:
    """The event log against Kafka's view: each generation after a group's baseline exactly once."""
    expected = {(g, gen) for g in groups for gen in view.rebalances(g)}
    logged = Counter((e.group, e.new_generation) for e in events)
    return EventCount(expected=len(expected), found=len(expected & set(logged)),
                      duplicated=sum(n - 1 for n in logged.values() if n > 1),
                      missing=sorted(expected - set(logged)), unexpected=sorted(set(logged) - expected))


def group_series(samples: Samples, groups: Iterable[str]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The groups' series that follow from the records alone (``TIME_DEPENDENT`` ones left out)."""
    wanted = set(groups)
    return {(name, labels): v for (name, labels), v in samples.items()
            if dict(labels).get("group") in wanted and not TIME_DEPENDENT.search(name)}


def caught_up(view: KafkaView, groups: Iterable[str]) -> Callable[[Samples], bool]:
    """A check that a scrape reflects every record of ``view``: last generation and commit count."""
    groups = list(groups)

    def check(samples: Samples) -> bool:
        return all(value(samples, "kafka_consumergroup_generation", group=g) == max(view.generations[g] + view.empty[g])
                   and value(samples, "kafka_consumergroup_offset_commits_total", group=g) == view.commits[g]
                   for g in groups)

    return check


def clean_run(workdir: Path, bootstrap: str, args: list[str], view: KafkaView,
              groups: Iterable[str]) -> tuple[Samples, list[RebalanceEvent]]:
    """The oracle a faulted job must equal: a job started from an empty checkpoint over the same records,
    its scrape once caught up with ``view`` and its event log."""
    oracle = JobProcess(workdir, bootstrap, args).start()
    try:
        samples = oracle.wait(caught_up(view, groups), "every record of the groups, from an empty checkpoint")
    finally:
        oracle.stop()
    return samples, oracle.event_log.read()


def spark_home() -> Path:
    """The PySpark installation: its jars and bin/spark-class are a complete Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    """A Spark standalone cluster on loopback: one master and ``workers`` workers of one core each,
    started from PySpark's own classes, each in its own process group (a worker's kill takes its
    executor and Python workers with it, as a lost machine would)."""

    workdir: Path
    workers: int = 2
    worker_memory: str = "1g"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(self.workdir / "logs")}

    def _start(self, name: str, *args: str) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Each daemon its own local directory: what a worker's executors spill and keep (shuffle files, the
        # state store's RocksDB instances) is then found by worker.
        local = self.local_dir(name)
        local.mkdir(parents=True, exist_ok=True)
        with (self.workdir / f"{name}.log").open("w") as out:
            self.processes[name] = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                                    env={**self.env(), "SPARK_LOCAL_DIRS": str(local)}, stdout=out,
                                                    stderr=subprocess.STDOUT, start_new_session=True)

    def local_dir(self, name: str) -> Path:
        return self.workdir / f"{name}-local"

    def start(self) -> SparkCluster:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", "1", "--memory", self.worker_memory, "--webui-port", str(free_port()),
                        "--work-dir", str(self.workdir / f"worker-{i}"), self.url)
        wait_until(lambda: len(self.alive_workers()) == self.workers, 180, f"{self.workers} workers")
        return self

    def state(self) -> dict[str, Any]:
        """The master's own view (its web UI's JSON); empty while the UI is not up or, in its first
        second, answers with an HTML page instead (seen once on a loaded machine)."""
        import json

        try:
            return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json", timeout=5).read())
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def app_cores(self) -> int:
        """Cores the running application holds (one per live executor here)."""
        return sum(app.get("cores", 0) for app in self.state().get("activeapps", []))

    def kill(self, name: str) -> None:
        """SIGKILL one daemon's process group: a worker with its executor and Python workers."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)

    def stop(self) -> None:
        """Workers first, then the master; every process group is gone afterwards."""
        for name in sorted(self.processes, reverse=True):
            process = self.processes[name]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # executors a worker left behind
