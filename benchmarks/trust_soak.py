"""``make soak-trust``: issue 28's "done when" for Kafka Streams apps and slow committers, on real parts, as a report.

A local KRaft broker (or ``--bootstrap-server``), the real job in this process (local[2]) and a real Prometheus
on the shipped rules at the shipped intervals (deploy/prometheus/, 15 s scrape and evaluation, every ``for:`` as
shipped), and:

A. tests/jvm/StreamsApp.java re-keying ``--rate`` records/s through its repartition topic, committing and
   purging it every second, for ``--streams-minutes`` beside the job at its defaults: the repartition topic's
   log start moves, the group's ``kafka_consumergroup_records_lost_total`` stays 0, no alert fires for it.
B. in the same run, a slow committer: a kafka-python consumer auto-committing every ``--commit-minutes`` on a
   topic receiving records, the job at ``--health-window``: its ``kafka_consumergroup_health`` is never ERR
   while it commits; killed at the end of A (SIGKILL: no commit, no leave), it is ERR within two of its
   commit intervals.
C. then the job on a fresh checkpoint with ``--max-offsets-per-trigger`` (its catch-up over A's and B's
   commits capped), stopped half way through ``--restart-minutes`` and started again 30 s later: the Streams
   group's records_lost_total stays 0, no alert fires for it.

The job's series are read from Prometheus (the job is scraped as deployed, not more often); each check prints
PASS or FAIL with its figures, and the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from streaming.job import Monitor, spark_session
from streaming.options import parse_args
from testbed.broker import LocalKafka, free_port
from testbed.jvm import kafka_version
from testbed.prometheus import LocalPrometheus
from testbed.workload import Admin, Member
from tests.support.exposition import value
from tests.support.monitor_helpers import default_cadence, start_monitor, wait_for
from tests.support.streams_app import RepartitionLoad, start_producer

STEP_S = 15.0  # the shipped scrape and evaluation interval
SHARED_LABELS = ("__name__", "cluster", "instance", "job", "group")
RESTART_GAP_S = 30.0  # C: how long the job is down between its two runs


class Report:
    """The checks' outcomes, printed as they are decided."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, name: str, passed: bool, figures: str) -> None:
        print(f"{'PASS' if passed else 'FAIL'} {name}: {figures}", flush=True)
        if not passed:
            self.failed.append(name)

    @staticmethod
    def note(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


class Soak:
    """The parts the phases share: broker, Prometheus scraping one fixed port, the Streams load."""

    def __init__(self, args: argparse.Namespace, workdir: Path, bootstrap: str, spark: Any) -> None:
        self.args, self.workdir, self.bootstrap, self.spark = args, workdir, bootstrap, spark
        self.tag = f"trust-{int(time.time()) % 100000}"
        self.port = free_port()  # every run of the job serves here: Prometheus' one target
        self.prometheus = LocalPrometheus(workdir / "prometheus", [f"127.0.0.1:{self.port}"])
        self.admin = Admin(bootstrap)
        self.load = RepartitionLoad(self.admin, kafka_version(), f"{self.tag}-streams", workdir / "streams",
                                    rate=args.rate)
        self.report = Report()

    def job(self, name: str, *extra: str) -> Monitor:
        """The job on checkpoint ``name``, at its defaults but for ``extra``; returned once it is ready."""
        monitor = start_monitor(self.spark, self.bootstrap, self.workdir / name, "--metrics-port", str(self.port),
                                "--cluster", "soak", "--include-groups", f"^{self.tag}-.*", *default_cadence(),
                                *extra)
        started = time.monotonic()
        wait_for(monitor, lambda s: value(s, "rebalance_monitor_ready") == 1, "the job to be ready", timeout=600)
        self.report.note(f"job {name} {' '.join(extra)} ready in {time.monotonic() - started:.0f}s")
        return monitor

    def series(self, expr: str) -> dict[str, float]:
        """An instant query's values, by their labels printed (but the ones every series here shares)."""
        return {",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k not in SHARED_LABELS):
                float(r["value"][1]) for r in self.prometheus.query(expr)}

    def lost(self, since: float) -> dict[str, float]:
        """The Streams group's records_lost_total, the most each topic's reached since ``since`` (epoch s)."""
        window = f"{max(STEP_S, time.time() - since):.0f}s"
        return self.series(f'max by (topic) (max_over_time(kafka_consumergroup_records_lost_total'
                           f'{{group="{self.load.app_id}"}}[{window}]))')

    def alerts(self, group: str, since: float) -> dict[str, float]:
        """Evaluations since ``since`` at which each alert on ``group`` was pending or firing."""
        window = f"{max(STEP_S, time.time() - since):.0f}s"
        return self.series(f'sum by (alertname, alertstate) (count_over_time(ALERTS{{group="{group}"}}[{window}]))')

    def run_for(self, seconds: float, each: Callable[[float], None], until: Callable[[], bool] = bool) -> None:
        """Call ``each`` with the time every STEP_S for ``seconds``, or until ``until()`` after a call; the Streams
        load must stay up."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if not self.load.running():
                raise RuntimeError(f"the Streams app or its producer ended:\n{self.load.output.read_text()[-3000:]}")
            each(time.time())
            if until():
                return
            time.sleep(STEP_S)

    def check_streams(self, phase: str, since: float) -> None:
        lost = self.lost(since)
        self.report.check(f"{phase}: records_lost_total of the Streams group stays 0",
                          bool(lost) and all(v == 0 for v in lost.values()), f"max per topic {lost}")
        alerts = self.alerts(self.load.app_id, since)
        self.report.check(f"{phase}: no alert fires for the Streams group",
                          not any("alertstate=firing" in a for a in alerts),
                          f"evaluations pending/firing {alerts or 'none'}")
        window = f"{max(STEP_S, time.time() - since):.0f}s"
        verdicts = self.series(f'sum by (status, reason) (count_over_time(kafka_consumergroup_health'
                               f'{{group="{self.load.app_id}"}}[{window}]))')
        self.report.note(f"{phase}: the Streams group's health verdicts (scrapes each): {verdicts}")

    def streams_and_slow_committer(self) -> None:
        """Phases A and B, one job at --health-window."""
        args, slow_group = self.args, f"{self.tag}-slow"
        slow_topic, commit_s = f"{slow_group}-in", args.commit_minutes * 60
        self.admin.create_topic(slow_topic, 1)
        producer = start_producer(self.bootstrap, slow_topic, args.slow_rate)
        slow = Member(self.bootstrap, slow_group, [slow_topic], f"{slow_group}-c",
                      commit_interval_ms=int(commit_s * 1000)).start()
        monitor = self.job("job-ab", "--health-window", str(args.health_window))
        try:
            self.load.start()
            since, starts = time.time(), self.load.log_starts()
            self.report.note(f"A: Streams app {self.load.app_id} running at {args.rate:.0f} rec/s; B: {slow_group} "
                             f"committing every {commit_s:.0f}s")
            commits: list[float] = []  # when the slow group's committed offset was seen to move
            verdicts: list[tuple[float, str]] = []
            last_offsets: dict[Any, int] = {}

            def watch(now: float) -> None:
                """Record the slow group's commits (its committed offsets seen to move) and verdict."""
                offsets = self.admin.group_offsets(slow_group)
                if offsets and offsets != last_offsets:
                    commits.append(now)
                    last_offsets.clear()
                    last_offsets.update(offsets)
                health = self.series(f'kafka_consumergroup_health{{group="{slow_group}"}} == 1')
                verdicts.append((now, ",".join(sorted(health)) or "none"))

            def erred() -> bool:
                return "status=ERR" in verdicts[-1][1]

            self.run_for(args.streams_minutes * 60, watch)
            ends = self.load.log_starts()
            moved = {p: ends[p] - starts[p] for p in starts}
            self.report.check("A: the repartition topic's log start moves", all(m > 0 for m in moved.values()),
                              f"moved by {moved} records per partition in {args.streams_minutes:.0f} min")
            self.check_streams("A", since)
            committing = [(t - since, v) for t, v in verdicts if "status=ERR" in v]
            self.report.check("B: the slow committer is never ERR while it commits",
                              not committing and len(commits) >= 2,
                              f"commits seen at {[round(t - since) for t in commits]}s; "
                              f"verdicts {sorted({v for _, v in verdicts})}; ERR at {committing or 'never'}")
            slow.crash()
            killed = time.time()
            self.report.note(f"B: {slow_group}'s consumer killed")
            self.run_for(2 * commit_s + 2 * STEP_S, watch, until=erred)
            last_commit = commits[-1] if commits else killed
            found = verdicts[-1][0] if erred() else None
            self.report.check(f"B: ERR within two commit intervals ({2 * commit_s:.0f}s) of the stop",
                              found is not None and found - killed <= 2 * commit_s + STEP_S,
                              f"ERR {'never' if found is None else f'{found - killed:.0f}s after the kill, '}"
                              f"{'' if found is None else f'{found - last_commit:.0f}s after the last commit seen'} "
                              f"({verdicts[-1][1]}); last commit seen {killed - last_commit:.0f}s before the kill")
            self.report.note(f"B: alerts on {slow_group}: {self.alerts(slow_group, since) or 'none'}")
        finally:
            monitor.stop()
            slow.crash()
            producer.terminate()
            producer.wait(30)

    def capped_restart(self) -> None:
        """Phase C: a fresh checkpoint, --max-offsets-per-trigger, a restart half way."""
        since, half = time.time(), self.args.restart_minutes * 30
        cap = ("--max-offsets-per-trigger", str(self.args.max_offsets))
        for run in ("first", "restarted"):
            monitor = self.job("job-c", *cap)
            try:
                self.run_for(half, lambda now: None)
                self.report.note(f"C: {run} run: {self.lost(since) or 'no'} records_lost_total so far")
            finally:
                monitor.stop()
            if run == "first":
                time.sleep(RESTART_GAP_S)  # the app commits and purges on while the job is down
        self.check_streams("C", since)


@contextlib.contextmanager
def cluster(bootstrap: str | None, workdir: Path) -> Iterator[str]:
    """The cluster given, or a local broker for the run."""
    if bootstrap is not None:
        yield bootstrap
        return
    broker = LocalKafka(workdir / "kafka")
    print(f"broker {broker.version} ready in {broker.start():.1f}s", flush=True)
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-server", default=None, help="use this cluster instead of a local broker")
    parser.add_argument("--rate", type=float, default=40, help="records/s into the Streams app")
    parser.add_argument("--streams-minutes", type=float, default=10)
    parser.add_argument("--commit-minutes", type=float, default=3, help="the slow committer's commit interval")
    parser.add_argument("--slow-rate", type=float, default=2, help="records/s into the slow committer's topic")
    parser.add_argument("--health-window", type=float, default=120, help="the job's --health-window in A and B")
    parser.add_argument("--max-offsets", type=int, default=200, help="--max-offsets-per-trigger in C")
    parser.add_argument("--restart-minutes", type=float, default=6, help="C's length, restarted half way")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trust-soak-") as tmp, \
            cluster(args.bootstrap_server, Path(tmp)) as bootstrap:
        spark = spark_session(parse_args(["--bootstrap-server", bootstrap, "--master", "local[2]"]),
                              {"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
        soak = Soak(args, Path(tmp), bootstrap, spark)
        try:
            soak.prometheus.start()
            soak.streams_and_slow_committer()
            soak.capped_restart()
        finally:
            soak.load.stop()
            soak.prometheus.stop()
            soak.admin.close()
            spark.stop()
    failed = soak.report.failed
    print(f"{'FAILED: ' + '; '.join(failed) if failed else 'all checks passed'} "
          f"({(time.monotonic() - started) / 60:.1f} min)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
