"""Faults on real parts: the driver SIGKILLed mid-batch again and again, the broker taken away, a Spark
standalone cluster losing a worker, a stop signal during a large catch-up.

Each test compares the job with Kafka's own view of the groups (``__consumer_offsets`` read and decoded)
and, where the job was disturbed, with a clean job run afterwards from an empty checkpoint over the same
topic: the strongest oracle there is for "nothing lost, nothing counted twice".
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks.synthetic import Workload, backlog, produce
from streaming.groups.store import StateStore, last_committed_batch
from testbed.broker import LocalKafka
from testbed.prometheus import fast_rules
from testbed.workload import Admin, leave_all, start_members, wait_balanced, wait_until
from tests.conftest import PROMETHEUS_MAJORS, prometheus_tool
from tests.support.exposition import Samples, series, value
from tests.support.fault_helpers import (
    REPO,
    Churn,
    JobProcess,
    RecordingMember,
    SparkCluster,
    batch_ids,
    caught_up,
    clean_run,
    count_events,
    group_series,
    kafka_view,
    kill_mid_batch,
)

pytestmark = pytest.mark.slow

KILLS = 5
# How a member left is inferred from its last commit before the departure: a clean job reading
# everything in one catch-up batch must classify as the killed one that read it as it happened.
DEPARTURES = "kafka_consumergroup_member_departures_total"


def event_content(events: list) -> list[tuple]:
    """What an event says, without where it was written (run and batch ids differ between jobs)."""
    return sorted((e.group, e.old_generation, e.new_generation, tuple(e.members_joined), tuple(e.members_left),
                   tuple(e.causes or ()), e.partitions_moved) for e in events)


# The faulted job folds in either place; the oracle is always a clean job with the driver fold.
FOLDS = [pytest.param([], id="driver-fold"), pytest.param(["--fold", "state-store"], id="state-store-fold")]


@pytest.mark.parametrize("fold", FOLDS)
def test_driver_sigkill_mid_batch_repeatedly(kafka_broker, admin: Admin, unique: str, tmp_path,
                                             fold: list[str]) -> None:
    """Kill the driver (SIGKILL, whole process group) at random points of batches while two groups
    churn, restart from the same checkpoint each time: every rebalance lands in the event log exactly
    once, and the gauges and counters equal a clean job's (driver fold) over the same topic."""
    seed = int(time.time())
    rng = random.Random(seed)
    prefix = f"faults-kill-{unique}"
    topic = f"{prefix}-t"
    admin.create_topic(topic, 4)
    groups = [f"{prefix}-a", f"{prefix}-b"]
    churn = Churn(kafka_broker.bootstrap, topic, groups, seed)
    args = ["--include-groups", f"^{prefix}-", "--cluster", "faults", "--master", "local[2]"]
    job = JobProcess(tmp_path / "killed", kafka_broker.bootstrap, [*args, *fold])
    mid_batch: list[bool] = []
    try:
        churn.start_anchors()
        churn.start()
        job.start()
        for _ in range(KILLS):
            mid_batch.append(kill_mid_batch(job, rng, max_delay=1.5))
            job.start()
        churn.stop()
        view = kafka_view(admin, groups)
        killed = job.wait(caught_up(view, groups), "every record of the groups after the last restart")
        job.stop()
    finally:
        churn.stop()
        if job.running:
            job.kill()
    clean, clean_events = clean_run(tmp_path / "clean", kafka_broker.bootstrap, args, view, groups)

    events = job.event_log.read()
    counted = count_events(events, view, groups)
    print(f"\nseed {seed}: {len(mid_batch)} kills survived ({sum(mid_batch)} mid-batch), {churn.steps} churn steps; "
          f"{counted}")
    assert sum(mid_batch) >= 1, "no kill landed inside a batch"
    assert (counted.duplicated, counted.missing, counted.unexpected) == (0, [], []), counted
    for group in groups:
        baseline = view.generations[group][0]
        logged = {e.new_generation for e in events if e.group == group}
        assert churn.seen(group) - {baseline} <= logged, (group, sorted(churn.seen(group)), sorted(logged))
    assert counted.expected >= KILLS, "too little churn to mean anything"
    killed_series, clean_series = group_series(killed, groups), group_series(clean, groups)
    departures = {k: (killed_series.get(k), clean_series.get(k))
                  for k in {*killed_series, *clean_series} if k[0] == DEPARTURES}
    print("departures by how (killed, clean):",
          {(dict(ls)["group"][-1], dict(ls)["how"]): v for (_, ls), v in sorted(departures.items())})
    assert killed_series == clean_series
    assert event_content(events) == event_content(clean_events)


