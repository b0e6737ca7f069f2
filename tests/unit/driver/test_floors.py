"""A group's commit count never steps back, whether it was last raised by a whole publish or by commits alone."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import get_type_hints

from streaming.driver.floors import CounterFloors
from streaming.protocol import SUMMARY_COUNTERS, GroupSummary


def summary(group: str = "g", rebalances: int = 0) -> GroupSummary:
    return GroupSummary(group=group, group_type="classic", protocol_type="consumer", protocol="range", leader="",
                        state="Stable", generation=1, member_count=1, assigned_partitions=1, imbalance_ratio=None,
                        rebalances_total=rebalances, partitions_moved_total=0, empty_transitions_total=0,
                        recreations_total=0, generations_advanced_total=0, rebalance_causes={}, departures={},
                        member_churn=(), last_rebalance_ms=None, last_seen_ms=0, as_of_ms=0, members=())


def test_commits_alone_need_a_whole_publish_first() -> None:
    assert CounterFloors().hold_commits("g", 5) is None


def test_commits_alone_raise_the_floor_and_a_lower_count_shows_the_floor() -> None:
    floors = CounterFloors()
    assert floors.hold(summary(), 5)[1] == 5
    assert floors.hold_commits("g", 9) == 9
    assert floors.hold_commits("g", 7) == 9  # a re-run batch that read fewer commits


def test_a_whole_publish_after_commits_alone_keeps_their_floor() -> None:
    floors = CounterFloors()
    floors.hold(summary(rebalances=3), 5)
    floors.hold_commits("g", 9)
    shown, commits = floors.hold(summary(rebalances=2), 6)
    assert (shown.rebalances_total, commits) == (3, 9)


def test_a_forgotten_group_starts_again_from_its_own_counts() -> None:
    floors = CounterFloors()
    floors.hold(summary(rebalances=3), 9)
    floors.forget("g")
    assert floors.hold_commits("g", 2) is None
    shown, commits = floors.hold(summary(rebalances=1), 2)
    assert (shown.rebalances_total, commits) == (1, 2)


def raised(value: object) -> object:
    """A declared counter's value with every count above the test summary's."""
    if isinstance(value, dict):
        return {"members_joined": 7, "left_cleanly": 7}
    if isinstance(value, tuple):
        return (5, 6, 7)
    return 7


def test_every_declared_counter_is_held_at_what_was_last_published() -> None:
    """Derived from the declaration: a counter added to GroupSummary has its floor without a change here."""
    assert {name for name, _ in SUMMARY_COUNTERS} >= {"rebalances_total", "rebalance_causes", "departures",
                                                      "rebalance_durations", "rebalance_duration_sum_ms"}
    floors = CounterFloors()
    high = replace(summary(), **{name: raised(getattr(summary(), name)) for name, _ in SUMMARY_COUNTERS})
    floors.hold(high, 0)
    shown, _ = floors.hold(summary(), 0)  # a re-run batch that counted less
    for name, _ in SUMMARY_COUNTERS:
        value = getattr(shown, name)
        assert value == getattr(high, name), (name, value)


def test_every_counter_like_field_of_the_summary_is_declared() -> None:
    """Totals, sums and counts by label go without a floor only by mistake: each is declared a counter."""
    declared = {name for name, _ in SUMMARY_COUNTERS}
    hints = get_type_hints(GroupSummary)
    counter_like = {f.name for f in fields(GroupSummary)
                    if f.name.endswith(("_total", "_sum_ms")) or hints[f.name] == dict[str, int]
                    or f.name.endswith("_durations")}
    assert counter_like <= declared, counter_like - declared
