"""How a KIP-848 member left, on the records Kafka writes for a crash and for a close().

Timelines follow Kafka's coordinator (GroupMetadataManager) and the consumer's heartbeat manager:
the member heartbeats every interval H (the next heartbeat is sent H after the previous one was
sent), a heartbeat that changes nothing writes nothing, and every heartbeat reschedules the
session timer to fire S later. Offset commits (auto-commit, every 5 s) run on their own timer and
do not renew a KIP-848 session. A crash is fenced S after the last heartbeat Kafka handled: the
subscription's tombstones (8, 7, 5) and a group-epoch bump; the remaining member's next heartbeat
writes the new target. A close() commits, then heartbeats epoch -1, and Kafka writes the same
tombstones while handling it.
"""

from __future__ import annotations

import random

import pytest

from decoders.records import Record, Struct
from streaming.cluster.metadata import TopicNames
from streaming.groups.boundary import classify_consumer_departure, classify_departure, fence_threshold_ms
from streaming.groups.fold import apply_record
from streaming.groups.model import BoundaryMember, Departed, GroupSnapshot
from streaming.groups.stage import GroupStage
from streaming.protocol import GroupTimeouts
from tests.support.decoder_encoder import encode_key, encode_value
from tests.unit.groups.test_topic_names import (
    ORDERS,
    T0,
    Batches,
    Cluster,
    G,
    current,
    group_epoch,
    member_metadata,
    offset_commit,
    target,
    target_epoch,
    tombstone,
    two_member_group,
)

AUTO_COMMIT_MS = 5_000
BROKERS = GroupTimeouts(45_000, 5_000)  # Kafka's defaults


def facts(group: GroupTimeouts | None = None, brokers_session_ms: int = BROKERS.session_timeout_ms) -> TopicNames:
    """The cluster: topic names, the brokers' session timeout, and the group's own config when set."""
    by_group = None if group is None else (lambda groups: dict.fromkeys(groups, group))
    return TopicNames(Cluster().describe, lambda: brokers_session_ms, group_timeouts=by_group)


def departure(rng: random.Random, names: TopicNames, timeouts: GroupTimeouts, crash: bool) -> str:
    """B (orders 2-3) heartbeats and auto-commits on its own timers from T0, then dies or closes; A stays."""
    session, interval = timeouts
    stage = GroupStage(facts=names)
    batches = two_member_group(stage)
    end = T0 + 30_000 + rng.randint(0, 30_000)  # when it died, or called close()
    heartbeats, sent = [], T0
    while sent <= end:  # each sent an interval after the previous one, handled after its latency
        heartbeats.append(sent + rng.randint(0, 50))
        sent += interval
    phase = rng.randint(0, AUTO_COMMIT_MS - 1)
    commits = list(range(T0 + phase, end + 1, AUTO_COMMIT_MS))
    if crash:
        removed = max(h for h in heartbeats if h <= end) + session + rng.randint(0, 30)  # the session timer
    else:
        commits.append(end)  # close() commits, then heartbeats epoch -1
        removed = end + rng.randint(1, 300)
    last = max(commits, default=T0)  # only the latest commit on its partition counts
    batches.apply([offset_commit("orders", 2, len(commits), last)], last)
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)], removed)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], removed + rng.randint(0, interval))
    [event] = batches.events
    assert event.members_left == ("B",)
    return event.departures[0]


@pytest.mark.parametrize("timeouts", [BROKERS, GroupTimeouts(10_000, 1_000), GroupTimeouts(10_000, 5_000)])
def test_a_killed_member_is_a_session_timeout_wherever_it_died_between_commits_and_heartbeats(timeouts):
    """Killed at random offsets from its last commit and its last heartbeat: a commit after the last
    heartbeat leaves less than a session timeout to the fence, never less than S - H."""
    rng = random.Random(848)
    names = facts(None if timeouts == BROKERS else timeouts)
    assert {departure(rng, names, timeouts, crash=True) for _ in range(60)} == {"session_timeout"}


@pytest.mark.parametrize("timeouts", [BROKERS, GroupTimeouts(10_000, 1_000), GroupTimeouts(10_000, 5_000)])
def test_a_closed_member_left_cleanly(timeouts):
    rng = random.Random(1082)
    names = facts(None if timeouts == BROKERS else timeouts)
    assert {departure(rng, names, timeouts, crash=False) for _ in range(60)} == {"left_cleanly"}


def test_the_groups_own_session_timeout_wins_over_the_brokers():
    """consumer.session.timeout.ms = 10 s on the group, 45 s on the brokers: a member fenced 10 s after its
    last heartbeat was killed. Read against the brokers' 45 s it would pass for a clean leave."""
    group = GroupTimeouts(10_000, 5_000)
    rng = random.Random(32)
    assert {departure(rng, facts(group), group, crash=True) for _ in range(30)} == {"session_timeout"}
    rng = random.Random(32)
    assert "left_cleanly" in {departure(rng, facts(), group, crash=True) for _ in range(30)}


