"""KIP-848 departures on a real broker: 20 members killed, 20 closed, 8 paused past their session and
resumed, and the job restarted (SIGTERM, then SIGKILL) between the phases.

Real confluent-kafka members (``group.protocol=consumer``, auto-commit every second on a topic that
keeps receiving records, so commits land at any moment relative to heartbeats) in four groups, each
kept non-empty by an anchor member. The groups' own session timeout (4 s, set with Kafka's
``kafka-configs --entity-type groups``) is well below the brokers' (10 s): a crash is fenced about
4 s after its last heartbeat, a gap the brokers' value would read as a clean leave, so only the
group's value classifies it right. Each phase kills 10 members (most right after a commit of theirs,
the others at random moments) and closes 10; a third phase stops 8 members (SIGSTOP, 2 per group)
for longer than the session and resumes them (SIGCONT), one per group the moment its fence lands
(back before the target moved: one rebalance), the other seconds later (two): Kafka fences each, and
the client rejoins under the same member id (KIP-1082), which counts one ``session_timeout``
departure and one join.
Between the phases the job process is stopped (SIGTERM, then SIGKILL) and started again on its
checkpoint; its counters must come back as they were. Kafka is the oracle: its records give each
departure's times and the groups' target epochs, its consumer-groups tool who is in the group.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streaming.groups.boundary import fence_threshold_ms
from streaming.protocol import GroupTimeouts, RebalanceEvent
from testbed.broker import LocalKafka
from testbed.workload import Admin, Member, Partition, RateProducer, start_members, wait_balanced, wait_until
from tests.support.exposition import Samples, series, value
from tests.support.fault_helpers import JobProcess
from tests.support.kip848_departures import (
    CommitWatcher,
    FenceWatcher,
    GroupRecords,
    describe_configs,
    set_group_config,
    trails,
)
from tests.support.lag_helpers import describe_members

pytestmark = pytest.mark.slow

GROUPS = 4
PER_GROUP = 5  # members that go, per group and phase
KILLS = (3, 2, 3, 2)  # of them killed, per group: 10 kills and 10 closes a phase
PAUSED = 2  # members stopped past the session and resumed, per group, in the third phase
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


@dataclass
class Pause:
    """One member stopped (SIGSTOP) ``delay`` s into the phase, then resumed (SIGCONT) ``seconds`` later,
    or with ``on_fence`` as soon as its removal lands (within milliseconds of the fence: it rejoins
    before the other members' next heartbeat recomputes the target, mostly); ``owned`` and ``member_id``
    are what it held and its id when stopped, ``at_ms`` and ``resumed_ms`` the wall times of the signals."""

    member: Member
    delay: float
    seconds: float
    on_fence: bool = False
    owned: frozenset[Partition] = frozenset()
    member_id: str = ""
    at_ms: int = 0
    resumed_ms: int = 0

    def run(self, fences: FenceWatcher) -> None:
        time.sleep(self.delay)
        self.owned, self.member_id = self.member.assignment, self.member.member_id or ""
        self.at_ms = int(time.time() * 1000)
        self.member.send_signal(signal.SIGSTOP)
        if self.on_fence:
            fences.wait_removed(self.member_id, self.seconds)
        else:
            time.sleep(self.seconds)
        self.resumed_ms = int(time.time() * 1000)
        self.member.send_signal(signal.SIGCONT)

    def __str__(self) -> str:
        how = "on its fence" if self.on_fence else "after a while"
        return f"{self.member.client_id} ({self.member_id}) stopped at {self.at_ms}, resumed {how} at {self.resumed_ms}"


def _departures(samples: Samples, group: str) -> dict[str, float]:
    return {dict(labels)["how"]: v
            for labels, v in series(samples, "kafka_consumergroup_member_departures_total", group=group).items()}


def _counted(samples: Samples, groups: Iterable[str]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The groups' record-derived counters: what a restart must neither lose nor count twice."""
    wanted = set(groups)
    return {(name, labels): v for name in COUNTERS for labels, v in series(samples, name).items()
            if dict(labels)["group"] in wanted}


def _restart(job: JobProcess, samples: Samples, groups: list[str], kill: bool) -> None:
    """Stop the job (SIGTERM, or SIGKILL: no shutdown at all, maybe mid-batch) and start it on its
    checkpoint; once it has folded new records (the anchors' commits) its counters are the ones it
    stopped with."""
    before = _counted(samples, groups)
    commits = {g: value(samples, "kafka_consumergroup_offset_commits_total", group=g) or 0 for g in groups}
    if kill:
        job.kill()
    else:
        job.stop()
    job.start()
    restarted = job.wait(lambda s: all((value(s, "kafka_consumergroup_offset_commits_total", group=g) or 0)
                                       > commits[g] for g in groups), "the restarted job's first new records")
    assert _counted(restarted, groups) == before, "SIGKILL" if kill else "SIGTERM"


def _wait_committed(admin: Admin, groups: list[str], partitions: list[Partition]) -> None:
    """Every partition's committed offset moved since now: each owner has committed what it owns."""
    before = {g: admin.group_offsets(g) for g in groups}
    wait_until(lambda: all(admin.group_offsets(g).get(tp) not in (None, before[g].get(tp))
                           for g in groups for tp in partitions), 30, "every owner's first commit")


def _crew(wave: int, size: int, bootstrap: str, admin: Admin, topic: str, anchors: dict[str, Member],
          members: list[Member]) -> dict[str, list[Member]]:
    """Start ``size`` members per group, wait until they own and have committed."""
    parts = [(topic, p) for p in range(PARTITIONS)]
    crew = {g: [Member(bootstrap, g, [topic], f"{g}-w{wave}-{i}", protocol="consumer") for i in range(size)]
            for g in anchors}
    members.extend(m for ms in crew.values() for m in ms)
    for ms in crew.values():
        for member in ms:
            member.start()
    for group, ms in crew.items():
        wait_balanced([anchors[group], *ms], parts)
    _wait_committed(admin, list(anchors), parts)
    return crew


def _phase(wave: int, bootstrap: str, admin: Admin, topic: str, anchors: dict[str, Member],
           members: list[Member], rng: random.Random) -> list[Exit]:
    """Start 5 members per group, wait until they own and have committed, then end them all at once."""
    crew = _crew(wave, PER_GROUP, bootstrap, admin, topic, anchors, members)
    exits = [Exit(m, i < kills, i < kills and i % 2 == 0, rng.uniform(0, 3))
             for ms, kills in zip(crew.values(), KILLS, strict=True) for i, m in enumerate(ms)]
    watcher = CommitWatcher(bootstrap, anchors)
    watcher.start()
    try:
        _together(exits, watcher)
    finally:
        watcher.stop()
    return exits


def _together(steps: Sequence[Exit | Pause], watcher: Any) -> None:
    """Each member's step in its own thread, all at once; back when every one is done (or a minute passed)."""
    threads = [threading.Thread(target=step.run, args=(watcher,), name=step.member.client_id) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


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


def _pause_phase(bootstrap: str, admin: Admin, job: JobProcess, topic: str, anchors: dict[str, Member],
                 members: list[Member], rng: random.Random) -> tuple[Samples, list[Pause]]:
    """Start 2 members per group; once they own, have committed and the job counts them, stop both: one is
    resumed as soon as its fence lands, the other 1.5 to 4 s past the session (fenced by then). The job's
    counters just before the pauses, and the pauses."""
    crew = _crew(3, PAUSED, bootstrap, admin, topic, anchors, members)
    before = job.wait(lambda s: all(value(s, "kafka_consumergroup_current_members", group=g) == 1 + PAUSED
                                    for g in anchors), "the third phase's members")
    session = GROUP_SESSION_MS / 1000
    pauses = [Pause(m, rng.uniform(0, 1), session + 10 if i == 0 else rng.uniform(session + 1.5, session + 4),
                    on_fence=i == 0)
              for ms in crew.values() for i, m in enumerate(ms)]
    fences = FenceWatcher(bootstrap, anchors).start_tailing()
    try:
        _together(pauses, fences)
    finally:
        fences.stop()
    return before, pauses


def _check_pause(job: JobProcess, kafka: LocalKafka, admin: Admin, anchors: dict[str, Member], pauses: list[Pause],
                 before: Samples, thresholds: tuple[int, int]) -> Samples:
    """Each paused member counted one ``session_timeout`` departure and one join, by the same member id:
    against the job's counters and event log, Kafka's records and Kafka's tool."""
    groups = list(anchors)
    paused = {g: [p for p in pauses if p.member.group == g] for g in groups}
    expected = {}
    for g in groups:
        expected[g] = dict(_departures(before, g))
        expected[g]["session_timeout"] = expected[g].get("session_timeout", 0) + PAUSED
    samples = job.wait(lambda s: all(sum(_departures(s, g).values()) >= sum(expected[g].values())
                                     and value(s, "kafka_consumergroup_current_members", group=g) == 1 + PAUSED
                                     for g in groups), "the paused members' departures and returns")
    records = {g: trails(admin, g, {p.member_id: p.owned for p in paused[g]}) for g in groups}
    sequence = "\n".join(f"{p}: {records[p.member.group].trails.get(p.member_id)}" for p in pauses)
    assert {g: _departures(samples, g) for g in groups} == expected, sequence

    # Kafka's records: each was fenced by the group's session timeout, not the brokers'.
    group_threshold, broker_threshold = thresholds
    for p in pauses:
        trail = records[p.member.group].trails.get(p.member_id)
        assert trail is not None and trail.gap_ms is not None, sequence
        assert group_threshold <= trail.gap_ms < broker_threshold, sequence
        assert p.at_ms < trail.removed_ms <= p.resumed_ms, sequence

    # Kafka's tool: every paused member is back, under the member id it had before (KIP-1082).
    wait_until(lambda: all(p.member.member_id == p.member_id and p.member.assignment for p in pauses), 60,
               "the resumed members' new assignments")
    with ThreadPoolExecutor(GROUPS) as pool:
        now = dict(zip(groups, pool.map(lambda g: describe_members(kafka.bootstrap, g), groups), strict=True))
    assert {g: set(rows) for g, rows in now.items()} == {
        g: {anchors[g].client_id, *(p.member.client_id for p in paused[g])} for g in groups}, sequence
    assert {p.member.client_id: now[p.member.group][p.member.client_id]["CONSUMER-ID"] for p in pauses} == {
        p.member.client_id: p.member_id for p in pauses}, sequence
    rebalances = {g: len(set(records[g].target_epochs)) - 1 for g in groups}
    samples = job.wait(lambda s: {g: value(s, "kafka_consumergroup_rebalances_total", group=g) for g in groups}
                       == rebalances, "the third phase's rebalances, one per target epoch")

    # The job's event log: each paused member left once (session_timeout) and joined once, not before it
    # left; nobody else came or went; every rebalance's causes are those two. The cause counters agree.
    def phase_events(g: str) -> list[RebalanceEvent]:
        start = min(p.at_ms for p in paused[g])
        return [e for e in job.event_log.read(g) if e.event_time_ms >= start]

    moved = {g: rebalances[g] - (value(before, "kafka_consumergroup_rebalances_total", group=g) or 0) for g in groups}
    wait_until(lambda: all(len(phase_events(g)) == moved[g] for g in groups), 30, "the third phase's events")
    for g in groups:
        events = phase_events(g)
        log = "\n".join(f"{e.event_time_ms} {e.causes} left {e.members_left} {e.departures} joined {e.members_joined}"
                        for e in events)
        for p in paused[g]:
            left = [(e.event_time_ms, how) for e in events for m, how in zip(e.members_left, e.departures, strict=True)
                    if m == p.member_id]
            joined = [e.event_time_ms for e in events if p.member_id in e.members_joined]
            assert [how for _, how in left] == ["session_timeout"] and len(joined) == 1, f"{p}\n{log}"
            assert joined[0] >= left[0][0], f"{p}\n{log}"
        print(f"{g}'s third phase (a member left and joined in one rebalance: back before the target moved):\n{log}")
        ids = {p.member_id for p in paused[g]}
        assert all(set(e.members_left) <= ids and set(e.members_joined) <= ids for e in events), log
        assert all(e.causes and set(e.causes) <= {"members_joined", "members_left"} for e in events), log
        for cause in ("members_joined", "members_left"):
            counted = [(value(s, "kafka_consumergroup_rebalance_causes_total", group=g, cause=cause) or 0)
                       for s in (samples, before)]
            assert counted[0] - counted[1] == sum(cause in e.causes for e in events), f"{cause}\n{log}"
    assert not series(samples, "kafka_consumergroup_rebalance_causes_total", cause="unknown")
    return samples


def test_kip848_kills_closes_and_pauses_are_classified_by_the_groups_session_timeout_across_restarts(
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

        _restart(job, samples, groups, kill=False)

        exits += _phase(2, kafka_broker.bootstrap, admin, topic, anchors, members, rng)
        samples = _check_phase(job, kafka_broker, admin, anchors, exits, 2, thresholds)
        _restart(job, samples, groups, kill=True)

        before, pauses = _pause_phase(kafka_broker.bootstrap, admin, job, topic, anchors, members, rng)
        samples = _check_pause(job, kafka_broker, admin, anchors, pauses, before, thresholds)
        totals = {how: sum(_departures(samples, g).get(how, 0) for g in groups)
                  for how in ("session_timeout", "left_cleanly")}
        assert totals == {"session_timeout": 20 + GROUPS * PAUSED, "left_cleanly": 20}, f"seed {seed}"
    finally:
        producer.stop()
        job.stop()
