"""Cold start on a real ``__consumer_offsets``: the job and kminion, one at a time, on the same broker.

A fresh broker gets ``groups`` x ``partitions`` committed offsets, ``rounds`` times over, written
through OffsetCommit (the admin API's AlterConsumerGroupOffsets: one request per group and round,
every partition in it), so the offsets topic holds groups x partitions x rounds real commit records.
Each tool then starts as a fresh process and is timed until its ``/metrics`` shows the lag of every
group partition (the job also counts every commit record); peak RSS of its process tree and its
CPU seconds beside it. kminion is optional: a binary built from its source (docs/benchmarks.md says
how), run in both its scrape modes (``offsetsTopic`` reads the topic as the job does; ``adminApi``
asks the coordinator, which already holds every group's offsets in memory).
Run: ``python -m benchmarks.cold_start [--kminion PATH]``; ``make bench-job`` runs it as its ``cold`` workload.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as Errors
from kafka.structs import OffsetAndMetadata

from benchmarks.fresh_job import Run, run_fresh, series, total, watch
from testbed.broker import LocalKafka, free_port
from testbed.workload import Admin

TOPIC = "cold"
_KMINION_COMMITS = re.compile(rb"^kminion_kafka_consumer_group_offset_commits_total\{[^}]*\} (\S+)$", re.MULTILINE)
_KMINION_LAG = b"kminion_kafka_consumer_group_topic_partition_lag"
# Refusals that mean "ask again": the group's coordinator is still being elected or loading.
COORDINATOR_MOVING = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError,
                      Errors.CoordinatorLoadInProgressError)


def write_commits(bootstrap: str, groups: int, partitions: int, rounds: int, threads: int = 4) -> int:
    """Commit offsets 1..rounds for every group partition, a round at a time; the commits written."""

    def one_group(i: int) -> int:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            for offset in range(1, rounds + 1):
                offsets = {KafkaTopicPartition(TOPIC, p): OffsetAndMetadata(offset, "", -1)
                           for p in range(partitions)}
                for attempt in range(60):  # the first commit creates __consumer_offsets
                    try:
                        errors = admin.alter_group_offsets(f"cold-{i:04d}", offsets)
                    except Errors.CoordinatorNotAvailableError:
                        errors = {}
                    # While the new offsets topic's leaders settle, the commits come back refused one by one.
                    if errors and not any(e in COORDINATOR_MOVING for e in errors.values()):
                        break
                    if attempt == 59:
                        raise RuntimeError(f"cold-{i:04d}: no coordinator took the commits in 30 s: {errors}")
                    time.sleep(0.5)
                failed = {tp: e for tp, e in errors.items() if e is not Errors.NoError}
                if failed:
                    example = next(iter(failed.items()))
                    raise RuntimeError(f"cold-{i:04d}: {len(failed)} commits refused, e.g. {example}")
            return partitions * rounds
        finally:
            admin.close()

    one_group(0)  # creates the offsets topic alone, before the others ask for coordinators
    with ThreadPoolExecutor(threads) as pool:
        return partitions * rounds + sum(pool.map(one_group, range(1, groups)))


def run_kminion(binary: Path, mode: str, bootstrap: str, commits: int, partitions: int, workdir: Path) -> Run:
    """kminion until it shows the lag of ``partitions`` group partitions (and, reading the offsets topic,
    has counted every commit)."""
    port = free_port()
    env = {"KAFKA_BROKERS": bootstrap, "EXPORTER_HOST": "127.0.0.1", "EXPORTER_PORT": str(port),
           "MINION_CONSUMERGROUPS_SCRAPEMODE": mode, "MINION_CONSUMERGROUPS_GRANULARITY": "partition",
           "LOGGER_LEVEL": "warn"}

    def done(body: bytes) -> bool:
        return (series(_KMINION_LAG, body) >= partitions
                and (mode != "offsetsTopic" or total(_KMINION_COMMITS, body) >= commits))

    return watch([str(binary)], f"http://127.0.0.1:{port}/metrics", done, lambda body: series(_KMINION_LAG, body) > 0,
                 workdir, timeout=600, env=env)


def describe(runs: list[Run]) -> str:
    median = statistics.median
    return (f"{median(r.seconds for r in runs):.1f} s (runs " + ", ".join(f"{r.seconds:.1f}" for r in runs)
            + f"), first answer {median(r.first_answer for r in runs):.1f} s, peak RSS "
            f"{median(r.peak_rss for r in runs) / 2**30:.2f} GiB, {median(r.cpu_seconds for r in runs):.1f} CPU-s")


def prepare(broker: LocalKafka, groups: int, partitions: int, rounds: int) -> int:
    """The cold workload on ``broker``: the topic with its log ends, then the commits; how many were written."""
    admin = Admin(broker.bootstrap)
    admin.create_topic(TOPIC, partitions)
    for p in range(partitions):  # log ends above every committed offset
        admin.produce(TOPIC, rounds, partition=p)
    admin.close()
    started = time.monotonic()
    commits = write_commits(broker.bootstrap, groups, partitions, rounds)
    print(f"{commits:,} commits ({groups} groups x {partitions} partitions x {rounds}) written through "
          f"OffsetCommit in {time.monotonic() - started:.0f} s", flush=True)
    return commits


def measure(broker: LocalKafka, workdir: Path, commits: int, groups: int, partitions: int, repeats: int,
            kminion: Path | None) -> dict[str, list[Run]]:
    """Each tool ``repeats`` times, in turn (tool after tool, so drift falls on each alike)."""
    tools: dict[str, Callable[[Path], Run]] = {
        "job": lambda d: run_fresh(broker.bootstrap, None, commits, groups, d, partitions=groups * partitions)}
    if kminion:
        for mode in ("offsetsTopic", "adminApi"):
            tools[f"kminion {mode}"] = partial(run_kminion, kminion, mode, broker.bootstrap, commits,
                                               groups * partitions)
    runs: dict[str, list[Run]] = {name: [] for name in tools}
    for i in range(repeats):
        for name, tool in tools.items():
            run_dir = workdir / f"cold-{name.replace(' ', '-')}-{i}"
            run_dir.mkdir()
            runs[name].append(tool(run_dir))
            print(f"  {name} run {i + 1}: {describe(runs[name][-1:])}", flush=True)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kminion", type=Path, help="a kminion binary to run beside the job")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        broker = LocalKafka(Path(tmp) / "kafka", heap="1g")
        print(f"broker {broker.version} ready in {broker.start():.1f}s", flush=True)
        try:
            commits = prepare(broker, args.groups, args.partitions, args.rounds)
            runs = measure(broker, Path(tmp), commits, args.groups, args.partitions, args.repeats, args.kminion)
        finally:
            broker.stop()
    print(f"\ncold start, {args.groups} groups x {args.partitions} partitions, median of {args.repeats}:")
    for name, tool_runs in runs.items():
        print(f"  {name}: {describe(tool_runs)}")


if __name__ == "__main__":
    main()
