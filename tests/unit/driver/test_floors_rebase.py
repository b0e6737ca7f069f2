"""After a rebuild each group's counters start again from its floors: L + (F - F0), whether the replayed history F0
is below the floors L (no reset, and the group's next rebalance shows) or above them (no burst); kept on disk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from streaming.driver.floor_log import FloorLog
from streaming.driver.floors import CounterFloors
from tests.unit.driver.test_floors import summary


def counted(rebalances: int, causes: dict[str, int], durations: tuple[int, ...]):
    return replace(summary("g", rebalances), rebalance_causes=causes, rebalance_durations=durations,
                   rebalance_duration_sum_ms=sum(durations))


def test_replayed_history_below_the_floors_is_no_reset_and_the_next_rebalance_shows() -> None:
    floors = CounterFloors()
    floors.hold(counted(40, {"members_joined": 30, "members_left": 10}, (5, 9, 12)), 10_000)
    floors.rebuilt()
    shown, commits = floors.hold(counted(2, {"members_joined": 2}, (0, 1, 1)), 50)  # the compacted replay
    assert (shown.rebalances_total, commits) == (40, 10_000)
    assert shown.rebalance_causes == {"members_joined": 30, "members_left": 10}
    assert shown.rebalance_durations == (5, 9, 12)
    shown, commits = floors.hold(counted(3, {"members_joined": 2, "members_left": 1}, (1, 2, 2)), 80)
    assert (shown.rebalances_total, commits) == (41, 10_030)
    assert shown.rebalance_causes == {"members_joined": 30, "members_left": 11}
    assert shown.rebalance_durations == (6, 10, 13)  # still cumulative
    assert floors.hold_commits("g", 90) == 10_040  # commits alone, on the same footing


def test_replayed_history_above_the_floors_is_no_burst() -> None:
    floors = CounterFloors()
    floors.hold(counted(1, {"members_joined": 1}, ()), 3)  # a checkpoint that began at the topic's end
    floors.rebuilt()
    shown, commits = floors.hold(counted(25, {"members_joined": 20, "members_left": 5}, (4, 6)), 900)
    assert (shown.rebalances_total, commits) == (1, 3)
    # a label the replay counted shows 0, so that its next rebalance is an increase of a series that exists
    assert shown.rebalance_causes == {"members_joined": 1, "members_left": 0} and shown.rebalance_durations == (0, 0)
    shown, commits = floors.hold(counted(26, {"members_joined": 20, "members_left": 6}, (4, 7)), 905)
    assert (shown.rebalances_total, commits) == (2, 8)
    assert shown.rebalance_causes == {"members_joined": 1, "members_left": 1} and shown.rebalance_durations == (0, 1)


def test_a_group_new_since_the_rebuild_or_forgotten_counts_from_its_own_counts() -> None:
    floors = CounterFloors()
    floors.hold(summary("g", 5), 5)
    floors.rebuilt()
    assert floors.hold(summary("new", 4), 4)[0].rebalances_total == 4
    floors.forget("g")
    assert floors.hold(summary("g", 2), 2)[0].rebalances_total == 2


def test_the_rebase_and_the_groups_still_to_rebase_survive_a_kill(tmp_path: Path) -> None:
    floors, log = CounterFloors(), FloorLog(tmp_path)
    floors.hold(summary("a", 10), 100)
    floors.hold(summary("b", 20), 200)
    log.write(0, 1, floors)
    floors.rebuilt()
    log.write(None, None, floors)
    floors.hold(summary("a", 1), 7)  # a rebased; b not replayed yet when the process is killed
    log.write(0, 2, floors)
    again = CounterFloors()
    FloorLog(tmp_path).load(again)
    assert again.hold(summary("a", 3), 9)[0].rebalances_total == 12
    assert again.hold(summary("b", 0), 1)[0].rebalances_total == 20  # rebased at its first hold here
    assert again.hold(summary("b", 1), 2)[0].rebalances_total == 21
    compacted = FloorLog(tmp_path, compact_min_rows=0, compact_factor=0.0)
    still = CounterFloors()
    compacted.load(still)
    still.hold(summary("a", 4), 9)
    compacted.write(1, 3, still)  # one file with everything: the rebase and the pending b
    assert len(list((tmp_path / "monitor" / "floors").iterdir())) <= 2
    last = CounterFloors()
    FloorLog(tmp_path).load(last)
    assert last.hold(summary("a", 5), 9)[0].rebalances_total == 14
    assert last.hold(summary("b", 0), 1)[0].rebalances_total == 20