@pytest.fixture
def own_broker(tmp_path) -> Iterator[LocalKafka]:
    """A broker of the test's own (the session's stays up): this one is stopped and started again."""
    broker = LocalKafka(tmp_path / "kafka")
    broker.start()
    yield broker
    broker.stop()


def test_broker_outage_recovers_without_restart(own_broker: LocalKafka, tmp_path) -> None:
    """The broker stops for longer than many trigger intervals while a group has lag and the job runs;
    a member dies meanwhile and a new one joins once the broker is back. The same job process records
    every rebalance, lag comes back, and its own metrics show the outage: batches stop (MonitorStalled,
    evaluated by promtool on the scraped values, fires) and log-end poll errors rise. The query itself
    never fails: between batches Spark's offset reader waits for the broker (see docs/reliability.md)."""
    admin = Admin(own_broker.bootstrap)
    group, topic = "outage-g", "outage-t"
    admin.create_topic(topic, 4)
    admin.produce(topic, 400)  # a backlog: the members' lag is real
    crew = [RecordingMember(own_broker.bootstrap, group, [topic], f"outage-c{i}", process_delay_ms=200)
            for i in range(2)]
    job = JobProcess(tmp_path / "job", own_broker.bootstrap,
                     ["--include-groups", f"^{group}$", "--cluster", "outage", "--master", "local[2]"])
    sampler = Sampler(job)
    try:
        start_members(crew)
        wait_balanced(crew, [(topic, p) for p in range(4)])
        job.start()
        # The scrape that shows the group and its lag is the "before": a sampler just started may
        # not have scraped yet (seen on a loaded machine).
        before = job.wait(lambda s: value(s, "kafka_consumergroup_generation", group=group) == crew[0].generation
                          and bool(series(s, "kafka_consumergroup_partition_lag", group=group))
                          # A batch seen by the progress gauge, not only by the sink: a first batch longer than
                          # the stall threshold left the gauge at the job's start, and MonitorStalled true here.
                          and time.time() - (value(s, "rebalance_monitor_last_batch_timestamp_seconds") or 0) < 5,
                          "the group, its lag and a fresh last-batch gauge")
        sampler.start()
        down_at = time.time()
        own_broker.stop()
        gone_at = time.time()  # controlled shutdown takes a few seconds
        crew[1].crash()  # gone while the broker is down: the session expires once it is back
        stalled = job.wait(lambda s: time.time() - gone_at >= OUTAGE_SECONDS
                           and poll_errors(s) > poll_errors(before), "poll errors while the broker is down",
                           timeout=OUTAGE_SECONDS + 60)
        stalled_at = time.time()
        own_broker.start()
        up_at = time.time()
        recovered = job.wait(lambda s: (value(s, "rebalance_monitor_last_batch_timestamp_seconds") or 0) > up_at,
                             "a batch after the outage", timeout=180)
        recovered_in = value(recovered, "rebalance_monitor_last_batch_timestamp_seconds") - up_at
        crew.append(RecordingMember(own_broker.bootstrap, group, [topic], "outage-c2", process_delay_ms=200).start())
        # A kafka-python client may give up while the broker is away (seen on 3.9.2): the rest carry on.
        survivors = [m for m in crew if m.running]
        wait_balanced(survivors, [(topic, p) for p in range(4)], timeout=180)
        after = job.wait(lambda s: value(s, "kafka_consumergroup_generation", group=group) == survivors[0].generation
                         and (value(s, "rebalance_monitor_log_end_poll_timestamp_seconds") or 0) > up_at
                         and bool(series(s, "kafka_consumergroup_partition_lag", group=group)),
                         "the rebalances around the outage and fresh lag")
        sampler.stop()
        leave_all(survivors)
        view = kafka_view(admin, [group])
        job.wait(caught_up(view, [group]), "every record of the group")
        assert job.starts == 1 and job.running, "the job was restarted or died"
        restarts = value(after, "rebalance_monitor_query_restarts_total")
        last_batch_before = value(before, "rebalance_monitor_last_batch_timestamp_seconds")
    finally:
        sampler.stop()
        leave_all(m for m in crew if m.running)
        if job.running:
            job.stop()
        admin.close()

    counted = count_events(job.event_log.read(), view, [group])
    outage = up_at - gone_at
    # How old the last-batch gauge got once the job had recovered (idle triggers refresh it too).
    staleness = max((t - last for t, last in sampler.samples if last is not None and t > up_at + recovered_in + 5),
                    default=float("nan"))
    print(f"\nbroker down {outage:.0f}s; outage recovered in {recovered_in:.1f}s (first batch after the broker "
          f"was back); log-end poll errors {poll_errors(before):.0f} -> {poll_errors(stalled):.0f}; "
          f"members that gave up during the outage: {len(crew) - 1 - len(survivors)}; query restarts {restarts:.0f}; "
          f"last-batch gauge at most {staleness:.1f}s old after recovery; {counted}")
    assert (counted.duplicated, counted.missing, counted.unexpected) == (0, [], []), counted
    assert counted.expected >= 2, view  # the dead member's expiry and the newcomer's join
    seen = set().union(*(m.seen for m in crew))
    assert seen - {view.generations[group][0]} <= {e.new_generation for e in job.event_log.read()}
    assert value(stalled, "rebalance_monitor_last_batch_timestamp_seconds") <= gone_at + 2 * TRIGGER_SECONDS
    assert last_batch_before is not None and poll_errors(stalled) > poll_errors(before)
    assert all(v >= 0 for v in series(after, "kafka_consumergroup_partition_lag", group=group).values())
    # Evaluated while the broker was still down: at up_at itself a batch 0.1 s after the broker came back
    # can already be in that second's sample.
    # One outage, the alert evaluated by each Prometheus major's promtool.
    for major in PROMETHEUS_MAJORS:
        fired = monitor_stalled(prometheus_tool("promtool", major), tmp_path, sampler.samples, stall_seconds=10,
                                at=(down_at - 1, stalled_at, sampler.samples[-1][0]))
        assert fired == [False, True, False], (major, fired)
    assert restarts == 0, job.tail()


