"""KIP-848 departures as Kafka itself writes and tells them, for tests to hold the job's classes against.

``set_group_config`` and ``describe_configs`` run Kafka's own ``kafka-configs`` on a GROUP entity;
``trails`` reads a group's records from ``__consumer_offsets`` and gives, per removed member, the
three times the departure rule reads (last commit on its partitions, last record Kafka wrote while
handling its heartbeat, its subscription tombstone) and the group's target-assignment epochs;
``CommitWatcher`` notices a group's commits as they land, so a member can be killed right after one;
``FenceWatcher`` notices a member's removal as it lands, so a paused member can be resumed right after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from decoders import Record, coordinator_partition, decode
from decoders.records import RecordType
from testbed.broker import run_kafka_tool
from testbed.workload import Admin, Partition

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def set_group_config(bootstrap: str, group: str, configs: dict[str, int]) -> None:
    """``kafka-configs --alter --entity-type groups``: the group's own settings (Kafka 4.0+); the group
    need not exist yet."""
    pairs = ",".join(f"{name}={value}" for name, value in configs.items())
    result = run_kafka_tool(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, "--alter", "--entity-type", "groups",
                                             "--entity-name", group, "--add-config", pairs])
    assert result.returncode == 0, result.stderr


def describe_configs(bootstrap: str, entity_type: str, name: str, everything: bool = False) -> dict[str, str]:
    """``kafka-configs --describe``: the settings set on the entity itself, or with ``everything`` all
    of them (``--all``: defaults and static broker settings too), as the tool prints them."""
    result = run_kafka_tool(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, "--describe", "--entity-type",
                                             entity_type, "--entity-name", name, *(["--all"] if everything else [])])
    assert result.returncode == 0, result.stderr
    # "  consumer.session.timeout.ms=4000 sensitive=false synonyms={...}"
    return dict(line.split()[0].split("=", 1) for line in result.stdout.splitlines()
                if line.startswith("  ") and "=" in line.split()[0])


@dataclass(frozen=True)
class Trail:
    """What the records show of one removed member: its subscription tombstone ``removed_ms``, the
    last commit on the partitions it reported owning ``commit_ms`` and the last member record Kafka
    wrote for it before the tombstone ``active_ms`` (None: none)."""

    member_id: str
    removed_ms: int
    commit_ms: int | None
    active_ms: int | None

    @property
    def gap_ms(self) -> int | None:
        """Removal minus the later of its last commit and last member record: what the rule compares."""
        seen = [t for t in (self.commit_ms, self.active_ms) if t is not None]
        return self.removed_ms - max(seen) if seen else None

    def __str__(self) -> str:
        return (f"{self.member_id}: commit {self.commit_ms}, member record {self.active_ms}, "
                f"tombstone {self.removed_ms}, gap {self.gap_ms} ms")


@dataclass(frozen=True)
class GroupRecords:
    """One group's trail: removed members by member id, target-assignment epochs in log order."""

    trails: dict[str, Trail]
    target_epochs: list[int]


def trails(admin: Admin, group: str, owned: dict[str, Iterable[Partition]]) -> GroupRecords:
    """Read ``group``'s coordinator partition to its end; ``owned``: member id -> the partitions it
    reported owning when it went (its last commit is the latest on those, before its tombstone)."""
    partition = coordinator_partition(group, len(admin.partitions("__consumer_offsets")))
    commits: dict[Partition, list[int]] = {}
    active: dict[str, int] = {}
    removed: dict[str, int] = {}
    epochs: list[int] = []
    for raw in admin.read_all("__consumer_offsets", [partition]):
        record = decode(raw.key, raw.value)
        if not isinstance(record, Record) or record.group != group:
            continue
        kind, at = record.record_type, raw.timestamp
        if kind == RecordType.OFFSET_COMMIT and record.value is not None:
            commits.setdefault((record.key["topic"], record.key["partition"]), []).append(at)
        elif kind in (RecordType.CONSUMER_GROUP_MEMBER_METADATA, RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT):
            member = record.key["memberId"]
            if record.value is not None and member not in removed:
                active[member] = at
            elif record.value is None and kind == RecordType.CONSUMER_GROUP_MEMBER_METADATA:
                removed.setdefault(member, at)
        elif kind == RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA and record.value is not None:
            epochs.append(record.value["assignmentEpoch"])
    found = {}
    for member, partitions in owned.items():
        if member not in removed:
            continue
        gone = removed[member]
        last = max((t for tp in partitions for t in commits.get(tp, []) if t <= gone), default=None)
        found[member] = Trail(member, gone, last, active.get(member))
    return GroupRecords(found, epochs)


