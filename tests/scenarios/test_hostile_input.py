"""A million hostile records through the real job: counted by reason, never fatal, valid records still applied.

Kafka refuses produce requests to ``__consumer_offsets``, so the records go to an ordinary
topic the job reads with ``--topic``. Each hostile form is built to be bad in a known way; the
reason each should get is what :func:`decoders.decode` (checked against Kafka's own classes in
tests/unit/decoders/test_kafka_oracle.py) says, and for the forms built to fail in one way the generator
also checks it is that way. The job decodes commits vectorised on the executors and group
records on the driver, so the counts it serves check both paths against that reference.

Throughput is compared with an all-valid topic of the same size read by a second job in the
same process: printed, not asserted (the machine is shared).
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.synthetic import Workload, backlog
from decoders import DecodeError, decode
from decoders.schemas import KEY_LAYOUTS, VALUE_LAYOUTS
from streaming.logs.dead_letters import DeadLetterLog
from tests.support.decoder_encoder import (
    encode_assignment,
    encode_key,
    encode_layout,
    encode_subscription,
    encode_value,
    random_fields,
    uvarint,
)
from tests.support.exposition import Samples, series, value
from tests.support.monitor_helpers import start_monitor, wait_for

pytestmark = pytest.mark.slow

HOSTILE = 1_000_000
PARTITIONS = 8
VALID_GROUPS = 5
VALID_PARTITIONS = 10
Record = tuple[bytes, bytes]


@dataclass
class Topic:
    """What was written: records by partition (a record's index is its offset), what each should do."""

    name: str
    records: list[list[Record]] = field(default_factory=lambda: [[] for _ in range(PARTITIONS)])
    reasons: dict[tuple[int, int], str] = field(default_factory=dict)  # (partition, offset) -> reason
    valid: int = 0

    def add(self, partition: int, record: Record, reason: str | None) -> None:
        if reason is None:
            self.valid += 1
        else:
            self.reasons[(partition, len(self.records[partition]))] = reason
        self.records[partition].append(record)

    @property
    def total(self) -> int:
        return sum(len(r) for r in self.records)


# --- hostile forms: each returns (key, value, the reason it is built to get or None) ----------------

Form = Callable[[random.Random], tuple[bytes, bytes, str | None]]
_UNKNOWN_TYPES = [t for t in range(-32768, 32768) if t not in KEY_LAYOUTS]


class Pools:
    """Valid keys and values of every type, to cut, corrupt or pair with garbage."""

    def __init__(self, rng: random.Random) -> None:
        self.commit_keys = [encode_key(1, {"group": f"hostile-{i % 300}", "topic": f"ht-{i % 7}", "partition": i % 50})
                            for i in range(2000)]
        self.other_keys = [encode_key(t, random_fields(rng, KEY_LAYOUTS[t].struct, False))
                           for t in sorted(KEY_LAYOUTS) if t > 1 for _ in range(40)]
        self.commit_values = [encode_value(1, v, random_fields(rng, VALUE_LAYOUTS[1][v][0].struct,
                                                               VALUE_LAYOUTS[1][v][0].flexible))
                              for v in range(5) for _ in range(100)]
        self.group_values = [encode_value(2, v, random_fields(rng, VALUE_LAYOUTS[2][v][0].struct,
                                                             VALUE_LAYOUTS[2][v][0].flexible))
                             for v in range(5) for _ in range(100)]
        self.group_keys = [encode_key(2, {"group": f"hostile-{i}"}) for i in range(300)]

    def random_bytes(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        key = struct.pack(">h", rng.choice(_UNKNOWN_TYPES)) + rng.randbytes(rng.randrange(40))
        return key, rng.randbytes(rng.randrange(1, 80)), "unknown_record_type"

    def truncated_key(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        key = rng.choice(self.commit_keys if rng.random() < 0.5 else self.other_keys)
        return key[:rng.randrange(2, len(key))], rng.choice(self.commit_values), "truncated_key"

    def truncated_value(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        if rng.random() < 0.6:
            key, value = rng.choice(self.commit_keys), rng.choice(self.commit_values)
        else:
            key, value = rng.choice(self.group_keys), rng.choice(self.group_values)
        return key, value[:rng.randrange(1, len(value))], "truncated_value"

    def length_past_end(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        """A string length larger than the bytes left: the group name of a key, or a group value's protocol type."""
        if rng.random() < 0.5:
            name = b"g" * rng.randrange(10)
            key = struct.pack(">hh", 1, len(name) + rng.randrange(1, 30000)) + name
            return key, rng.choice(self.commit_values), "truncated_key"
        version = rng.randrange(4)
        value = struct.pack(">hh", version, rng.randrange(100, 32767)) + b"consumer" + rng.randbytes(20)
        return rng.choice(self.group_keys), value, "truncated_value"

    def negative_count(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        """A GroupMetadata v3 whose (non-nullable) members array has a negative count."""
        count = rng.choice([-1, -2, -(1 << 31), -rng.randrange(1, 1 << 31)])
        return rng.choice(self.group_keys), _group_value_with_count(count), "malformed_value"

    def huge_array(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        """Arrays claiming up to billions of elements: classic members, KIP-848 subscribed topics."""
        if rng.random() < 0.5:
            return rng.choice(self.group_keys), _group_value_with_count(rng.randrange(1000, 2_000_000_000)), \
                "truncated_value"
        key = encode_key(5, {"groupId": f"hostile-{rng.randrange(300)}", "memberId": "m"})
        # ConsumerGroupMemberMetadata v0 (flexible): null instanceId and rackId, clientId, clientHost,
        # then the subscribed topic names' compact array count
        value = (struct.pack(">h", 0) + uvarint(0) + uvarint(0) + uvarint(2) + b"c" + uvarint(2) + b"h"
                 + uvarint(rng.randrange(1 << 20, 1 << 31)) + b"x" * 8)
        return key, value, "truncated_value"

    def unknown_version(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        version = rng.choice([rng.randrange(5, 32768), rng.randrange(-32768, 0)])
        key = rng.choice(self.commit_keys if rng.random() < 0.6 else self.group_keys)
        return key, struct.pack(">h", version) + rng.randbytes(rng.randrange(30)), "unknown_value_version"

    def garbage_value(self, rng: random.Random) -> tuple[bytes, bytes, str | None]:
        """A valid key of any type with random bytes for a value: the reference decoder says why it is bad."""
        key = rng.choice(self.commit_keys if rng.random() < 0.6 else self.other_keys)
        raw = rng.randbytes(rng.randrange(1, 120))
        if rng.random() < 0.5:  # a known version, so the body's layout is read and found wanting
            raw = struct.pack(">h", rng.randrange(5 if key[1] < 3 else 1)) + raw
        return key, raw, None


def _group_value_with_count(count: int) -> bytes:
    head = encode_layout(VALUE_LAYOUTS[2][3][0], {"protocolType": "consumer", "generation": 1, "protocol": "range",
                                                  "leader": "m", "currentStateTimestamp": 0, "members": ()})
    return struct.pack(">h", 3) + head[:-4] + struct.pack(">i", count) + b"\x00" * 16


FORMS: dict[str, float] = {  # form -> share of the hostile records
    "random_bytes": 0.20, "truncated_key": 0.10, "truncated_value": 0.15, "length_past_end": 0.10,
    "negative_count": 0.05, "huge_array": 0.05, "unknown_version": 0.10, "garbage_value": 0.25,
}


def hostile_records(rng: random.Random, count: int) -> Iterator[tuple[bytes, bytes, str]]:
    """``count`` undecodable records in the given shares, each with the reason it should be counted under.

    Garbage values get the reference decoder's reason (and one that happens to decode is drawn
    again); the other forms get the reason they are built for, which the reference decoder
    confirms on every 20th of them (all of them would double the generation time).
    """
    pools = Pools(rng)
    forms: list[Form] = [getattr(pools, name) for name in FORMS]
    for i, form in enumerate(rng.choices(forms, list(FORMS.values()), k=count)):
        while True:
            key, raw, reason = form(rng)
            if reason is not None and i % 20:
                break
            result = decode(key, raw)
            if isinstance(result, DecodeError):
                assert reason in (None, result.reason), (form.__name__, result.reason, result.detail)
                reason = result.reason
                break
            assert reason is None, f"{form.__name__} built a decodable record: {key!r} {raw!r}"
        yield key, raw, reason


# --- valid records ------------------------------------------------------------------------------------


@dataclass
class Expected:
    """The state the valid records leave: generations, members' client ids, committed offsets."""

    generations: dict[str, int] = field(default_factory=dict)
    client_ids: dict[str, set[str]] = field(default_factory=dict)
    offsets: dict[tuple[str, str, str], float] = field(default_factory=dict)


def _member(group: str, m: int, generation: int, topic: str, client_id: bytes) -> dict:
    return {"memberId": f"{group}-m{m}-g{generation}", "groupInstanceId": None, "clientId": client_id.decode("latin-1"),
            "clientHost": f"/10.1.0.{m}", "rebalanceTimeout": 300000, "sessionTimeout": 45000,
            "subscription": encode_subscription(1, {"topics": (topic,), "userData": None, "ownedPartitions": ()}),
            "assignment": encode_assignment(1, {"assignedPartitions": (
                {"topic": topic, "partitions": tuple(range(m, VALID_PARTITIONS, 2))},), "userData": None})}


def group_metadata(group: str, generation: int, topic: str, now_ms: int) -> tuple[bytes, set[str]]:
    """A two-member classic group; the second member's client id carries an invalid UTF-8 byte.

    Kafka (Java's ``new String``) reads it as U+FFFD, and so does the decoder: a valid record.
    """
    ids = [b"client-ok", b"client-\xff-bad"]
    value = encode_value(2, 3, {"protocolType": "consumer", "generation": generation, "protocol": "range",
                                "leader": f"{group}-m0-g{generation}", "currentStateTimestamp": now_ms,
                                "members": tuple(_member(group, m, generation, topic, _placeholder(m))
                                                 for m in range(2))})
    for m, client_id in enumerate(ids):  # same length as the placeholder, so every length prefix holds
        value = value.replace(_placeholder(m), client_id.ljust(16, b"_"))
    return value, {client_id.ljust(16, b"_").decode("utf-8", "replace") for client_id in ids}


def _placeholder(m: int) -> bytes:
    return b"CLIENT%d" % m + b"x" * 9


def _commit_key(group: bytes, topic: str, partition: int) -> bytes:
    """A commit key written by hand, so the group name can hold bytes that are not UTF-8."""
    return struct.pack(">hh", 1, len(group)) + group + struct.pack(">h", len(topic)) + topic.encode() \
        + struct.pack(">i", partition)


def valid_records(rng: random.Random, now_ms: int, expected: Expected) -> Iterator[tuple[int, Record]]:
    """Generations and commits of a few groups (each on its own partition, in order), and
    commits of groups whose names hold invalid UTF-8."""
    for g in range(VALID_GROUPS):
        group, topic, partition = f"valid-{g}", f"valid-topic-{g}", g % PARTITIONS
        for generation in range(1, 4):
            raw, client_ids = group_metadata(group, generation, topic, now_ms)
            yield partition, (encode_key(2, {"group": group}), raw)
            expected.generations[group], expected.client_ids[group] = generation, client_ids
            for p in range(VALID_PARTITIONS):
                for _ in range(rng.randrange(1, 20)):
                    offset = int(expected.offsets.get((group, topic, str(p)), 0)) + rng.randrange(1, 100)
                    yield partition, (encode_key(1, {"group": group, "topic": topic, "partition": p}),
                                      encode_value(1, 3, {"offset": offset, "leaderEpoch": -1, "metadata": "",
                                                          "commitTimestamp": now_ms}))
                    expected.offsets[(group, topic, str(p))] = offset
    for g in range(3):
        raw_group = b"utf8-\xff\xfe-" + str(g).encode()
        for p in range(4):
            offset = 1000 + g * 10 + p
            yield PARTITIONS - 1, (_commit_key(raw_group, "valid-topic-0", p),
                                   encode_value(1, 1, {"offset": offset, "metadata": "", "commitTimestamp": now_ms,
                                                       "expireTimestamp": -1}))
            expected.offsets[(raw_group.decode("utf-8", "replace"), "valid-topic-0", str(p))] = offset


def hostile_topic(name: str, now_ms: int, expected: Expected) -> Topic:
    rng = random.Random(20261122)
    topic = Topic(name)
    valid = list(valid_records(rng, now_ms, expected))
    # valid records spread evenly through the hostile ones, each partition's in their order
    every = HOSTILE // len(valid)
    pending = iter(valid)
    for i, (key, raw, reason) in enumerate(hostile_records(rng, HOSTILE)):
        topic.add(rng.randrange(PARTITIONS), (key, raw), reason)
        if i % every == 0:
            found = next(pending, None)
            if found is not None:
                topic.add(found[0], found[1], None)
    for partition, record in pending:
        topic.add(partition, record, None)
    return topic


def produce(bootstrap: str, topic: Topic) -> float:
    """Write every partition's records in order (idempotent producer: the n-th record is offset n)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 50,
                         "batch.size": 1 << 20, "batch.num.messages": 100000, "compression.type": "lz4",
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1 << 20})
    started = time.monotonic()
    for partition, records in enumerate(topic.records):
        for key, raw in records:
            while True:
                try:
                    producer.produce(topic.name, value=raw, key=key, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left unsent"
    return time.monotonic() - started


def drain(spark, bootstrap: str, workdir: Path, topic: str, total: int) -> tuple[object, Samples, float]:
    """Run the job on ``topic`` until every record is either counted or an error; the seconds it took."""
    started = time.monotonic()
    job = start_monitor(spark, bootstrap, workdir, "--topic", topic)

    def seen(s: Samples) -> float:
        return sum(series(s, "rebalance_monitor_records_total").values()) + sum(
            series(s, "rebalance_monitor_decode_errors_total").values())

    samples = wait_for(job, lambda s: seen(s) >= total, f"{total} records of {topic}", timeout=300)
    return job, samples, time.monotonic() - started


def test_a_million_hostile_records(spark, kafka_broker, admin, tmp_path, unique, capsys):
    expected = Expected()
    started = time.monotonic()
    topic = hostile_topic(f"hostile-{unique}", int(time.time() * 1000), expected)
    generated = time.monotonic() - started
    admin.create_topic(topic.name, PARTITIONS)
    produced = produce(kafka_broker.bootstrap, topic)
    bad = Counter(topic.reasons.values())
    assert sum(bad.values()) == HOSTILE

    job, samples, hostile_seconds = drain(spark, kafka_broker.bootstrap, tmp_path / "hostile", topic.name, topic.total)
    try:
        # a later trigger finds nothing new: nothing is counted twice
        drained_at = time.time()
        samples = wait_for(job, lambda s: (value(s, "rebalance_monitor_last_batch_timestamp_seconds") or 0)
                           > drained_at, "an idle trigger after the drain")
        assert job.query.isActive and job.query.exception() is None
    finally:
        job.stop()

    errors = {dict(labels)["reason"]: v
              for labels, v in series(samples, "rebalance_monitor_decode_errors_total").items()}
    assert errors == dict(bad)
    assert sum(series(samples, "rebalance_monitor_records_total").values()) == topic.valid
    # every valid record applied, nothing of the hostile ones
    for group, generation in expected.generations.items():
        assert value(samples, "kafka_consumergroup_generation", group=group) == generation
        assert value(samples, "kafka_consumergroup_current_members", group=group) == 2
        clients = {dict(labels)["client_id"] for labels in
                   series(samples, "kafka_consumergroup_member_assigned_partitions", group=group)}
        assert clients == expected.client_ids[group]
    committed = {(d["group"], d["topic"], d["partition"]): v for labels, v in
                 series(samples, "kafka_consumergroup_committed_offset").items() for d in [dict(labels)]}
    assert committed == expected.offsets
    assert {dict(labels)["group"] for labels in series(samples, "kafka_consumergroup_generation")} == set(
        expected.generations)

    # a bounded sample of the bad records, each exactly as written
    letters = DeadLetterLog(tmp_path / "hostile" / "checkpoint" / "monitor" / "dead-letters", "", 0).read().to_pylist()
    assert 0 < len(letters) <= 1000
    for row in letters:
        assert row["topic"] == topic.name
        p, o = row["kafka_partition"], row["kafka_offset"]
        assert (row["key"], row["value"]) == topic.records[p][o]
        assert row["reason"] == topic.reasons[(p, o)]
    printed = subprocess.run([str(Path(sys.executable).with_name("rebalance-monitor")), "dead-letters",
                              "--checkpoint-dir", str(tmp_path / "hostile" / "checkpoint"), "--limit", "5"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert len(printed) == 5
    last = letters[-1]
    assert printed[-1].startswith(f"{topic.name}-{last['kafka_partition']}@{last['kafka_offset']} ")
    assert f"{last['reason']}: key={last['key'].hex()} value={last['value'].hex()}" in printed[-1]

    # normal speed: an all-valid topic of the same size, same process, fresh checkpoint
    normal = f"all-valid-{unique}"
    admin.create_topic(normal, PARTITIONS)
    shape = Workload(groups=1000, partitions=50, records=topic.total, generation_every=500,
                     topic_partitions=PARTITIONS)
    from benchmarks.synthetic import produce as produce_records

    produce_records(kafka_broker.bootstrap, normal, backlog(shape, int(time.time() * 1000)))
    job, _, valid_seconds = drain(spark, kafka_broker.bootstrap, tmp_path / "valid", normal, topic.total)
    job.stop()
    with capsys.disabled():
        print(f"\nhostile input: {topic.total} records ({HOSTILE} bad, {topic.valid} valid) generated in "
              f"{generated:.1f}s, produced in {produced:.1f}s; decode errors {dict(sorted(bad.items()))}; "
              f"{len(letters)} dead letters kept\n"
              f"job drain: hostile {hostile_seconds:.1f}s ({topic.total / hostile_seconds:,.0f} rec/s), all valid "
              f"{valid_seconds:.1f}s ({topic.total / valid_seconds:,.0f} rec/s): hostile at "
              f"{valid_seconds / hostile_seconds:.2f}x normal speed")