def test_failing_batches_restart_the_query_in_process(kafka_broker, admin: Admin, unique: str, tmp_path) -> None:
    """The event log's volume fails while two groups churn (its directory turns into a file, so every write
    fails as on a full or read-only disk): each batch fails after the group stage has folded it in memory,
    and the query with it. The same job process goes on serving /metrics and starts the query again from
    its checkpoint, waiting longer each time; once the volume is back, the events and series equal a clean
    job's: the batch the failures held back is neither lost nor counted twice. No counter any scrape showed
    ever stepped back, restarts and re-run batches included (this failure comes before the batch publishes
    anything; tests/unit/driver/test_sink.py covers a batch that published and was then not committed)."""
    prefix = f"faults-disk-{unique}"
    topic = f"{prefix}-t"
    admin.create_topic(topic, 4)
    groups = [f"{prefix}-a", f"{prefix}-b"]
    churn = Churn(kafka_broker.bootstrap, topic, groups, seed=int(time.time()))
    args = ["--include-groups", f"^{prefix}-", "--cluster", "faults", "--master", "local[2]",
            "--query-retry-seconds", "600"]
    job = JobProcess(tmp_path / "job", kafka_broker.bootstrap, args)
    scrapes: list[Samples] = []

    def keeping(check: Callable[[Samples], bool]) -> Callable[[Samples], bool]:
        return lambda samples: scrapes.append(samples) is None and check(samples)

    events_dir = job.workdir / "events"
    saved = events_dir.with_name("events.saved")
    try:
        churn.start_anchors()
        churn.start()
        job.start()
        job.wait(keeping(lambda s: all(value(s, "kafka_consumergroup_generation", group=g) for g in groups)),
                 "both groups")
        wait_until(lambda: churn.steps >= 2 and events_dir.exists(), 60, "rebalances in the event log")
        events_dir.rename(saved)
        events_dir.write_text("the volume failed\n")
        failing = job.wait(keeping(lambda s: (value(s, "rebalance_monitor_query_restarts_total") or 0) >= 3),
                           "three restarts of the failing query", timeout=120)
        steps_while_failing = churn.steps
        events_dir.unlink()
        saved.rename(events_dir)
        wait_until(lambda: churn.steps >= steps_while_failing + 2, 60, "churn after the volume is back")
        churn.stop()
        view = kafka_view(admin, groups)
        recovered = job.wait(keeping(caught_up(view, groups)), "every record of the groups", timeout=240)
        assert job.starts == 1 and job.running, "the job was restarted or died"
        job.stop()
    finally:
        churn.stop()
        if job.running:
            job.kill()
    clean, clean_events = clean_run(tmp_path / "clean", kafka_broker.bootstrap, args, view, groups)

    events = job.event_log.read()
    counted = count_events(events, view, groups)
    log_text = job.log.read_text(errors="replace")
    failures = log_text.count("streaming query failed; starting it again")
    print(f"\n{failures} query failures while the volume was gone, "
          f"{value(recovered, 'rebalance_monitor_query_restarts_total'):.0f} restarts; {churn.steps} churn steps; "
          f"{counted}")
    assert failures >= 3 and "NotADirectoryError" in log_text, job.tail()
    assert value(failing, "kafka_consumergroup_generation", group=groups[0]), "/metrics went dark meanwhile"
    assert (counted.duplicated, counted.missing, counted.unexpected) == (0, [], []), counted
    assert event_content(events) == event_content(clean_events)
    assert group_series(recovered, groups) == group_series(clean, groups)
    assert not counters_stepping_back(scrapes), counters_stepping_back(scrapes)


