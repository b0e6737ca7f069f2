"""The activity series: what a group is doing, when it last had members and committed, which topics it consumes."""

from __future__ import annotations

from decoders.records import Record, Struct
from streaming.groups.fold import apply_record
from streaming.groups.summary import summarize
from streaming.metrics.groups import group_lines
from streaming.protocol import GroupSummary
from tests.support.publishing import ORDERS_OFFSETS, T0, classic, kip848_summary, member, orders_summary, parse

DAY = 24 * 3600 * 1000


def emptied_summary(now_ms: int = T0 + 3 * DAY) -> GroupSummary:
    """Group ``gone``: its last member left at T0 + 60 s and it last committed at T0 + 90 s."""
    snap, _ = apply_record(None, classic("gone", 1, [member("C0", {"t0": [0]})], T0), T0)
    empty = Record(2, Struct(group="gone"), 3, Struct(protocolType="consumer", generation=2, protocol=None,
                                                      leader=None, currentStateTimestamp=T0 + 60_000, members=()))
    snap, _ = apply_record(snap, empty, T0 + 61_000)
    return summarize(snap, now_ms, T0 + 90_000, DAY)


def series(summary: GroupSummary, committed=None) -> dict[str, dict[tuple, float]]:
    text = b"".join(group_lines("c", summary, committed or {}, 0, True).encoded().values()).decode()
    samples, _ = parse(text)
    return {name: {tuple(sorted((k, v) for k, v in labels.items() if k not in ("cluster", "group"))): value
                   for labels, value in found} for name, found in samples.items()}


def test_a_group_with_members_is_active_and_says_which_committed_topics_it_consumes():
    shown = series(orders_summary(), ORDERS_OFFSETS.offsets.committed())
    assert shown["kafka_consumergroup_activity"] == {(("activity", "active"),): 1}
    # t1 holds an old commit, no member is assigned it
    assert shown["kafka_consumergroup_topic_assigned"] == {(("topic", "t0"),): 1, (("topic", "t1"),): 0}
    assert "kafka_consumergroup_last_member_timestamp_seconds" not in shown
    assert "kafka_consumergroup_last_commit_timestamp_seconds" not in shown


def test_an_unnamed_kip848_topic_leaves_assignment_unknown_rather_than_unassigned():
    shown = series(kip848_summary(), {("t0", 0): 5})
    assert shown["kafka_consumergroup_activity"] == {(("activity", "active"),): 1}
    assert "kafka_consumergroup_topic_assigned" not in shown  # id0 has no name: the rules count t0 as assigned


def test_an_empty_group_shows_when_it_last_lived_and_turns_abandoned_after_the_limit():
    inactive = series(emptied_summary(T0 + DAY), {("t0", 0): 5})
    assert inactive["kafka_consumergroup_activity"] == {(("activity", "inactive"),): 1}
    assert inactive["kafka_consumergroup_last_member_timestamp_seconds"] == {(): (T0 + 60_000) / 1000}
    assert inactive["kafka_consumergroup_last_commit_timestamp_seconds"] == {(): (T0 + 90_000) / 1000}
    assert "kafka_consumergroup_topic_assigned" not in inactive  # nothing to compare with: activity says it
    abandoned = series(emptied_summary(), {("t0", 0): 5})
    assert abandoned["kafka_consumergroup_activity"] == {(("activity", "abandoned"),): 1}


def test_a_summary_written_before_activity_shows_none():
    legacy = GroupSummary.from_dict({k: v for k, v in orders_summary().to_dict().items()
                                     if k not in ("activity", "last_member_ms", "last_commit_ms", "assigned_topics")})
    assert "kafka_consumergroup_activity" not in series(legacy)
    assert GroupSummary.from_json(orders_summary().to_json()) == orders_summary()
