"""How members left (departure classes, durations) and member churn, decided at each boundary."""

from __future__ import annotations

import json

import pytest

from streaming.groups.boundary import CHURN_WINDOW_MS, classify_departure
from streaming.groups.model import BoundaryMember, GroupSnapshot
from streaming.groups.summary import summarize
from streaming.protocol import (
    DEPARTURES,
    DURATION_BUCKET_LABELS,
    MEMBER_CHURN_CAP,
    REBALANCE_DURATION_BUCKETS,
    MemberChurn,
)
from tests.support.group_records import (
    ALL_A,
    RANGE_2,
    T0,
    classic,
    classic_pair,
    fold,
    k3,
    k6,
    k7,
    member,
    tomb,
    two_member_group,
)


@pytest.mark.parametrize(("gap_ms", "expected"), [
    (2_000, "left_cleanly"),       # leave(): committed on close, removed at once
    (48_000, "session_timeout"),   # SIGKILL: removed 45 s after its last heartbeat
    (310_000, "poll_timeout"),     # stopped polling: nothing committed for max.poll.interval.ms
])
def test_departure_classes_from_the_last_commit_on_the_leavers_partitions(gap_ms, expected):
    rebalance_at = T0 + 1_000_000
    snap, _ = fold(None, *classic_pair(T0))
    # C1 committed on t0p2 gap_ms before; C0's later commits say nothing about C1.
    commits = {("t0", 2): rebalance_at - gap_ms, ("t0", 3): rebalance_at - gap_ms - 10, ("t0", 0): rebalance_at}
    snap, [e] = fold(snap, classic(2, [member("C0", "t0p0 t0p1 t0p2 t0p3")], ts=rebalance_at),
                     t=rebalance_at + 50, commits=commits)
    assert e.members_left == ("C1",) and e.departures == (expected,)
    assert summarize(snap, T0).departures == {expected: 1}


def test_departure_unknown_without_commits_and_in_empty_transitions():
    snap, _ = fold(None, *classic_pair(T0))
    snap, _ = fold(snap, classic(2, []), commits={("t0", 0): T0 - 1_000})
    assert snap.departures == {"left_cleanly": 1, "unknown": 1}  # C1 never committed


def test_kip848_departure_time_is_the_members_tombstone():
    snap = two_member_group()
    leave_at = T0 + 600_000
    commits = {("payments", 1): leave_at - 50_000}  # B owned orders:2,3 and payments:1
    snap, _ = fold(snap, tomb(8, "B"), tomb(7, "B"), tomb(5, "B"), k3(3), t=leave_at)
    snap, [e] = fold(snap, k7("A", ALL_A), k6(3), t=leave_at + 400_000, commits=commits)
    assert e.departures == ("session_timeout",)  # 50 s ≥ the broker's default 45 s, < 300 s
    assert e.duration_ms == 400_000  # from the epoch bump to the target catching up


def test_rebalance_duration_histogram():
    """Measured rebalances go into the group's histogram; unmeasured ones, baselines and Empty do not."""
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))  # baseline: not a rebalance
    assert summarize(snap, T0).rebalance_durations == ()
    three = [member("C0", "t0p0 t1p0"), member("C1", "t0p1 t1p1"), member("C2", "t0p2 t1p2")]
    snap, [e] = fold(snap, classic(2, three, ts=T0 + 5000), t=T0 + 5040)  # 40 ms sync phase
    assert e.duration_ms == 40
    snap, _ = fold(snap, classic(3, RANGE_2), t=T0 + 9000)  # no state timestamp: not measured
    snap, _ = fold(snap, classic(4, three, ts=T0 + 10_000), t=T0 + 10_000 + 400_000)  # beyond every bound
    snap, _ = fold(snap, classic(5, [], ts=T0 + 500_000), t=T0 + 500_010)  # Empty: not a rebalance
    s = summarize(snap, T0 + 500_010)
    assert (s.rebalances_total, s.empty_transitions_total) == (3, 1)
    assert len(s.rebalance_durations) == len(REBALANCE_DURATION_BUCKETS) + 1 == len(DURATION_BUCKET_LABELS)
    cumulative = dict(zip(DURATION_BUCKET_LABELS, s.rebalance_durations, strict=True))
    assert (cumulative["0.025"], cumulative["0.05"], cumulative["300.0"], cumulative["+Inf"]) == (0, 1, 1, 2)
    assert s.rebalance_duration_sum_ms == 40 + 400_000
    restored = GroupSnapshot.from_json(snap.to_json())
    assert summarize(restored, T0 + 500_010) == s


def test_format_3_snapshot_reads_with_an_empty_histogram():
    snap, _ = fold(None, classic(1, RANGE_2, ts=T0))
    old = {**json.loads(snap.to_json()), "v": 3}
    assert "rebalance_durations" not in old  # never written for a group without a measured rebalance
    assert GroupSnapshot.from_dict(old).rebalance_durations == {}


def test_classify_departure_thresholds():
    m = BoundaryMember("m", session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    assert [classify_departure(m, 100_000 - gap, 100_000) for gap in (-5, 9_999, 10_000, 59_999, 60_000)] == [
        "left_cleanly", "left_cleanly", "session_timeout", "session_timeout", "poll_timeout"]
    assert classify_departure(m, None, 100_000) == "unknown"
    assert set(DEPARTURES) == {"left_cleanly", "session_timeout", "poll_timeout", "unknown"}


def test_member_churn_ranks_the_clients_coming_and_going_in_the_window():
    snap, _ = fold(None, classic(1, [member("S-0", "t0p0 t0p1", client="steady"),
                                     member("F-0", "t0p2 t0p3", client="flappy")]), t=T0)
    generation = 1
    for i in range(1, 4):  # "flappy" crashes and comes back three times
        generation += 1
        snap, _ = fold(snap, classic(generation, [member("S-0", "t0p0 t0p1 t0p2 t0p3", client="steady")]),
                       t=T0 + i * 60_000)
        generation += 1
        snap, _ = fold(snap, classic(generation, [member("S-0", "t0p0 t0p1", client="steady"),
                                                  member(f"F-{i}", "t0p2 t0p3", client="flappy")]),
                       t=T0 + i * 60_000 + 1)
    now = T0 + 4 * 60_000
    assert summarize(snap, now).member_churn == (MemberChurn("flappy", "/10.0.0.1", 6),)
    assert summarize(snap, now + CHURN_WINDOW_MS).member_churn == ()  # the window moved on
    assert len(summarize(snap, now).member_churn) <= MEMBER_CHURN_CAP


def test_member_churn_is_capped():
    many = [member(f"M{i}", f"t0p{i}", client=f"c{i}") for i in range(MEMBER_CHURN_CAP + 5)]
    snap, _ = fold(None, classic(1, many[:1]), classic(2, many))
    churn = summarize(snap, T0).member_churn
    assert len(churn) == MEMBER_CHURN_CAP and all(entry.joins_and_leaves == 1 for entry in churn)