def counters_stepping_back(scrapes: list[Samples]) -> list[str]:
    """Every counter series (``*_total``) whose value went down from one scrape to a later one."""
    last: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    found = []
    for samples in scrapes:
        for key, number in samples.items():
            if key[0].endswith("_total"):
                if number < last.get(key, number):
                    found.append(f"{key[0]}{dict(key[1])}: {last[key]} -> {number}")
                last[key] = number
    return found


OUTAGE_SECONDS = 20
TRIGGER_SECONDS = 1


def poll_errors(samples: Samples) -> float:
    return sum(series(samples, "rebalance_monitor_log_end_poll_errors_total").values())


class Sampler(threading.Thread):
    """Scrapes the job every second: (time, last-batch timestamp) for the alert evaluation."""

    def __init__(self, job: JobProcess) -> None:
        super().__init__(daemon=True, name="sampler")
        self.job = job
        self.samples: list[tuple[float, float | None]] = []
        self._latest: Samples = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            scraped = self.job.scrape()
            if scraped is not None:
                self._latest = scraped
            last = value(scraped, "rebalance_monitor_last_batch_timestamp_seconds") if scraped else None
            self.samples.append((time.time(), last))
            self._stop_event.wait(1)

    def latest(self) -> Samples:
        wait_until(lambda: bool(self._latest), 30, "a scrape")
        return self._latest

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(10)


