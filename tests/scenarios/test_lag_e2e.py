"""Lag through the real job, against Kafka's own answers: its consumer-groups tool, the record
at the committed offset read by a plain consumer, and real members of which one is slow."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaProducer

from testbed.workload import Admin, Member, start_members, wait_balanced, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.lag_helpers import describe_groups, produce, record_timestamp
from tests.support.monitor_helpers import scrape, wait_for

pytestmark = pytest.mark.slow

# A consumer that joins, is assigned partitions and never commits (auto-commit off): Kafka's
# tool lists its partitions with "-" as the current offset.
NEVER_COMMITS = """
import sys, time
from kafka import KafkaConsumer
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                         enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10000)
while True:
    consumer.poll(timeout_ms=1000)
    if consumer.assignment():
        print("assigned", flush=True)
"""


@pytest.fixture
def never_committing(kafka_broker) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait(10)


def _transactions(bootstrap: str, topic: str, transactional_id: str) -> None:
    """One committed and one aborted transaction of three records each: the log holds six
    records and two markers, and a read_committed reader sees three."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    try:
        producer.init_transactions()
        for finish in (producer.commit_transaction, producer.abort_transaction):
            producer.begin_transaction()
            for _ in range(3):
                producer.send(topic, value=b"t", partition=0)
            producer.flush()
            finish()
    finally:
        producer.close()


def _disagreements(tool: dict[str, dict[tuple[str, int], tuple[str, str, str]]], samples: Samples) -> list[str]:
    """Every partition where /metrics says something other than Kafka's tool, and every
    series the tool has no row for."""
    found = []
    for group, rows in tool.items():
        ours = {(dict(ls)["topic"], int(dict(ls)["partition"])) for ls in
                {**series(samples, "kafka_consumergroup_committed_offset", group=group),
                 **series(samples, "kafka_consumergroup_partition_lag_uncommitted", group=group)}}
        if ours != set(rows):
            found.append(f"{group}: partitions exported {sorted(ours)}, tool {sorted(rows)}")
        for (topic, partition), (current, log_end, lag) in rows.items():
            labels = {"group": group, "topic": topic, "partition": str(partition)}
            end = value(samples, "kafka_topic_partition_log_end_offset", topic=topic, partition=str(partition))
            if current == "-":  # assigned, never committed: lag from the log start (0 on these topics)
                got = (None, end, value(samples, "kafka_consumergroup_partition_lag_uncommitted", **labels))
                want = (None, float(log_end), float(log_end))
            else:
                got = (value(samples, "kafka_consumergroup_committed_offset", **labels), end,
                       value(samples, "kafka_consumergroup_partition_lag", **labels))
                want = (float(current), float(log_end), float(max(0, int(lag))))
            if got != want:
                found.append(f"{group} {topic}:{partition}: exported {got}, tool {want}")
    return found


