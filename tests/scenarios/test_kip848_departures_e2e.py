"""KIP-848 departures on a real broker: 20 members killed and 20 closed, and a job restart between.

Real confluent-kafka members (``group.protocol=consumer``, auto-commit every second on a topic that
keeps receiving records, so commits land at any moment relative to heartbeats) in four groups, each
kept non-empty by an anchor member. The groups' own session timeout (4 s, set with Kafka's
``kafka-configs --entity-type groups``) is well below the brokers' (10 s): a crash is fenced about
4 s after its last heartbeat, a gap the brokers' value would read as a clean leave, so only the
group's value classifies it right. Each phase kills 10 members (most right after a commit of theirs,
the others at random moments) and closes 10; between the phases the job process is stopped and
started again on its checkpoint. Kafka is the oracle: its records give each departure's times and
the groups' target epochs, its consumer-groups tool who is left.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from streaming.groups.boundary import fence_threshold_ms
from streaming.protocol import GroupTimeouts
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, Partition, RateProducer, start_members, wait_balanced, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.fault_helpers import JobProcess
from tests.support.kip848_departures import CommitWatcher, GroupRecords, describe_configs, set_group_config, trails
from tests.support.lag_helpers import describe_members

pytestmark = pytest.mark.slow

GROUPS = 4
PER_GROUP = 5  # members that go, per group and phase
KILLS = (3, 2, 3, 2)  # of them killed, per group: 10 kills and 10 closes a phase
PARTITIONS = 12
GROUP_SESSION_MS = 4_000
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
COUNTERS = ("kafka_consumergroup_member_departures_total", "kafka_consumergroup_rebalance_causes_total",
            "kafka_consumergroup_rebalances_total", "kafka_consumergroup_empty_transitions_total")


@dataclass
class Exit:
    """How one member goes, ``delay`` s into the phase: killed (right after one of its commits, or
    not) or closed; ``owned`` and ``at_ms`` are its partitions and the wall time when it went."""

    member: Member
    killed: bool
    after_commit: bool
    delay: float
    owned: frozenset[Partition] = frozenset()
    at_ms: int = 0

    def run(self, watcher: CommitWatcher) -> None:
        time.sleep(self.delay)
        self.owned = self.member.assignment
        if self.killed and self.after_commit:
            watcher.wait_commit(self.member.group, self.owned, timeout=5)
        self.at_ms = int(time.time() * 1000)
        if self.killed:
            self.member.crash()
        else:
            self.member.leave()

    def __str__(self) -> str:
        how = ("killed after a commit" if self.after_commit else "killed") if self.killed else "closed"
        return f"{self.member.client_id} ({self.member.member_id}) {how} at {self.at_ms}"


def _departures(samples: Samples, group: str) -> dict[str, float]:
    return {dict(labels)["how"]: v
            for labels, v in series(samples, "kafka_consumergroup_member_departures_total", group=group).items()}


def _counted(samples: Samples, groups: Iterable[str]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The groups' record-derived counters: what a restart must neither lose nor count twice."""
    wanted = set(groups)
    return {(name, labels): v for name in COUNTERS for labels, v in series(samples, name).items()
            if dict(labels)["group"] in wanted}


def _wait_committed(admin: Admin, groups: list[str], partitions: list[Partition]) -> None:
    """Every partition's committed offset moved since now: each owner has committed what it owns."""
    before = {g: admin.group_offsets(g) for g in groups}
    wait_until(lambda: all(admin.group_offsets(g).get(tp) not in (None, before[g].get(tp))
                           for g in groups for tp in partitions), 30, "every owner's first commit")


def _phase(wave: int, bootstrap: str, admin: Admin, topic: str, anchors: dict[str, Member],
           members: list[Member], rng: random.Random) -> list[Exit]:
    """Start 5 members per group, wait until they own and have committed, then end them all at once."""
    parts = [(topic, p) for p in range(PARTITIONS)]
    crew = {g: [Member(bootstrap, g, [topic], f"{g}-w{wave}-{i}", protocol="consumer") for i in range(PER_GROUP)]
            for g in anchors}
    members.extend(m for ms in crew.values() for m in ms)
    for member in members[-GROUPS * PER_GROUP:]:
        member.start()
    for group, ms in crew.items():
        wait_balanced([anchors[group], *ms], parts)
    _wait_committed(admin, list(anchors), parts)
    exits = [Exit(m, i < kills, i < kills and i % 2 == 0, rng.uniform(0, 3))
             for ms, kills in zip(crew.values(), KILLS, strict=True) for i, m in enumerate(ms)]
    watcher = CommitWatcher(bootstrap, anchors)
    watcher.start()
    try:
        threads = [threading.Thread(target=e.run, args=(watcher,), name=e.member.client_id) for e in exits]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        watcher.stop()
    return exits


