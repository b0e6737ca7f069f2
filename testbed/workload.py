"""Real consumer groups and producers for tests, the demo and benchmarks.

``Member`` drives one ``testbed.member`` process; ``Admin`` creates topics, adds partitions,
produces and reads offsets; ``RateProducer`` writes at a set rate so lag is real.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError

from streaming.cluster.client import forbid_topic_creation

Partition = tuple[str, int]


@dataclass
class Member:
    """A consumer-group member in its own process; see ``testbed.member``."""

    bootstrap: str
    group: str
    topics: list[str]
    client_id: str
    assignor: str = "range"  # comma-separated: the assignors the member supports, preferred first
    protocol: str = "classic"
    instance_id: str | None = None
    session_timeout_ms: int = 10000
    max_poll_interval_ms: int = 300000
    process_delay_ms: int = 0
    assign_delay_ms: int = 0
    commit_interval_ms: int = 1000  # auto-commit's interval
    more_topics: list[str] | None = None
    hold: bool = False
    assignment: frozenset[Partition] = frozenset()
    member_id: str | None = None
    generation: int | None = None
    # Classic members: every generation whose assignment this member received, in order.
    generations: list[int] = field(default_factory=list)
    stalled: bool = False
    ready: bool = False
    _process: subprocess.Popen[str] | None = None

    def start(self) -> Member:
        cmd = [sys.executable, "-m", "testbed.member", "--bootstrap-server", self.bootstrap,
               "--group", self.group, "--topics", *self.topics, "--client-id", self.client_id,
               "--protocol", self.protocol, "--assignor", *self.assignor.split(","),
               "--session-timeout-ms", str(self.session_timeout_ms),
               "--max-poll-interval-ms", str(self.max_poll_interval_ms),
               "--process-delay-ms", str(self.process_delay_ms), "--assign-delay-ms", str(self.assign_delay_ms),
               "--commit-interval-ms", str(self.commit_interval_ms)]
        if self.more_topics:
            cmd += ["--more-topics", *self.more_topics]
        if self.hold:
            cmd.append("--hold")
        if self.instance_id:
            cmd += ["--instance-id", self.instance_id]
        self._process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True, start_new_session=True)
        threading.Thread(target=self._read_events, daemon=True, name=f"member-{self.client_id}").start()
        return self

    def _read_events(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "assignment":
                    self.assignment = frozenset((t, p) for t, p in event["partitions"])
                    self.member_id = event.get("member_id") or self.member_id
                    self.generation = event.get("generation")
                elif event.get("event") == "completed":
                    self.generations.append(event["generation"])
                elif event.get("event") == "stalled":
                    self.stalled = True
                elif event.get("event") == "ready":
                    self.ready = True

    @property
    def joined(self) -> bool:
        """In the group: a classic member has a generation (kafka-python reports -1 before its
        first join), a KIP-848 member has the member id the coordinator gave it."""
        if self.protocol == "classic":
            return self.generation is not None and self.generation > 0
        return bool(self.member_id)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def leave(self, timeout: float = 30) -> None:
        """Close the consumer cleanly: it sends LeaveGroup."""
        self.send_signal(signal.SIGTERM)
        self.wait(timeout)

    def crash(self) -> None:
        """Kill the process without leaving: only the session timeout notices."""
        self.send_signal(signal.SIGKILL)
        self.wait(10)

    def stop_polling(self) -> None:
        """Stop calling poll while the heartbeat thread lives: a stuck application, which
        Kafka's client takes out of the group once max.poll.interval.ms runs out.
        ``stalled`` turns True once the poll in flight has returned."""
        self.send_signal(signal.SIGUSR1)

    def subscribe_more(self) -> None:
        """Add ``more_topics`` to the running member's subscription."""
        self.send_signal(signal.SIGUSR2)

    def release(self) -> None:
        """Let a member started with ``hold`` (and now ``ready``) join its group."""
        self.send_signal(signal.SIGUSR2)

    def send_signal(self, sig: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, sig)

    def wait(self, timeout: float) -> None:
        """Wait for the process to end; kill it if it has not ended by then."""
        if self._process is None:
            return
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            self._process.wait(10)


def leave_all(members: Iterable[Member], timeout: float = 30) -> None:
    """Ask every member to leave at once, then wait: closing them one by one takes minutes."""
    members = list(members)
    for member in members:
        member.send_signal(signal.SIGTERM)
    for member in members:
        member.wait(timeout)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def start_members(members: Iterable[Member], timeout: float = 60) -> list[Member]:
    """Start members one at a time, each once the previous one has joined.

    Forming a group one join at a time keeps every test scenario's starting point
    reproducible: with several kafka-python members joining at once, one of them was
    seen left behind in an old generation for minutes under load.
    """
    started = []
    for member in members:
        started.append(member.start())
        wait_until(partial(_joined, member), timeout, f"{member.client_id} to join {member.group}")
    return started