def test_every_exported_lag_equals_kafkas_tool(kafka_broker, admin: Admin, monitor, members, never_committing,
                                               unique):
    """Steady members, a group with no members, a transactional topic, a never-committed
    partition and a topic deleted and re-created with fewer partitions: once every group has
    settled, each partition's committed offset, log end and lag on /metrics are what
    ``kafka-consumer-groups --describe`` prints, and no partition is missing or extra."""
    bootstrap = kafka_broker.bootstrap
    names = {role: f"lage2e-{role}-{unique}" for role in ("steady", "idle", "txn", "fresh", "recreated")}
    admin.create_topic(names["steady"], 3)
    admin.create_topic(names["idle"], 2)
    admin.create_topic(names["txn"], 1)
    admin.create_topic(names["fresh"], 2)
    admin.create_topic(names["recreated"], 3)
    for partition in range(3):
        admin.produce(names["steady"], 10 * (partition + 1), partition=partition)
    for partition in range(2):
        admin.produce(names["idle"], 8, partition=partition)
    admin.produce(names["fresh"], 4, partition=0)
    _transactions(bootstrap, names["txn"], f"lage2e-{unique}")
    # Parked after the committed transaction: only the aborted one (and its marker) is left to read.
    parked = f"lage2e-parked-{unique}"
    admin.commit(parked, {(names["txn"], 0): 4})
    # The group with no members: a committer that never joined, one partition behind.
    admin.commit(names["idle"], {(names["idle"], 0): 5, (names["idle"], 1): 8})
    # Offsets on a topic that is then deleted (Kafka drops them) and re-created with one partition.
    admin.produce(names["recreated"], 6, partition=2)
    admin.commit(names["recreated"], {(names["recreated"], p): 2 * p for p in range(3)})
    admin.client.delete_topics([names["recreated"]])
    wait_until(lambda: names["recreated"] not in admin.client.list_topics(), 30, "the topic's deletion")
    admin.create_topic(names["recreated"], 1)
    admin.produce(names["recreated"], 3, partition=0)
    admin.commit(names["recreated"], {(names["recreated"], 0): 1})

    crew = [Member(bootstrap, names["steady"], [names["steady"]], f"steady-{i}") for i in range(2)]
    crew.append(Member(bootstrap, names["txn"], [names["txn"]], "txn-0"))
    members.extend(crew)
    start_members(crew)
    wait_balanced(crew[:2], [(names["steady"], p) for p in range(3)])
    wait_balanced(crew[2:], [(names["txn"], 0)])
    fresh = subprocess.Popen([sys.executable, "-c", NEVER_COMMITS, bootstrap, names["fresh"], names["fresh"]],
                             stdout=subprocess.PIPE, text=True)
    never_committing.append(fresh)
    assert fresh.stdout is not None and fresh.stdout.readline().strip() == "assigned"

    groups = [*names.values(), parked]
    tool = describe_groups(bootstrap, groups)

    def settled() -> bool:
        """Members have consumed and committed everything: the tool shows lag 0 for them."""
        return all(tool[names[g]] and all(lag == "0" for _, _, lag in tool[names[g]].values())
                   for g in ("steady", "txn"))

    deadline = time.monotonic() + 60
    while not settled():
        assert time.monotonic() < deadline, f"members did not catch up: {tool}"
        time.sleep(1)
        tool = describe_groups(bootstrap, groups)
    # Nothing moves from here on; the job needs a batch and a poll round (a second each) to agree.
    deadline = time.monotonic() + 60
    while problems := _disagreements(tool, scrape(monitor)):
        assert time.monotonic() < deadline, "\n".join(problems)
        time.sleep(1)
    assert describe_groups(bootstrap, groups) == tool, "the scenario moved while it was compared"
    # What the scenario is made of, as Kafka reports it.
    assert tool[names["idle"]] == {(names["idle"], 0): ("5", "8", "3"), (names["idle"], 1): ("8", "8", "0")}
    assert tool[names["txn"]] == {(names["txn"], 0): ("8", "8", "0")}  # six records, two markers
    assert tool[names["fresh"]] == {(names["fresh"], 0): ("-", "4", "-"), (names["fresh"], 1): ("-", "0", "-")}
    assert tool[names["recreated"]] == {(names["recreated"], 0): ("1", "3", "2")}
    assert tool[parked] == {(names["txn"], 0): ("4", "8", "4")}  # the tool counts aborted records as lag
    samples = scrape(monitor)
    assert value(samples, "kafka_consumergroup_total_lag", group=names["idle"]) == 3
    assert value(samples, "kafka_consumergroup_current_members", group=names["idle"]) in (None, 0)
    # ... but a read_committed consumer parked there has nothing to read: no lag in seconds, however
    # long it stays (the lookup reads read_committed: the aborted records are skipped).
    wait_for(monitor, lambda s: value(s, "kafka_consumergroup_partition_lag_seconds", group=parked,
                                      method="timestamp") == 0, "the parked group's time lag", timeout=30)


