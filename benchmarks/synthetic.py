"""Synthetic ``__consumer_offsets``-format traffic for the job benchmark, written with the project's encoder.

Kafka refuses produce requests to the real offsets topic, so the benchmark writes the same
bytes to an ordinary topic with the same partition count, each group on the partition the
coordinator would use (``coordinator_partition``), and runs the job with ``--topic``.

Workload shapes (docs/benchmarks.md): each group commits offsets for ``partitions`` partitions
of its own topic in round-robin order, and every ``generation_every`` commits a new generation
(a classic GroupMetadata v3 record, two range members) is written, as a busy cluster would.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from decoders import coordinator_partition
from tests.support.decoder_encoder import encode_assignment, encode_key, encode_subscription, encode_value

Record = tuple[int, bytes, bytes]  # (partition of the topic, key, value)


@dataclass(frozen=True)
class Workload:
    groups: int
    partitions: int  # partitions of each group's own topic
    records: int  # in all, commits and group records
    generation_every: int  # commits per group between generations (0: one generation, up front)
    topic_partitions: int = 50

    def group(self, i: int) -> str:
        return f"bench-group-{i}"

    def topic(self, i: int) -> str:
        return f"bench-topic-{i}"


W1 = Workload(groups=1000, partitions=50, records=1_000_000, generation_every=500)
W1_5M = Workload(groups=1000, partitions=50, records=5_000_000, generation_every=500)
W2 = Workload(groups=100_000, partitions=10, records=1_100_000, generation_every=0)
W3 = Workload(groups=300_000, partitions=10, records=3_300_000, generation_every=0)  # W2 three times over
WORKLOADS = {"w1": W1, "w1-5m": W1_5M, "w2": W2, "w3": W3}


def group_metadata(workload: Workload, i: int, generation: int, now_ms: int) -> bytes:
    """A stable classic group of two range members splitting the group's topic."""
    topic = workload.topic(i)
    halves = [list(range(0, workload.partitions, 2)), list(range(1, workload.partitions, 2))]
    members = []
    for m, owned in enumerate(halves):
        member_id = f"consumer-{i}-{m}-{generation}"
        members.append({
            "memberId": member_id, "groupInstanceId": None, "clientId": f"consumer-{m}", "clientHost": f"/10.0.0.{m}",
            "rebalanceTimeout": 300000, "sessionTimeout": 45000,
            "subscription": encode_subscription(1, {"topics": (topic,), "userData": None, "ownedPartitions": ()}),
            "assignment": encode_assignment(1, {"assignedPartitions": ({"topic": topic, "partitions": tuple(owned)},),
                                               "userData": None}),
        })
    return encode_value(2, 3, {"protocolType": "consumer", "generation": generation, "protocol": "range",
                               "leader": members[0]["memberId"], "currentStateTimestamp": now_ms,
                               "members": tuple(members)})


class CommitEncoder:
    """Offset-commit values v3, the fixed part packed once: only the offset and time change."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str, int], bytes] = {}

    def key(self, group: str, topic: str, partition: int) -> bytes:
        found = self._keys.get((group, topic, partition))
        if found is None:
            found = self._keys[(group, topic, partition)] = encode_key(
                1, {"group": group, "topic": topic, "partition": partition})
        return found

    @staticmethod
    def value(offset: int, now_ms: int) -> bytes:
        return encode_value(1, 3, {"offset": offset, "leaderEpoch": -1, "metadata": "", "commitTimestamp": now_ms})


def backlog(workload: Workload, now_ms: int, first_commit: int = 0) -> Iterator[Record]:
    """The workload's records in write order: groups interleaved, as a cluster writes them.

    ``first_commit`` continues an earlier backlog (steady load after a drained one): offsets
    and generations carry on from where a backlog of that many commits per group ended.
    """
    commits = CommitEncoder()
    value_cache: dict[int, bytes] = {}
    every = workload.generation_every
    per_group = [first_commit] * workload.groups
    generations = [(first_commit + every - 1) // every if every else int(first_commit > 0)] * workload.groups
    written = 0
    homes = [coordinator_partition(workload.group(i), workload.topic_partitions) for i in range(workload.groups)]
    i = 0
    while written < workload.records:
        group = workload.group(i)
        count = per_group[i]
        if count == 0 or (every and count % every == 0):
            generations[i] += 1
            yield homes[i], encode_key(2, {"group": group}), group_metadata(workload, i, generations[i], now_ms)
            written += 1
        partition = count % workload.partitions
        offset = count // workload.partitions + 1
        value = value_cache.get(offset)
        if value is None:
            value = value_cache[offset] = commits.value(offset, now_ms)
        yield homes[i], commits.key(group, workload.topic(i), partition), value
        per_group[i] = count + 1
        written += 1
        i = (i + 1) % workload.groups


def produce(bootstrap: str, topic: str, records: Iterator[Record], rate: float | None = None,
            seconds: float | None = None) -> int:
    """Write ``records`` with confluent-kafka, at most ``rate`` per second and for at most ``seconds``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "lz4"})
    started = time.monotonic()
    sent = 0
    for partition, key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        if sent % 10000 == 0:
            producer.poll(0)
            if seconds is not None and time.monotonic() - started >= seconds:
                break
            if rate:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    producer.flush(120)
    return sent


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.synthetic --bootstrap-server B --topic T --workload w1 [--rate R --seconds S]``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w1")
    parser.add_argument("--records", type=int, default=None, help="override the workload's record count")
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--first-commit", type=int, default=0, help="continue a backlog of this many commits per group")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    if args.records is not None:
        workload = Workload(workload.groups, workload.partitions, args.records, workload.generation_every)
    sent = produce(args.bootstrap_server, args.topic, backlog(workload, int(time.time() * 1000), args.first_commit),
                   args.rate, args.seconds)
    print(f"sent {sent}", file=sys.stderr)


if __name__ == "__main__":
    main()