def test_the_old_rule_read_a_crash_after_a_late_commit_as_a_clean_leave():
    """The case of issue 31: the last heartbeat at 0, a commit 3 s later, the kill 1 s after it: fenced
    at 45 s, 42 s after the commit, below the session timeout, above S - H."""
    names = facts()
    stage = GroupStage(facts=names)
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 2, 1, T0 + 3_000)], T0 + 3_000)
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)], T0 + 45_000)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], T0 + 46_000)
    assert batches.events[0].departures == ("session_timeout",)


def test_the_last_record_kafka_wrote_for_the_member_bounds_its_last_heartbeat():
    """Without a recent commit, the member's own records count: a member that got its assignment
    (type 8) 2 s before its removal was not fenced (a fence comes a whole session after it)."""
    stage = GroupStage(facts=facts())
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 2, 1, T0 + 1_000)], T0 + 1_000)
    batches.apply([current("B", 1, {ORDERS: [2, 3]})], T0 + 100_000)  # reconciled again, say
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)], T0 + 102_000)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], T0 + 102_500)
    assert batches.events[0].departures == ("left_cleanly",)


# ------------------------------------------------------------------ the rule itself

CONSUMER_MEMBER = BoundaryMember("B", rebalance_timeout_ms=300_000, consumer_protocol=True)


def test_fence_threshold_is_session_minus_interval_minus_the_slack():
    assert fence_threshold_ms(GroupTimeouts(45_000, 5_000)) == 39_000
    assert fence_threshold_ms(GroupTimeouts(10_000, 1_000)) == 8_000
    assert fence_threshold_ms(GroupTimeouts(3_000, 2_500)) == 250  # the slack takes at most half of S - H


def test_classify_consumer_departure():
    timeouts = GroupTimeouts(45_000, 5_000)
    removed = T0 + 1_000_000

    def how(commit: int | None, active: int | None = None, static: bool = False) -> str:
        return classify_consumer_departure(CONSUMER_MEMBER, commit, Departed(removed, "B", active, static), timeouts)

    assert how(removed - 38_999) == "left_cleanly" and how(removed - 39_000) == "session_timeout"
    assert how(removed - 50_000, active=removed - 10) == "left_cleanly"  # its own record, just before
    assert how(removed - 300_000) == "poll_timeout"
    assert how(None, active=removed - 100) == "left_cleanly"
    assert how(None, active=removed - 60_000) == "unknown"  # a fence, or a quiet member's leave
    assert how(None) == "unknown"
    assert how(removed - 45_000, static=True) == "left_cleanly"


def test_a_static_member_that_closed_is_removed_a_session_later_and_left_cleanly():
    """close() on a static member heartbeats epoch -2: Kafka writes its current assignment at epoch -2
    and keeps it for its session timeout, then removes it."""
    def rec(record_type: int, member: str | None, value: Struct | None) -> Record:
        key = Struct(groupId="g") if member is None else Struct(groupId="g", memberId=member)
        return Record(record_type, key, 0 if value is not None else None, value)

    def meta(member: str, instance: str) -> Record:
        return rec(5, member, Struct(instanceId=instance, rackId=None, clientId="c", clientHost="/h",
                                     subscribedTopicNames=("orders",), subscribedTopicRegex=None,
                                     rebalanceTimeoutMs=300_000, serverAssignor=None, classicMemberMetadata=None))

    def assigned(member: str, epoch: int, parts: list[int]) -> Record:
        tps = (Struct(topicId=ORDERS, partitions=tuple(parts)),)
        return rec(8, member, Struct(memberEpoch=epoch, previousMemberEpoch=1, state=0, assignedPartitions=tps,
                                     partitionsPendingRevocation=()))

    snap: GroupSnapshot | None = None
    commits = {("orders", 2): T0 + 1_000}
    steps = [(meta("A", "a"), T0), (meta("B", "b"), T0), (rec(3, None, Struct(epoch=1)), T0),
             (rec(7, "A", Struct(topicPartitions=(Struct(topicId=ORDERS, partitions=(0, 1)),))), T0),
             (rec(7, "B", Struct(topicPartitions=(Struct(topicId=ORDERS, partitions=(2, 3)),))), T0),
             (rec(6, None, Struct(assignmentEpoch=1)), T0), (assigned("B", 1, [2, 3]), T0),
             (assigned("B", -2, [2, 3]), T0 + 1_010),  # close()
             (rec(8, "B", None), T0 + 46_000), (rec(7, "B", None), T0 + 46_000), (rec(5, "B", None), T0 + 46_000),
             (rec(3, None, Struct(epoch=2)), T0 + 46_000),
             (rec(7, "A", Struct(topicPartitions=(Struct(topicId=ORDERS, partitions=(0, 1, 2, 3)),))), T0 + 47_000),
             (rec(6, None, Struct(assignmentEpoch=2)), T0 + 47_000)]
    events = []
    for record, at in steps:
        snap, new = apply_record(snap, record, at, commits)
        events += new
    assert snap is not None
    snap.topic_names[ORDERS] = "orders"
    [event] = events
    assert event.members_left == ("b",) and event.departures == ("left_cleanly",)


