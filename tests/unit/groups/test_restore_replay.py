"""A restart gives the counters an uninterrupted run gives: the state store keeps what the folds were told.

Random KIP-848 group lives (joins, crashes and close()s, members fenced and back under their id,
targets recomputed now or at a later heartbeat, commits with and without the topic id Kafka 4.1+
writes) are cut into random batches and folded twice: once without a stop, once stopped at a random
batch and restored from the state store (deltas, sometimes a snapshot) by a new process whose cluster
says other things by then: a topic name it did not know when the batch ran, a group whose session
timeout was changed since (kafka-configs --alter --entity-type groups). Both runs must export the
same summaries and the same events.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

import pyarrow as pa
import pytest

from streaming.cluster.metadata import TopicNames
from streaming.decode.stage import make_decoder
from streaming.groups.store import StateStore
from streaming.protocol import STAGE_SCHEMA, BatchInput, GroupTimeouts
from tests.support.decoder_encoder import encode_key, encode_value
from tests.support.stage_records import Row, kafka_batch

T0 = 1_700_000_000_000
ORDERS, PAYMENTS = "q1YFPGt9Q3-7VA4kbn4Fuw", "Zb1xWJpGSQaW2q0Uu0q9Pg"
NAMES = {ORDERS: "orders", PAYMENTS: "payments"}
PARTITIONS = [(ORDERS, p) for p in range(4)] + [(PAYMENTS, p) for p in range(2)]
GROUPS = ("g", "h")


# ------------------------------------------------------------------ Kafka's records


def meta(group: str, member: str) -> Row:
    value = {"instanceId": None, "rackId": None, "clientId": f"client-{member}", "clientHost": "/10.0.0.2",
             "subscribedTopicNames": ("orders", "payments"), "subscribedTopicRegex": None,
             "rebalanceTimeoutMs": 300_000, "serverAssignor": "uniform"}
    return encode_key(5, {"groupId": group, "memberId": member}), encode_value(5, 0, value)


def epoch(group: str, number: int) -> Row:
    return encode_key(3, {"groupId": group}), encode_value(3, 0, {"epoch": number})


def target_epoch(group: str, number: int) -> Row:
    return encode_key(6, {"groupId": group}), encode_value(6, 0, {"assignmentEpoch": number})


def by_topic(parts: list[tuple[str, int]]) -> tuple[dict, ...]:
    topics: dict[str, list[int]] = {}
    for topic, p in parts:
        topics.setdefault(topic, []).append(p)
    return tuple({"topicId": t, "partitions": tuple(ps)} for t, ps in sorted(topics.items()))


def target(group: str, member: str, parts: list[tuple[str, int]]) -> Row:
    return (encode_key(7, {"groupId": group, "memberId": member}),
            encode_value(7, 0, {"topicPartitions": by_topic(parts)}))


def current(group: str, member: str, number: int, parts: list[tuple[str, int]]) -> Row:
    value = {"memberEpoch": number, "previousMemberEpoch": number - 1, "state": 0,
             "assignedPartitions": by_topic(parts), "partitionsPendingRevocation": ()}
    return encode_key(8, {"groupId": group, "memberId": member}), encode_value(8, 0, value)


def tombstones(group: str, member: str) -> list[Row]:
    return [(encode_key(t, {"groupId": group, "memberId": member}), None) for t in (8, 7, 5)]


def commit(group: str, topic_id: str, partition: int, offset: int, at: int, with_id: bool) -> Row:
    key = encode_key(1, {"group": group, "topic": NAMES[topic_id], "partition": partition})
    fields = {"offset": offset, "leaderEpoch": -1, "metadata": "", "commitTimestamp": at}
    if with_id:  # Kafka 4.1+: OffsetCommitValue v4 carries the topic's id
        return key, encode_value(1, 4, {**fields, "topicId": topic_id})
    return key, encode_value(1, 3, fields)


# ------------------------------------------------------------------ a group's life


class Life:
    """One KIP-848 group as its coordinator writes it: members heartbeat, commit, die, close, come back."""

    def __init__(self, group: str, rng: random.Random) -> None:
        self.group, self.rng = group, rng
        self.epoch = self.target_epoch = 0
        self.members: dict[str, list[tuple[str, int]]] = {}
        self.fenced: list[str] = []
        self.next_id = 0
        self.offset = 0

    def _targets(self) -> list[Row]:
        names = sorted(self.members)
        for m in names:
            self.members[m] = []
        for i, tp in enumerate(PARTITIONS):
            self.members[names[i % len(names)]].append(tp)
        self.target_epoch = self.epoch
        return [target(self.group, m, self.members[m]) for m in names] + [target_epoch(self.group, self.epoch)]

    def _commits(self, member: str, at: int) -> list[Row]:
        """Commits on some of its partitions: orders' mostly with the topic id, payments' without (an
        older client's commit: only the cluster names payments)."""
        self.offset += 1
        owned = self.members[member]
        picked = self.rng.sample(owned, self.rng.randint(1, len(owned))) if owned else []
        return [commit(self.group, t, p, self.offset, at, with_id=t == ORDERS and self.rng.random() < 0.8)
                for t, p in sorted(picked)]

    def step(self, at: int) -> list[Row]:
        rng, g = self.rng, self.group
        action = rng.choice(["join", "join", "leave", "leave", "commit", "commit", "assign", "heartbeat"])
        if action == "join" or not self.members:
            back = self.fenced and rng.random() < 0.5
            if back:
                member = self.fenced.pop(rng.randrange(len(self.fenced)))
            else:
                member, self.next_id = f"{g}-m{self.next_id}", self.next_id + 1
            self.members[member] = []
            self.epoch += 1
            rows = [meta(g, member), epoch(g, self.epoch)]
            if rng.random() < 0.7:  # its own heartbeat computes the target
                rows += [*self._targets(), current(g, member, self.epoch, self.members[member])]
            return rows
        member = rng.choice(sorted(self.members))
        if action == "leave":
            rows = self._commits(member, at) if rng.random() < 0.5 else []  # close(): commit, then leave
            del self.members[member]
            self.fenced.append(member)
            self.epoch += 1
            rows += [*tombstones(g, member), epoch(g, self.epoch)]
            if self.members and rng.random() < 0.5:
                rows += self._targets()
            return rows
        if action == "commit":
            return self._commits(member, at)
        if action == "assign" and self.epoch > self.target_epoch:
            return self._targets()
        return [current(g, member, self.target_epoch, self.members[member])]


def scenario(seed: int) -> list[tuple[int, BatchInput]]:
    """Batches of both groups' writes, each batch with the time it was folded at."""
    rng = random.Random(seed)
    lives = [Life(g, rng) for g in GROUPS]
    at, offset, batches = T0, 0, []
    for _ in range(rng.randint(10, 16)):
        tasks = []
        for _ in range(rng.randint(1, 4)):
            at += rng.choice([40, 900, 3_000, 12_000, 20_000, 30_000, 47_000])
            rows = rng.choice(lives).step(at)
            if rows:
                tasks.append(kafka_batch(rows, first_offset=offset, time_ms=at))
                offset += len(rows)
        table = pa.Table.from_batches(list(make_decoder(100)(iter(tasks))), schema=STAGE_SCHEMA)
        batches.append((at + 100, BatchInput.from_arrow(table)))
    return batches


# ------------------------------------------------------------------ the cluster, as time goes by


class Cluster:
    """What the cluster answers at ``now``: payments' name only after PAYMENTS_KNOWN (orders never: only
    commits name it), and group g's session timeout cut from 45 s to 10 s at CONFIG_CHANGED."""

    PAYMENTS_KNOWN = T0 + 250_000
    CONFIG_CHANGED = T0 + 300_000

    def __init__(self) -> None:
        self.now = T0

    def clock(self) -> float:
        return self.now / 1000

    def describe(self, ids: Collection[str]) -> dict[str, str]:
        return {PAYMENTS: "payments"} if PAYMENTS in ids and self.now >= self.PAYMENTS_KNOWN else {}

    def group_timeouts(self, groups: Collection[str]) -> dict[str, GroupTimeouts]:
        short = self.now >= self.CONFIG_CHANGED
        return {g: GroupTimeouts(10_000, 1_000) if g == "g" and short else GroupTimeouts(45_000, 5_000)
                for g in groups}

    def facts(self) -> TopicNames:
        """A process's own cache of it, asking every time (a cold cache after a restart is no replay matter)."""
        return TopicNames(self.describe, lambda: 45_000, refresh_s=0, clock=self.clock,
                          group_timeouts=self.group_timeouts, group_max_age_s=0)


def run(path: Path, batches: list[tuple[int, BatchInput]], restart_at: int | None = None,
        compact_at: int | None = None) -> tuple[dict, dict]:
    """What the sink does per batch (fold, delta, Spark's commit, publish), stopped and restored before
    batch ``restart_at`` by a process whose replay runs while the cluster says more (the batches after
    it see the cluster as the uninterrupted run did: what a live batch is told is not the replay's to fix)."""
    cluster = Cluster()
    commits = path / "spark" / "commits"
    commits.mkdir(parents=True)
    store = StateStore(path / "state")
    stage = store.load(None, facts=cluster.facts())
    events: dict[str, list[tuple]] = {}
    for batch_id, (now, batch) in enumerate(batches):
        if batch_id == restart_at:
            # The new process replays the deltas later, when the cluster says more than it did.
            cluster.now = max(now + 600_000, Cluster.CONFIG_CHANGED)
            store = StateStore(path / "state")
            stage = store.load(batch_id - 1, facts=cluster.facts())
        if batch_id == compact_at:
            store.write_snapshot(batch_id - 1, stage)
        cluster.now = now  # the batches after it see the cluster as the run without a restart did
        result = stage.apply(batch)
        store.write_delta(batch_id, batch, ())
        (commits / str(batch_id)).write_text("v1\n{}")
        stage.changes(result, now)  # handing groups over names their topics
        for e in result.events:
            events.setdefault(e.group, []).append((e.old_generation, e.new_generation, e.causes, e.departures,
                                                   e.members_joined, e.members_left, e.partitions_moved))
    end = batches[-1][0]
    return {g: stage.summary(g, end) for g in sorted(stage.groups)}, events


@pytest.mark.parametrize("seed", range(30))
def test_a_restart_anywhere_exports_what_the_run_without_one_exports(seed: int, tmp_path: Path) -> None:
    batches = scenario(seed)
    rng = random.Random(seed)
    restart_at = rng.randint(len(batches) // 2, len(batches) - 1)  # a replay of most of the life
    compact_at = rng.choice([None, rng.randint(1, restart_at)])
    expected = run(tmp_path / "live", batches)
    assert run(tmp_path / "restarted", batches, restart_at, compact_at) == expected


def test_the_scenarios_reach_every_departure_class_and_both_timeouts(tmp_path: Path) -> None:
    """The property above is only as strong as its lives: they must crash, close, come back and cross
    the group's change of session timeout."""
    wanted_departures = {"left_cleanly", "session_timeout", "unknown"}
    wanted_causes = {"members_joined", "members_left"}
    departures: set[str] = set()
    causes: set[str] = set()
    for seed in range(30):  # the seeds the property runs over; stops at the first that together reach all
        summaries, _ = run(tmp_path / str(seed), scenario(seed))
        for summary in summaries.values():
            departures |= set(summary.departures)
            causes |= set(summary.rebalance_causes)
        if wanted_departures <= departures and wanted_causes <= causes:
            break
    assert wanted_departures <= departures
    assert wanted_causes <= causes


def test_a_batch_asks_for_its_kip848_groups_timeouts_once_and_a_replay_asks_nothing(tmp_path: Path) -> None:
    cluster, asked = Cluster(), []

    def group_timeouts(groups: Collection[str]) -> dict[str, GroupTimeouts]:
        asked.append(sorted(groups))
        return cluster.group_timeouts(groups)

    names = TopicNames(cluster.describe, lambda: 45_000, refresh_s=0, clock=cluster.clock,
                       group_timeouts=group_timeouts, group_max_age_s=0)
    (tmp_path / "spark" / "commits").mkdir(parents=True)
    store = StateStore(tmp_path / "state")
    stage = store.load(None, facts=names)
    batches = scenario(3)
    for batch_id, (_, batch) in enumerate(batches):
        stage.apply(batch)
        store.write_delta(batch_id, batch, ())
        (tmp_path / "spark" / "commits" / str(batch_id)).write_text("v1\n{}")
    with_records = [b for _, b in batches if b.group_records.num_rows]
    assert len(asked) == len(with_records)
    assert [sorted(set(b.group_records.column("group").to_pylist())) for b in with_records] == asked
    asked.clear()
    StateStore(tmp_path / "state").load(len(batches) - 1, facts=names)
    assert asked == []
