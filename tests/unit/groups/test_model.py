"""The snapshot: expiry, its JSON round trip, and any record sequence folded consistently and bounded."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.groups.fold import apply_record, drop_expired
from streaming.groups.model import GroupSnapshot, plain
from streaming.groups.summary import summarize
from streaming.protocol import (
    MemberChurn,
    RebalanceEvent,
)
from tests.support.group_records import (
    RANGE_2,
    RECORDS,
    T0,
    TA,
    TB,
    classic,
    fold,
    k3,
    k5,
    k6,
    k7,
    k8,
    member,
    two_member_group,
)


def test_drop_expired():
    day = 86_400_000
    emptied, _ = fold(None, classic(1, RANGE_2), classic(2, []))
    assert drop_expired(emptied, T0 + 2 * day, day)
    assert not drop_expired(emptied, T0 + day, day)
    live, _ = fold(None, classic(1, RANGE_2))
    assert not drop_expired(live, T0 + 30 * day, day)


def test_snapshot_json_round_trip():
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0"), member("C1", "")]))
    kip = two_member_group()
    for original in (snap, kip):
        text = original.to_json()
        restored = GroupSnapshot.from_json(text)
        assert restored == original
        assert restored.to_json() == text
        assert summarize(restored, T0) == summarize(original, T0)
    assert len(snap.to_json()) < 1560  # with one measured rebalance in the duration histogram
    with pytest.raises(ValueError):
        GroupSnapshot.from_dict({**json.loads(snap.to_json()), "v": 99})


def test_restored_snapshot_keeps_detecting_movement():
    snap, _ = fold(None, classic(1, [member("C0", "t0p0 t0p1 t0p2 t0p3")], protocol="cooperative-sticky"))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0 t0p1"), member("C1", "")]))
    snap = GroupSnapshot.from_json(snap.to_json())
    snap, [e] = fold(snap, classic(3, [member("C0", "t0p0 t0p1"), member("C1", "t0p2 t0p3")]))
    assert e.partitions_moved == 2


def test_event_and_summary_serialise():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t1p0 t1p1 t1p2")]), commits={("t0", 2): T0})
    text = json.dumps(e.to_dict())
    assert RebalanceEvent.from_dict(json.loads(text)) == e
    s = summarize(snap, T0)
    assert s.member_churn == (MemberChurn("client-C1", "/10.0.0.1", 1),)
    assert type(s).from_json(s.to_json()) == s


@settings(max_examples=300, deadline=None)
@given(st.lists(RECORDS, max_size=25))
def test_any_record_sequence_is_folded_consistently(records):
    snap, emitted = None, 0
    moved = 0
    for i, record in enumerate(records):
        snap, events = apply_record(snap, record, T0 + i)
        emitted += len(events)
        moved += sum(e.partitions_moved for e in events)
        if snap is None:
            continue
        assert snap.rebalances_total == emitted and snap.partitions_moved_total == moved
        assert GroupSnapshot.from_json(snap.to_json()) == snap
        assert plain(snap) == dataclasses.asdict(snap)  # what the JSON is made of, as asdict made it
        s = summarize(snap, T0)
        assert s.imbalance_ratio is None or (math.isfinite(s.imbalance_ratio) and s.imbalance_ratio >= 1.0)
        for e in events:
            assert e.partitions_moved <= e.partitions_assigned


def test_ownership_history_and_topic_names_stay_bounded():
    snap, _ = fold(None, classic(1, RANGE_2))
    snap, _ = fold(snap, classic(2, [member("C0", "t0p0 t0p1", topics=("t0",)),
                                     member("C1", "t0p2", topics=("t0",))]))
    assert {topic for topic, _ in snap.last_owner} == {"t0"}  # nobody subscribes to t1 any more
    kip = two_member_group()
    assert set(kip.topic_names) == {TA, TB}
    kip, _ = fold(kip, k5("A", topics=("orders",)), k5("B", topics=("orders",)), k3(3),
                  k7("A", {TA: [0, 1]}), k7("B", {TA: [2, 3]}), k6(3),
                  k8("A", 3, {TA: [0, 1]}), k8("B", 3, {TA: [2, 3]}))
    kip, _ = fold(kip, k3(4), k6(4))  # pruned at the next boundary: no record names payments now
    assert kip.topic_names == {TA: "orders"}
    assert {topic for topic, _ in kip.last_owner} == {TA}
