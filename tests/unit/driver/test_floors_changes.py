"""What a durable copy of the floors needs from them: what rose or went since it last wrote, worked out for a
whole batch before the batch publishes, and kept through a rebuild."""

from __future__ import annotations

from dataclasses import replace

from streaming.driver.floors import CounterFloors
from streaming.protocol import SUMMARY_COUNTERS, GroupChange
from tests.unit.driver.test_floors import summary


def whole(group: str, rebalances: int, commits: int) -> GroupChange:
    return GroupChange(group, summary(group, rebalances), {}, commits)


def test_only_what_rose_or_went_is_taken() -> None:
    floors = CounterFloors()
    floors.hold(summary("a", 1), 5)
    floors.hold(summary("b", 1), 5)
    first = floors.take()
    assert set(first.shown) == {"a", "b"} and first.commits == {"a": 5, "b": 5} and not first.forgotten
    floors.hold(summary("a", 1), 5)  # the same counts again
    floors.hold(summary("b", 0), 4)  # a re-run that counted less: held, nothing rose
    assert len(floors.take()) == 0
    floors.hold(summary("a", 2), 5)
    assert floors.hold_commits("b", 9) == 9
    floors.forget("c")  # never held: nothing to say
    changes = floors.take()
    assert set(changes.shown) == {"a"} and changes.commits == {"b": 9} and not changes.forgotten
    floors.forget("a")
    assert floors.take().forgotten == {"a"}
    assert set(floors.everything().shown) == {"b"} and len(floors) == 1


def test_prepare_holds_a_batch_before_it_is_published_and_the_publisher_finds_the_answer() -> None:
    floors = CounterFloors()
    floors.hold(summary("g", 3), 7)
    floors.hold(summary("gone", 1), 1)
    floors.take()
    change, commits_only = whole("g", 2, 9), GroupChange("h", None, {}, 4)
    floors.prepare([change, commits_only], removed=["gone"])
    changes = floors.take()
    assert changes.commits == {"g": 9} and changes.forgotten == {"gone"} and "g" not in changes.shown
    assert change.summary is not None
    shown, commits = floors.hold(change.summary, 9)  # what the publisher then asks
    assert (shown.rebalances_total, commits) == (3, 9)
    assert len(floors.take()) == 0  # asked again, nothing new


def test_floors_kept_through_a_rebuild_and_loaded_back() -> None:
    floors = CounterFloors()
    floors.hold(summary("g", 3), 7)
    with floors.kept():
        floors.forget("g")  # the rebuild removes the series, not the floors
    assert floors.hold(summary("g", 0), 0)[0].rebalances_total == 3
    again = CounterFloors()
    counters = tuple(getattr(summary("g", 3), name) for name, _ in SUMMARY_COUNTERS)
    again.load({"g": counters}, {"g": 7})
    shown, commits = again.hold(summary("g", 1), 2)
    assert (shown.rebalances_total, commits) == (3, 7)
    assert again.hold(replace(summary("g", 4)), 8)[0].rebalances_total == 4