def monitor_stalled(promtool: str, workdir: Path, samples: list[tuple[float, float | None]], stall_seconds: int,
                    at: tuple[float, ...]) -> list[bool]:
    """Whether the shipped MonitorStalled expression (threshold cut to ``stall_seconds``) returns a series
    at the times ``at``, evaluated by promtool over the scraped last-batch timestamps.

    promtool's clock starts at 0, so times and values are shifted by the first scrape's time; the
    expression only compares differences."""
    rules = fast_rules(workdir / "rules.yml", "0s", stall_seconds)
    expr = re.search(r"- alert: MonitorStalled\n\s+expr: \|\n(.*?)\n\s+for:", rules.read_text(), re.S).group(1)
    t0 = samples[0][0]
    grid: dict[int, float | None] = {}
    for t, last in samples:
        grid[int(t - t0)] = None if last is None else last - t0
    values = " ".join("_" if grid.get(s) is None else f"{grid[s]:.3f}" for s in range(max(grid) + 1))
    tests = [{"eval_time": f"{max(0, int(t - t0))}s", "expr": f"count({expr.strip()})",
              "exp_samples": [{"labels": "{}", "value": 1}]} for t in at]
    results = []
    for test in tests:
        spec = {"rule_files": [str(rules)], "evaluation_interval": "1s",
                "tests": [{"interval": "1s", "input_series": [
                    {"series": 'rebalance_monitor_last_batch_timestamp_seconds{cluster="outage"}', "values": values}],
                    "promql_expr_test": [test]}]}
        path = workdir / "stalled_test.yml"
        path.write_text(json.dumps(spec))
        results.append(subprocess.run([promtool, "test", "rules", str(path)], capture_output=True).returncode == 0)
    return results