def wait_balanced(members: Iterable[Member], partitions: Iterable[Partition], timeout: float = 120,
                  settle: float = 1.0) -> dict[str, frozenset[Partition]]:
    """Wait until the members' assignments cover ``partitions`` exactly once, and stay so.

    Returns client id -> assigned partitions as the members themselves report them.
    """
    members = list(members)
    wanted = sorted(partitions)

    def covered() -> bool:
        # Every member has joined, all in the same generation (when the client tells it),
        # and together they own each partition exactly once.
        generations = {m.generation for m in members}
        if not all(m.joined for m in members) or len(generations) > 1:
            return False
        owned = [tp for m in members for tp in m.assignment]
        return sorted(owned) == wanted

    deadline = time.monotonic() + timeout
    while True:
        try:
            wait_until(covered, max(0.1, deadline - time.monotonic()), f"{len(members)} members to cover {wanted}")
        except TimeoutError as exc:
            state = {m.client_id: (m.running, m.generation, sorted(m.assignment)) for m in members}
            raise TimeoutError(f"{exc}; members (running, generation, assignment): {state}") from None
        snapshot = {m.client_id: m.assignment for m in members}
        time.sleep(settle)
        if covered() and snapshot == {m.client_id: m.assignment for m in members}:
            return snapshot


class Admin:
    """Topic and offset housekeeping over kafka-python's admin client."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = KafkaAdminClient(bootstrap_servers=bootstrap)
        self._producer: KafkaProducer | None = None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
        self.client.close()

    def create_topic(self, name: str, partitions: int) -> None:
        """Create ``name`` with ``partitions`` unless it exists; either way wait until it has at least that many
        (a second ``make run`` finds the demo's topics with the partitions its churn added)."""
        with contextlib.suppress(TopicAlreadyExistsError):
            self.client.create_topics([NewTopic(name, partitions, 1)])
        wait_until(lambda: len(self.partitions(name)) >= partitions, 30, f"topic {name}")

    def add_partitions(self, name: str, total: int) -> None:
        self.client.create_partitions({name: NewPartitions(total)})
        wait_until(lambda: len(self.partitions(name)) == total, 30, f"{name} to have {total} partitions")

    @contextlib.contextmanager
    def _consumer(self, **config: Any) -> Iterator[KafkaConsumer]:
        """A short-lived consumer for one look-up, always closed."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, **config)
        try:
            yield consumer
        finally:
            consumer.close()

    def partitions(self, topic: str) -> list[int]:
        with self._consumer() as consumer:
            return sorted(consumer.partitions_for_topic(topic) or [])

    def produce(self, topic: str, count: int, partition: int | None = None) -> None:
        if self._producer is None:
            # Tests delete topics this producer wrote to: its metadata refreshes must not re-create them.
            self._producer = forbid_topic_creation(KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5))
        for i in range(count):
            self._producer.send(topic, value=f"m{i}".encode(), partition=partition)
        self._producer.flush()

    def end_offsets(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        with self._consumer() as consumer:
            ends = consumer.end_offsets([TopicPartition(t, p) for t, p in partitions])
        return {(tp.topic, tp.partition): off for tp, off in ends.items()}

    def read_all(self, topic: str, partitions: Iterable[int] | None = None) -> list[Any]:
        """Every record currently in ``topic`` (internal topics included), up to its end."""
        with self._consumer(enable_auto_commit=False, isolation_level="read_committed",
                            exclude_internal_topics=False) as consumer:
            wanted = partitions if partitions is not None else consumer.partitions_for_topic(topic) or []
            tps = [TopicPartition(topic, p) for p in wanted]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            records: list[Any] = []
            deadline = time.monotonic() + 60
            while any(consumer.position(tp) < end for tp, end in ends.items()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not read {topic} to its end")
                for batch in consumer.poll(timeout_ms=500).values():
                    records.extend(batch)
        return records

    def group_offsets(self, group: str) -> dict[Partition, int]:
        offsets = self.client.list_group_offsets(group)[group]
        return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}

    def commit(self, group: str, offsets: dict[Partition, int]) -> None:
        """Commit offsets for ``group`` without joining it (a simple, manual committer)."""
        from kafka.structs import OffsetAndMetadata

        with self._consumer(group_id=group, enable_auto_commit=False) as consumer:
            consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})


class RateProducer(threading.Thread):
    """Writes to ``topics`` at about ``rate`` records/s until stopped."""

    def __init__(self, bootstrap: str, topics: list[str], rate: float) -> None:
        super().__init__(daemon=True, name="rate-producer")
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self._stop_event = threading.Event()

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20)
        try:
            interval = 1.0 / self.rate
            while not self._stop_event.is_set():
                for topic in self.topics:
                    producer.send(topic, value=b"x" * 64)
                self._stop_event.wait(interval)
        finally:
            producer.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


def _joined(member: Member) -> bool:
    return member.joined