def test_members_of_classic_groups_keep_the_classic_rule():
    """In a classic group a commit renews the member's session (OffsetMetadataManager reschedules its
    heartbeat), so a gap below its session timeout is a clean leave there."""
    classic = BoundaryMember("C", session_timeout_ms=45_000, rebalance_timeout_ms=300_000)
    assert classify_departure(classic, T0, T0 + 42_000) == "left_cleanly"
    assert classify_consumer_departure(CONSUMER_MEMBER, T0, Departed(T0 + 42_000), BROKERS) == "session_timeout"


def test_a_dead_members_new_target_partitions_were_committed_by_their_last_holder_not_by_it():
    """Seen on the real broker: B is killed; A then closes, and C's next heartbeat writes a target that hands
    one of A's partitions to B, which will never take it. A's final commit on it is B's latest-looking one,
    1 s before B's fence: read from the target, B would pass for a clean leave. What B held is its current
    assignment (type 8, written only while handling its own heartbeats): its last commit is on those."""
    group = GroupTimeouts(10_000, 1_000)
    stage = GroupStage(facts=facts(group))
    batches = Batches(stage)
    a, b, c = {ORDERS: [0, 1]}, {ORDERS: [2, 3]}, {ORDERS: [4, 5]}
    batches.apply([member_metadata("A"), member_metadata("B"), member_metadata("C"), group_epoch(1),
                   target("A", a), target("B", b), target("C", c), target_epoch(1),
                   current("A", 1, a), current("B", 1, b), current("C", 1, c)], T0)
    batches.apply([offset_commit("orders", 2, 10, T0 + 900)], T0 + 900)  # B's last commit; killed at T0 + 1_200
    batches.apply([offset_commit("orders", 0, 10, T0 + 9_000), offset_commit("orders", 1, 10, T0 + 9_000)],
                  T0 + 9_000)  # A's close: its commit, then its leave
    batches.apply([tombstone(8, "A"), tombstone(7, "A"), tombstone(5, "A"), group_epoch(2)], T0 + 9_001)
    batches.apply([target("B", {ORDERS: [0, 2, 3]}), target("C", {ORDERS: [1, 4, 5]}), target_epoch(2)],
                  T0 + 9_500)  # C's heartbeat
    assert batches.events[0].departures == ("left_cleanly",)
    batches.apply([tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(3)], T0 + 10_000 + 1_000)
    batches.apply([target("C", {ORDERS: [0, 1, 2, 3, 4, 5]}), target_epoch(3)], T0 + 11_500)
    [event] = batches.events
    assert event.members_left == ("B",) and event.departures == ("session_timeout",)


def classic_member_metadata(member: str, session_ms: int) -> tuple[bytes, bytes]:
    """A member that joined the KIP-848 group with the classic protocol (JoinGroup's session timeout)."""
    value = {"instanceId": None, "rackId": None, "clientId": f"client-{member}", "clientHost": "/10.0.0.3",
             "subscribedTopicNames": ("orders",), "subscribedTopicRegex": None, "rebalanceTimeoutMs": 300000,
             "serverAssignor": None,
             "classicMemberMetadata": Struct(sessionTimeoutMs=session_ms, supportedProtocols=())}
    return encode_key(5, {"groupId": G, "memberId": member}), encode_value(5, 0, value)


@pytest.mark.parametrize(("crash", "expected"), [(True, "session_timeout"), (False, "left_cleanly")])
def test_a_classic_member_of_a_kip848_group_is_fenced_by_its_heartbeats_not_its_commits(crash, expected):
    """Kafka renews a classic-protocol member's session in a KIP-848 group on its classic heartbeats only
    (its commits renew nothing there). C heartbeats at T0 + 30 s, auto-commits 2 s later and dies: fenced
    45 s after that heartbeat, 43 s after its last commit, less than its session timeout. Closed instead,
    its tombstones follow its last commit within milliseconds."""
    stage = GroupStage(facts=facts())
    batches = Batches(stage)
    a, c = {ORDERS: [0, 1]}, {ORDERS: [2, 3]}
    batches.apply([member_metadata("A"), classic_member_metadata("C", 45_000), group_epoch(1),
                   target("A", a), target("C", c), target_epoch(1), current("A", 1, a), current("C", 1, c)], T0)
    last_commit = T0 + 32_000
    batches.apply([offset_commit("orders", 2, 10, last_commit)], last_commit)
    removed = T0 + 30_000 + 45_000 if crash else last_commit + 15
    batches.apply([tombstone(8, "C"), tombstone(7, "C"), tombstone(5, "C"), group_epoch(2)], removed)
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], removed + 500)
    [event] = batches.events
    assert event.members_left == ("C",) and event.departures == (expected,)