@pytest.mark.parametrize("fold", FOLDS)
def test_standalone_cluster_loses_a_worker(kafka_broker, admin: Admin, unique: str, tmp_path,
                                           fold: list[str]) -> None:
    """The job submitted with deploy/spark-submit to a standalone master with two one-core workers; one
    worker is SIGKILLed (with its executor) mid-stream while groups churn. The query goes on with the
    survivor, and the event log and series equal a clean local job's (driver fold) over the same topic.
    With the state-store fold, both workers hold state store instances before the kill."""
    seed = int(time.time())
    rng = random.Random(seed)
    prefix = f"faults-cluster-{unique}"
    topic = f"{prefix}-t"
    admin.create_topic(topic, 4)
    groups = [f"{prefix}-a", f"{prefix}-b"]
    churn = Churn(kafka_broker.bootstrap, topic, groups, seed)
    args = ["--include-groups", f"^{prefix}-", "--cluster", "faults"]
    cluster = SparkCluster(tmp_path / "spark")
    job = JobProcess(tmp_path / "cluster-job", kafka_broker.bootstrap, [*args, *fold],
                     command=[str(REPO / "deploy" / "spark-submit")],
                     env={"SPARK_MASTER": cluster.url, "SPARK_SUBMIT_ARGS": CLUSTER_SUBMIT_ARGS,
                          "SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        cluster.start()
        churn.start_anchors()
        churn.start()
        job.start()
        wait_until(lambda: cluster.app_cores() == 2 or not job.running, 180, "an executor on each worker")
        job.wait(lambda s: all(value(s, "kafka_consumergroup_generation", group=g) for g in groups),
                 "both groups from the cluster's executors")
        if fold:  # the state split: each worker's executor holds some of the 50 state partitions
            stores = {name: len(state_stores(cluster, name)) for name in ("worker-0", "worker-1")}
            assert all(stores.values()), stores
        mid_batch = kill_worker_mid_batch(job, cluster, rng)
        killed_at = time.time()
        rebalances = churn.steps
        wait_until(lambda: churn.steps >= rebalances + 4, 60, "churn after the kill")
        job.wait(lambda s: (value(s, "rebalance_monitor_last_batch_timestamp_seconds") or 0) > time.time() - 2,
                 "batches on the surviving worker")
        assert len(cluster.alive_workers()) == 1 and cluster.app_cores() == 1, cluster.state()
        churn.stop()
        view = kafka_view(admin, groups)
        on_cluster = job.wait(caught_up(view, groups), "every record of the groups")
        assert job.stop() < 60, f"slow stop:\n{job.tail()}"
    finally:
        churn.stop()
        if job.running:
            job.kill()
        cluster.stop()
    clean, clean_events = clean_run(tmp_path / "clean", kafka_broker.bootstrap, [*args, "--master", "local[2]"],
                                    view, groups)

    events = job.event_log.read()
    counted = count_events(events, view, groups)
    print(f"\nseed {seed}: worker-1 killed {killed_at - job.started_at:.0f}s after the job started "
          f"({'mid-batch' if mid_batch else 'between batches'}), {churn.steps} churn steps; {counted}")
    assert (counted.duplicated, counted.missing, counted.unexpected) == (0, [], []), counted
    assert event_content(events) == event_content(clean_events)
    on_cluster_series, clean_series = group_series(on_cluster, groups), group_series(clean, groups)
    for series_ in (on_cluster_series, clean_series):
        for key in [k for k in series_ if k[0] == DEPARTURES]:
            del series_[key]
    assert on_cluster_series == clean_series


def state_stores(cluster: SparkCluster, worker: str) -> list[Path]:
    """The state store instances (RocksDB, one per state partition) a worker's executor opened."""
    return [d for d in cluster.local_dir(worker).rglob("StateStoreId*") if d.is_dir()]


# Small executors: a one-core worker with 1g runs one of them.
CLUSTER_SUBMIT_ARGS = "--executor-memory 512m --executor-cores 1 --conf spark.ui.enabled=false"


def kill_worker_mid_batch(job: JobProcess, cluster: SparkCluster, rng: random.Random) -> bool:
    """SIGKILL worker-1 (and its executor) a random moment after the job plans a batch; whether that
    batch was still running."""
    first, _ = batch_ids(job.checkpoint)
    wait_until(lambda: (batch_ids(job.checkpoint)[0] or -1) > (first or -1), 120, "a new batch")
    planned, _ = batch_ids(job.checkpoint)
    time.sleep(rng.uniform(0, 0.5))
    _, committed = batch_ids(job.checkpoint)
    cluster.kill("worker-1")
    return committed is None or committed < planned


def test_sigterm_during_a_large_catch_up_stops_within_30s(kafka_broker, admin: Admin, unique: str, tmp_path) -> None:
    """SIGTERM to the driver while its first batch reads a 3,000,000-record backlog, with a 1 s drain
    (--stop-drain-seconds; the batch takes several times that even on a fast machine): the batch is
    cancelled, Spark sees a stop (not a failure, no StackOverflowError in its error regex), the job
    exits 0 within 30 s, and the checkpoint holds the planned batch uncommitted, to be run again."""
    topic = f"faults-backlog-{unique}"
    admin.create_topic(topic, 50)
    # 3 M records: a quiet machine drains 1 M in about 9 s (a fast one in 4 s), past the 1 s + 1 s
    # before the cancel. With the default 10 s drain a fast machine finished the batch inside it.
    shape = Workload(groups=200, partitions=50, records=3_000_000, generation_every=500)
    produce(kafka_broker.bootstrap, topic, backlog(shape, int(time.time() * 1000)))
    job = JobProcess(tmp_path / "job", kafka_broker.bootstrap,
                     ["--topic", topic, "--master", "local[2]", "--stop-drain-seconds", "1"]).start()
    try:
        wait_until(lambda: batch_ids(job.checkpoint)[0] == 0 or not job.running, 120, "the catch-up batch")
        time.sleep(1)  # into the batch: reading and decoding
        assert batch_ids(job.checkpoint) == (0, None), "the catch-up batch ended before the signal"
        took = job.stop(signal.SIGTERM, timeout=90)
    finally:
        if job.running:
            job.kill()
    log = job.log.read_text(errors="replace")
    print(f"\nSIGTERM mid catch-up: exited {job.process.returncode} after {took:.1f}s")
    assert "StackOverflowError" not in log
    assert took < 30 and job.process.returncode == 0, job.tail()
    assert batch_ids(job.checkpoint) == (0, None), "the batch ended within the drain: nothing was cancelled"
    # Interrupted in the collect, the sink logs the cancellation; interrupted in Spark's own read or
    # after the fold, nothing is logged: either way never as a failed batch.
    assert "batch 0 failed" not in log, job.tail()
    print(f"cancelled inside the sink's collect: {'batch 0 cancelled' in log}")
    stage = StateStore(job.checkpoint / "monitor" / "state").load(last_committed_batch(job.checkpoint / "spark"))
    assert stage.groups == set()  # nothing of the cancelled batch applied: it runs again on restart