def _check_phase(job: JobProcess, kafka: LocalKafka, admin: Admin, anchors: dict[str, Member], exits: list[Exit],
                 wave: int, thresholds: tuple[int, int]) -> Samples:
    """The job's departure classes against what was done, Kafka's records and Kafka's tool."""
    groups = list(anchors)
    expected = {g: {"session_timeout": kills * wave, "left_cleanly": (PER_GROUP - kills) * wave}
                for g, kills in zip(groups, KILLS, strict=True)}
    samples = job.wait(lambda s: all(sum(_departures(s, g).values()) >= sum(expected[g].values()) for g in groups),
                       f"phase {wave}'s departures")
    records: dict[str, GroupRecords] = {
        g: trails(admin, g, {e.member.member_id or "": e.owned for e in exits if e.member.group == g}) for g in groups}
    sequence = "\n".join(f"{e}: {records[e.member.group].trails.get(e.member.member_id or '')}" for e in exits)
    assert {g: _departures(samples, g) for g in groups} == expected, sequence

    # Kafka's records: every crash's gap reaches the group's threshold but not the brokers' (a rule on the
    # brokers' timeout would call it a clean leave), every close's is below the group's.
    group_threshold, broker_threshold = thresholds
    for e in exits:
        trail = records[e.member.group].trails.get(e.member.member_id or "")
        assert trail is not None and trail.gap_ms is not None, sequence
        if e.killed:
            assert group_threshold <= trail.gap_ms < broker_threshold, sequence
        else:
            assert trail.gap_ms < group_threshold, sequence

    # Kafka's tool: only the anchors are left. Its target epochs: one rebalance per epoch after the first.
    with ThreadPoolExecutor(GROUPS) as pool:
        left = dict(zip(groups, pool.map(lambda g: set(describe_members(kafka.bootstrap, g)), groups), strict=True))
    assert left == {g: {anchors[g].client_id} for g in groups}
    rebalances = {g: len(set(records[g].target_epochs)) - 1 for g in groups}
    samples = job.wait(lambda s: {g: value(s, "kafka_consumergroup_rebalances_total", group=g) for g in groups}
                       == rebalances, f"phase {wave}'s rebalances, one per target epoch")
    assert all(value(samples, "kafka_consumergroup_current_members", group=g) == 1 for g in groups)
    assert not series(samples, "kafka_consumergroup_rebalance_causes_total", cause="unknown")
    return samples


def test_kip848_kills_and_closes_are_classified_by_the_groups_session_timeout_across_a_restart(
        kafka_broker: LocalKafka, admin: Admin, members: list[Member], unique: str, kip848: None,
        tmp_path: Path) -> None:
    seed = int(time.time())
    rng = random.Random(seed)
    prefix = f"kip848-dep-{unique}"
    topic, groups = f"{prefix}-t", [f"{prefix}-g{i}" for i in range(GROUPS)]
    job = JobProcess(tmp_path / "job", kafka_broker.bootstrap,
                     ["--include-groups", f"^{prefix}-", "--cluster", "kip848", "--master", "local[2]"]).start()
    producer = RateProducer(kafka_broker.bootstrap, [topic], rate=100)
    try:
        # The groups' own session timeout, set before they exist (the job reads it when it first folds them).
        with ThreadPoolExecutor(GROUPS) as pool:
            list(pool.map(lambda g: set_group_config(kafka_broker.bootstrap, g, {SESSION: GROUP_SESSION_MS}), groups))
        assert describe_configs(kafka_broker.bootstrap, "groups", groups[0]) == {SESSION: str(GROUP_SESSION_MS)}
        brokers = describe_configs(kafka_broker.bootstrap, "brokers", "1", everything=True)
        heartbeat = int(brokers[f"group.{HEARTBEAT}"])
        broker_session = int(brokers[f"group.{SESSION}"])
        thresholds = (fence_threshold_ms(GroupTimeouts(GROUP_SESSION_MS, heartbeat)),
                      fence_threshold_ms(GroupTimeouts(broker_session, heartbeat)))
        assert thresholds[0] < thresholds[1], f"the brokers' session timeout {broker_session} ms must be larger"

        admin.create_topic(topic, PARTITIONS)
        producer.start()
        anchors = {g: Member(kafka_broker.bootstrap, g, [topic], f"{g}-anchor", protocol="consumer") for g in groups}
        members.extend(anchors.values())
        start_members(anchors.values())
        job.wait(lambda s: all(value(s, "kafka_consumergroup_current_members", group=g) == 1 for g in groups),
                 "the anchored groups")

        exits = _phase(1, kafka_broker.bootstrap, admin, topic, anchors, members, rng)
        samples = _check_phase(job, kafka_broker, admin, anchors, exits, 1, thresholds)

        # Restart: the job stops (SIGTERM) and starts again on its checkpoint; once it has folded new
        # records (the anchors' commits) its counters are the ones it stopped with.
        before = _counted(samples, groups)
        commits = {g: value(samples, "kafka_consumergroup_offset_commits_total", group=g) or 0 for g in groups}
        job.stop()
        job.start()
        restarted = job.wait(lambda s: all((value(s, "kafka_consumergroup_offset_commits_total", group=g) or 0)
                                           > commits[g] for g in groups), "the restarted job's first new records")
        assert _counted(restarted, groups) == before

        exits += _phase(2, kafka_broker.bootstrap, admin, topic, anchors, members, rng)
        samples = _check_phase(job, kafka_broker, admin, anchors, exits, 2, thresholds)
        totals = {how: sum(_departures(samples, g).get(how, 0) for g in groups)
                  for how in ("session_timeout", "left_cleanly")}
        assert totals == {"session_timeout": 20, "left_cleanly": 20}, f"seed {seed}"
    finally:
        producer.stop()
        job.stop()