class CommitWatcher(threading.Thread):
    """Polls groups' committed offsets (OffsetFetch, every ``interval`` s) so a caller can wait for the
    next commit on some partitions and act within about one interval of it."""

    def __init__(self, bootstrap: str, groups: Iterable[str], interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="commit-watcher")
        self.admin, self.groups, self.interval = Admin(bootstrap), list(groups), interval
        self._offsets: dict[tuple[str, Partition], int] = {}
        self._changed = threading.Condition()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            seen = {(g, tp): offset for g in self.groups for tp, offset in self.admin.group_offsets(g).items()}
            with self._changed:
                self._offsets = seen
                self._changed.notify_all()

    def offsets(self, group: str, partitions: Iterable[Partition]) -> dict[Partition, int | None]:
        with self._changed:
            return {tp: self._offsets.get((group, tp)) for tp in partitions}

    def wait_commit(self, group: str, partitions: Iterable[Partition], timeout: float) -> bool:
        """Wait until one of ``partitions``' committed offsets moves; whether it did within ``timeout``."""
        partitions = list(partitions)
        before = self.offsets(group, partitions)
        deadline = time.monotonic() + timeout
        with self._changed:
            while time.monotonic() < deadline:
                self._changed.wait(max(0.0, deadline - time.monotonic()))
                if {tp: self._offsets.get((group, tp)) for tp in partitions} != before:
                    return True
        return False

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:
            self.join(10)
        self.admin.close()


class FenceWatcher(threading.Thread):
    """Tails the groups' partitions of ``__consumer_offsets`` and notes each member's subscription
    tombstone (its removal: a fence, or a leave) as it lands, so a paused member can be resumed
    within milliseconds of its fence, before the other members' next heartbeats."""

    def __init__(self, bootstrap: str, groups: Iterable[str]) -> None:
        super().__init__(daemon=True, name="fence-watcher")
        self.bootstrap, self.groups = bootstrap, set(groups)
        self._removed: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._ready = threading.Event()

    def _event(self, member_id: str) -> threading.Event:
        with self._lock:
            return self._removed.setdefault(member_id, threading.Event())

    def run(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 exclude_internal_topics=False, fetch_max_wait_ms=10)
        try:
            count = len(consumer.partitions_for_topic("__consumer_offsets") or [])
            partitions = {coordinator_partition(g, count) for g in self.groups}
            tps = [TopicPartition("__consumer_offsets", p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_end(*tps)
            for tp in tps:
                consumer.position(tp)
            self._ready.set()
            while not self._stop_event.is_set():
                for batch in consumer.poll(timeout_ms=50).values():
                    for raw in batch:
                        record = decode(raw.key, raw.value)
                        if (isinstance(record, Record) and record.group in self.groups and record.value is None
                                and record.record_type == RecordType.CONSUMER_GROUP_MEMBER_METADATA):
                            self._event(str(record.key["memberId"])).set()
        finally:
            self._ready.set()
            consumer.close()

    def start_tailing(self, timeout: float = 30) -> FenceWatcher:
        self.start()
        self._ready.wait(timeout)
        return self

    def wait_removed(self, member_id: str, timeout: float) -> bool:
        """Wait until ``member_id``'s subscription tombstone is written; whether it was within ``timeout``."""
        return self._event(member_id).wait(timeout)

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:
            self.join(10)
