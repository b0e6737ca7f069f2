"""A KIP-848 member fenced and back under the same member id (KIP-1082) left and joined.

Since KIP-1082 the consumer keeps its member id: fenced (FENCED_MEMBER_EPOCH after its session
expired), it rejoins with epoch 0 under the same id. Kafka writes the fence (tombstones 8, 7, 5 and
a group-epoch bump), then, while handling the rejoin, its subscription, a second bump, the new
target and its current assignment, when no other member's heartbeat computed a target in between.
"""

from __future__ import annotations

import json

from streaming.groups.model import GroupSnapshot
from streaming.groups.stage import GroupStage
from tests.unit.groups.test_kip848_departures import facts
from tests.unit.groups.test_topic_names import (
    ORDERS,
    T0,
    Batches,
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

A, B = {ORDERS: [0, 1]}, {ORDERS: [2, 3]}
FENCE = [tombstone(8, "B"), tombstone(7, "B"), tombstone(5, "B"), group_epoch(2)]
REJOIN = [member_metadata("B"), group_epoch(3), target("A", A), target("B", B), target_epoch(3), current("B", 3, B)]


def fenced_group() -> tuple[GroupStage, Batches]:
    stage = GroupStage(facts=facts())
    batches = two_member_group(stage)
    batches.apply([offset_commit("orders", 2, 9, T0 + 20_000)], T0 + 20_000)  # then killed (or paused) at 22 s
    batches.apply(FENCE, T0 + 66_000)  # its last heartbeat at 21 s, fenced 45 s later
    return stage, batches


def test_fenced_and_back_before_the_target_moved_is_one_rebalance_that_left_and_joined():
    stage, batches = fenced_group()
    batches.apply(REJOIN, T0 + 66_500)
    [event] = batches.events
    assert event.causes == ("members_joined", "members_left")
    assert event.members_left == ("B",) and event.members_joined == ("B",)
    assert event.departures == ("session_timeout",)
    assert event.partitions_moved == 0  # B holds its partitions again
    summary = stage.summary(G, T0 + 67_000)
    assert summary.rebalance_causes == {"members_joined": 1, "members_left": 1}
    assert summary.departures == {"session_timeout": 1}


def test_fenced_then_the_target_moved_then_back_is_two_rebalances():
    """Another member's heartbeat computes the target without B first: B left, then B joined."""
    stage, batches = fenced_group()
    batches.apply([target("A", {ORDERS: [0, 1, 2, 3]}), target_epoch(2)], T0 + 66_200)
    batches.apply(REJOIN, T0 + 66_500)
    assert stage.summary(G, T0 + 67_000).rebalance_causes == {"members_joined": 1, "members_left": 1}
    assert stage.summary(G, T0 + 67_000).departures == {"session_timeout": 1}
    assert stage.snapshots[G].rebalances_total == 2


def test_the_fence_survives_a_restart_in_between():
    stage, batches = fenced_group()
    stage.snapshots[G] = GroupSnapshot.from_json(stage.snapshots[G].to_json())
    batches.apply(REJOIN, T0 + 66_500)
    [event] = batches.events
    assert event.members_left == event.members_joined == ("B",) and event.departures == ("session_timeout",)


def test_an_epoch_bump_with_nobody_gone_stays_unknown():
    stage = GroupStage(facts=facts())
    batches = two_member_group(stage)
    batches.apply([group_epoch(2), target("A", A), target("B", B), target_epoch(2)], T0 + 1_000)
    assert batches.events[0].causes == ("unknown",)


def test_a_format_4_snapshot_with_a_pending_departure_reads():
    """Written before departures kept the member id: the removal time is kept, nothing rejoins."""
    stage, _ = fenced_group()
    d = json.loads(stage.snapshots[G].to_json())
    consumer = d["consumer"]
    consumer["departed_ms"] = {o: e["time_ms"] for o, e in consumer.pop("departed").items()}
    for key in ("session_timeout_ms", "heartbeat_interval_ms"):
        consumer.pop(key)
    for m in consumer["members"].values():
        m.pop("active_ms"), m.pop("static_leave")
    restored = GroupSnapshot.from_dict({**d, "v": 4})
    assert restored.consumer is not None
    departed = {o: (e.time_ms, e.member_id) for o, e in restored.consumer.departed.items()}
    assert departed == {"B": (T0 + 66_002, "")}  # the fence's third row