def test_time_lag_is_the_age_of_the_next_record_even_hours_back(kafka_broker, admin: Admin, monitor, unique):
    """A consumer parked for two hours (records written with explicit CreateTime in the past)
    reads two hours, far past any sampling window; a caught-up one reads 0."""
    topic, group = f"lage2e-time-{unique}", f"lage2e-time-{unique}"
    admin.create_topic(topic, 2)
    now_ms = int(time.time() * 1000)
    produce(kafka_broker.bootstrap, topic, 0, [now_ms - 7_200_000, now_ms - 5_400_000, now_ms - 60_000])
    produce(kafka_broker.bootstrap, topic, 1, [now_ms - 3_600_000])
    admin.commit(group, {(topic, 0): 1, (topic, 1): 1})

    def seconds(s: Samples, partition: int) -> float | None:
        return value(s, "kafka_consumergroup_partition_lag_seconds", group=group, topic=topic, partition=str(partition))

    samples = wait_for(monitor, lambda s: seconds(s, 0) is not None and seconds(s, 1) is not None, "time lag")
    expected = time.time() - record_timestamp(kafka_broker.bootstrap, topic, 0, 1) / 1000
    # Within one poll interval (1 s here) plus the scrape's own delay.
    assert seconds(samples, 0) == pytest.approx(expected, abs=3)
    assert seconds(samples, 0) > 5000
    assert value(samples, "kafka_consumergroup_partition_lag_seconds", group=group, topic=topic, partition="0",
                 method="timestamp") is not None
    assert seconds(samples, 1) == 0  # committed at the log end: caught up, however old the last record
    assert value(samples, "kafka_consumergroup_max_lag_seconds", group=group) == seconds(samples, 0)


def test_member_lag_points_at_the_slow_member(kafka_broker, admin: Admin, monitor, members, unique):
    """Three members, one partition each; one sleeps 5 s per poll. After a burst of records the
    two fast ones are caught up within seconds and the slow one is hundreds behind: its
    member-lag series is the one that stands out, and it is the sum of its partitions' lag."""
    topic = group = f"lage2e-slow-{unique}"
    admin.create_topic(topic, 3)
    crew = [Member(kafka_broker.bootstrap, group, [topic], f"fast-{i}", assignor="roundrobin") for i in range(2)]
    crew.append(Member(kafka_broker.bootstrap, group, [topic], "slow", assignor="roundrobin",
                       process_delay_ms=5000))
    members.extend(crew)
    start_members(crew)
    wait_balanced(crew, [(topic, p) for p in range(3)])
    slow_partition = next(iter(crew[2].assignment))[1]
    wait_for(monitor, lambda s: len(series(s, "kafka_consumergroup_member_lag", group=group)) == 3,
             "member lag series")
    for partition in range(3):
        admin.produce(topic, 1500, partition=partition)

    def by_client(s: Samples, name: str) -> dict[str, float]:
        return {dict(ls)["client_id"]: v for ls, v in series(s, name, group=group).items()}

    def slow_stands_out(s: Samples) -> bool:
        lag = by_client(s, "kafka_consumergroup_member_lag")
        return (len(lag) == 3 and lag["slow"] >= 500 and lag["fast-0"] == lag["fast-1"] == 0
                and "slow" in by_client(s, "kafka_consumergroup_member_lag_seconds"))

    samples = wait_for(monitor, slow_stands_out, "the slow member's lag to stand out", timeout=60)
    lag = by_client(samples, "kafka_consumergroup_member_lag")
    assert lag["slow"] == value(samples, "kafka_consumergroup_partition_lag", group=group, topic=topic,
                                partition=str(slow_partition))
    assert lag["slow"] == value(samples, "kafka_consumergroup_total_lag", group=group)
    seconds = by_client(samples, "kafka_consumergroup_member_lag_seconds")
    assert seconds["slow"] > 0 and seconds["slow"] == max(seconds.values())
