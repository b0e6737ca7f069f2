"""Active, inactive and abandoned: said once (streaming.groups.summary.activity) and kept true as time passes."""

from __future__ import annotations

import pytest

from streaming.groups.stage import STALE_DEADLINES_KEPT, GroupStage, StageLimits
from streaming.groups.summary import activity
from streaming.options import parse_args
from streaming.protocol import ABANDONED, ACTIVE, INACTIVE, BatchInput, BatchResult, GroupSummary
from tests.support.stage_records import commit, generation, kafka_batch
from tests.unit.decode.test_stage import run_task

T0 = 1_700_000_000_000
HOUR = 3600 * 1000
DAY = 24 * HOUR


def batch(rows: list, first_offset: int = 0, time_ms: int = T0) -> BatchInput:
    return BatchInput.from_arrow(run_task(kafka_batch(rows, first_offset=first_offset, time_ms=time_ms)))


def test_activity_is_members_first_then_the_latest_sign_of_life():
    assert activity(2, None, None, T0, DAY) == ACTIVE
    assert activity(1, None, T0 - 30 * DAY, T0, DAY) == ACTIVE  # members are enough, however old the commit
    assert activity(0, T0 - HOUR, None, T0, DAY) == INACTIVE  # every consumer gone an hour ago
    assert activity(0, None, T0 - 10_000, T0, DAY) == INACTIVE  # assigns partitions itself and commits
    assert activity(0, T0 - 2 * DAY, T0 - DAY, T0, DAY) == INACTIVE  # exactly the limit is not beyond it
    assert activity(0, T0 - 2 * DAY, T0 - DAY - 1, T0, DAY) == ABANDONED
    assert activity(0, None, None, T0, DAY) == ABANDONED  # nothing says it ever lived


def summary_of(stage: GroupStage, result: BatchResult, now_ms: int, group: str = "g") -> GroupSummary | None:
    changes = {c.group: c for c in stage.changes(result, now_ms)}
    return changes[group].summary if group in changes else None


def test_a_group_goes_inactive_then_abandoned_by_the_clock_alone_and_a_commit_brings_it_back():
    stage = GroupStage(StageLimits(abandoned_after_ms=DAY))
    result = stage.apply(batch([generation("g", 1, {"m": {"orders": [0, 1]}}, ts=T0),
                                commit("g", "orders", 0, 5), commit("g", "old", 0, 7)]))
    first = summary_of(stage, result, T0 + 10)
    assert first is not None and first.activity == ACTIVE
    assert first.last_member_ms is None and first.assigned_topics == ("orders",)  # "old" is only committed

    # the last member leaves: Empty, with the state timestamp Kafka counts offset retention from
    left = T0 + HOUR
    result = stage.apply(batch([generation("g", 2, {}, ts=left)], first_offset=10, time_ms=left + 5))
    empty = summary_of(stage, result, left + 10)
    assert empty is not None and empty.activity == INACTIVE
    assert empty.last_member_ms == left and empty.last_commit_ms == T0 + 2 and empty.assigned_topics is None

    # nothing happens: not due before the day is over, then handed over whole once, as abandoned
    assert summary_of(stage, BatchResult(), left + DAY) is None
    abandoned = summary_of(stage, BatchResult(), left + DAY + 1)
    assert abandoned is not None and abandoned.activity == ABANDONED
    assert summary_of(stage, BatchResult(), left + 2 * DAY) is None  # once, not at every batch

    # a commit (an admin resetting offsets, or the service back) makes it inactive again, at once
    back = left + 3 * DAY
    result = stage.apply(batch([commit("g", "orders", 0, 9)], first_offset=20, time_ms=back))
    again = summary_of(stage, result, back + 10)
    assert again is not None and again.activity == INACTIVE and again.last_commit_ms == back


def test_a_consumer_that_only_commits_has_its_last_commit_shown_to_a_minute():
    stage = GroupStage(StageLimits(abandoned_after_ms=DAY))
    for i, at in enumerate((T0, T0 + 30_000, T0 + 61_000, T0 + HOUR)):
        result = stage.apply(batch([commit("standalone", "t", 0, i)], first_offset=i, time_ms=at))
        shown = summary_of(stage, result, at + 10, "standalone")
        if at == T0 + 30_000:  # within a minute of the commit shown: its offsets alone
            assert shown is None
            continue
        assert shown is not None and shown.activity == INACTIVE and shown.last_commit_ms == at
        assert shown.last_member_ms is None  # no record ever said it had members
    # a commit within the slack is not shown, but the deadline looks at the group again: still inactive
    result = stage.apply(batch([commit("standalone", "t", 0, 9)], first_offset=9, time_ms=T0 + HOUR + 30_000))
    assert summary_of(stage, result, T0 + HOUR + 30_010, "standalone") is None
    assert summary_of(stage, BatchResult(), T0 + HOUR + DAY + 1, "standalone").activity == INACTIVE


def test_a_group_with_members_changed_by_commits_alone_is_not_summarised_again():
    stage = GroupStage()
    result = stage.apply(batch([generation("g", 1, {"m": {"t": [0]}}), commit("g", "t", 0, 1)]))
    assert summary_of(stage, result, T0 + 10) is not None
    result = stage.apply(batch([commit("g", "t", 0, 2)], first_offset=5))
    assert [c.summary for c in stage.changes(result, T0 + 20)] == [None]


def test_a_forgotten_group_is_never_handed_over_by_its_deadline():
    stage = GroupStage(StageLimits(abandoned_after_ms=DAY))
    result = stage.apply(batch([commit("g", "t", 0, 1)]))
    assert summary_of(stage, result, T0 + 10) is not None
    stage.forget(["g"])
    assert stage.changes(BatchResult(), T0 + 2 * DAY) == []


def test_the_option():
    options = parse_args(["--bootstrap-server", "b:9092", "--abandoned-after", "3600"])
    assert StageLimits.from_config(options.groups, 10).abandoned_after_ms == HOUR
    assert StageLimits.from_config(parse_args(["--bootstrap-server", "b:9092"]).groups, 10).abandoned_after_ms == DAY
    with pytest.raises(SystemExit):
        parse_args(["--bootstrap-server", "b:9092", "--abandoned-after", "0"])


def test_a_group_that_only_commits_for_a_day_holds_a_bounded_heap_of_deadlines_and_still_turns_abandoned():
    stage = GroupStage(StageLimits(abandoned_after_ms=DAY))
    stage.apply(batch([commit("standalone", "t", 0, 1)]))
    last = T0
    for minute in range(3 * STALE_DEADLINES_KEPT):  # a commit shown every minute: a new deadline each
        last = T0 + minute * 61_000
        stage._shown("standalone", INACTIVE, None, last)
    assert len(stage._deadlines) <= 2 + STALE_DEADLINES_KEPT
    assert summary_of(stage, BatchResult(), last + DAY) is None
    assert summary_of(stage, BatchResult(), last + DAY + 1, "standalone").activity == ABANDONED
