"""Lag as fresh as Kafka's own tool, under load, at the default settings.

A producer (Kafka's own ProducerPerformance, its own JVM) writes 100 records/s to one partition.
One group's only member stopped polling after its first commits, so it falls 100 records/s
behind; another keeps up, committing every second. The job runs with its default trigger,
poll interval and scrape-time refresh. Each round scrapes /metrics, runs
``kafka-consumer-groups --describe`` for both groups, and scrapes again:

* the falling group's lag from Kafka's tool lies within 50 records of the range our two scrapes
  bracket (its lag only grows; a scrape finding log ends older than --lag-max-age-seconds has them
  fetched first);
* its lag in seconds is within 3 s of the true age, at scrape time, of the record at its committed
  offset (read independently);
* the group keeping up reads what Kafka's tool reads, give or take the one commit (a second, 100
  records) that can fall between the tool's read and our scrape, and is not above it more often than
  below (the median of ours - Kafka's is at most half a commit): a scrape also fetches the committed
  offsets of groups that commit, which the job otherwise learns a trigger and a batch late; and it
  never reads lag 0 while Kafka's tool says it is behind.

The figures are printed (docs/benchmarks.md quotes them beside kminion's and klag-exporter's).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from kafka.errors import KafkaError

from streaming.job import Monitor
from streaming.options import parse_args
from testbed.broker import java_command, kafka_version
from testbed.workload import Admin, Member, wait_until
from tests.support.exposition import Samples, value
from tests.support.lag_helpers import describe_groups, record_timestamp
from tests.support.monitor_helpers import scrape, wait_for

RATE = 100
ROUNDS = 8
MAX_OFFSET_GAP = 50
MAX_SECONDS_GAP = 3.0
MAX_STEADY_GAP = RATE + 20  # the consumer commits every second: one commit can land between the two reads
MAX_STEADY_BIAS = RATE // 2  # the median of ours - Kafka's: half a commit


def _producer(bootstrap: str, topic: str) -> subprocess.Popen[bytes]:
    args = ["--topic", topic, "--num-records", str(RATE * 600), "--record-size", "64", "--throughput", str(RATE),
            "--producer-props", f"bootstrap.servers={bootstrap}", "linger.ms=0"]
    return subprocess.Popen(java_command(kafka_version(), "org.apache.kafka.tools.ProducerPerformance", args,
                                         tools=True), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _lag(samples: Samples, group: str, topic: str) -> float | None:
    return value(samples, "kafka_consumergroup_partition_lag", group=group, topic=topic, partition="0")


def _age(samples: Samples, group: str) -> float | None:
    return value(samples, "kafka_consumergroup_partition_lag_seconds", group=group, method="timestamp")


def _committed(admin: Admin, group: str, topic: str) -> int:
    try:
        return admin.group_offsets(group).get((topic, 0), 0)
    except KafkaError:  # the coordinator is still loading (the offsets topic may be new)
        return 0


def _bracket_gap(tool: float, before: float, after: float) -> float:
    """How far Kafka's figure lies outside the range our scrapes before and after it bracket."""
    low, high = min(before, after), max(before, after)
    return max(0.0, low - tool, tool - high)


@pytest.mark.slow
def test_lag_as_fresh_as_kafkas_tool_under_load(spark, kafka_broker, admin: Admin, members, unique,
                                                tmp_path: Path) -> None:
    topic, falling, steady = f"fresh-{unique}", f"fresh-falling-{unique}", f"fresh-steady-{unique}"
    admin.create_topic(topic, 1)
    producer = _producer(kafka_broker.bootstrap, topic)
    job = None
    try:
        stuck = Member(kafka_broker.bootstrap, falling, [topic], "fresh-stuck").start()
        members.append(stuck)
        wait_until(lambda: _committed(admin, falling, topic) > 0, 60, "the first commits")
        stuck.stop_polling()
        keeper = Member(kafka_broker.bootstrap, steady, [topic], "fresh-keeper").start()
        members.append(keeper)
        wait_until(lambda: stuck.stalled and keeper.joined, 60, "one member stalled, one consuming")
        committed = admin.group_offsets(falling)[(topic, 0)]
        written = record_timestamp(kafka_broker.bootstrap, topic, 0, committed) / 1000
        options = parse_args(["--bootstrap-server", kafka_broker.bootstrap, "--checkpoint-dir",
                              str(tmp_path / "checkpoint"), "--metrics-host", "127.0.0.1", "--metrics-port", "0",
                              "--cluster", "test", "--include-groups", f"^fresh-.*-{unique}$"])
        job = Monitor(spark, options).start()
        wait_for(job, lambda s: _lag(s, falling, topic) is not None and _lag(s, steady, topic) is not None
                 and _age(s, falling) is not None, "both groups' lag, the falling one's age read from its next record",
                 timeout=120)
        offset_gaps, after_gaps, seconds_gaps, steady_pairs = [], [], [], []
        for _ in range(ROUNDS):
            scraped_at = time.time()
            before = scrape(job)
            tool = describe_groups(kafka_broker.bootstrap, [falling, steady])
            after = scrape(job)
            tool_falling = float(tool[falling][(topic, 0)][2])
            offset_gaps.append(_bracket_gap(tool_falling, _lag(before, falling, topic), _lag(after, falling, topic)))
            after_gaps.append(abs(_lag(after, falling, topic) - tool_falling))
            seconds = _age(before, falling)
            seconds_gaps.append(abs(seconds - (scraped_at - written)))
            steady_pairs.append((float(tool[steady][(topic, 0)][2]), _lag(after, steady, topic)))
        print(f"\nlag freshness at {RATE} rec/s, {ROUNDS} rounds: falling group's offset gap to Kafka's tool "
              f"max {max(offset_gaps):.0f} outside our scrapes before and after it (to the scrape right after "
              f"it: max {max(after_gaps):.0f}, median {sorted(after_gaps)[ROUNDS // 2]:.0f}); lag seconds off by "
              f"max {max(seconds_gaps):.2f}s; steady group (Kafka's tool, ours): {steady_pairs}")
        assert max(offset_gaps) <= MAX_OFFSET_GAP, offset_gaps
        assert max(seconds_gaps) <= MAX_SECONDS_GAP, seconds_gaps
        assert all(ours is not None and (ours > 0 or theirs == 0) for theirs, ours in steady_pairs), steady_pairs
        assert max(abs(ours - theirs) for theirs, ours in steady_pairs) <= MAX_STEADY_GAP, steady_pairs
        # Fresh, ours is as often below Kafka's figure as above it (the log end grows between the two reads; a commit
        # between them drops ours by about a commit); committed offsets learnt from the offsets topic, a trigger and
        # a batch late, would put ours above it by a commit or more every round.
        signed = sorted(ours - theirs for theirs, ours in steady_pairs)
        assert signed[ROUNDS // 2] <= MAX_STEADY_BIAS, steady_pairs
    finally:
        producer.kill()
        producer.wait(10)
        if job is not None:
            job.stop()
