"""The state view while the coordinator keeps rebalancing: the offsets topic's completed generation
wins only until the next poll (issue 28, item 3).

Polls are driven as :class:`streaming.live.poller.LivePoller` drives them: fold the listing, then
reconcile the groups that changed and the ones :meth:`StateView.stale` names.
"""

from __future__ import annotations

import dataclasses

from streaming.groups.model import GroupSnapshot
from streaming.groups.summary import summarize
from streaming.live.state import LiveStates
from streaming.live.view import Shown, StateView
from streaming.protocol import GroupSummary

G = "orders"
START = 1_700_001_000.0
POLL_S = 10.0


class Monitor:
    """A state view with a settable clock and the poller's order of calls."""

    def __init__(self) -> None:
        self.now = START - 100
        self.view = StateView(LiveStates(), lambda group, shown, durations: None, 3 * POLL_S,
                              clock=lambda: self.now)
        self.base = summarize(GroupSnapshot(group=G), 0)  # only the fields the view reads are set below
        self.generation(4, START - 100)

    def generation(self, generation: int, written_s: float) -> None:
        """The job reads a completed generation whose records were written at ``written_s``."""
        summary: GroupSummary = dataclasses.replace(
            self.base, group=G, generation=generation, state="Stable",
            last_rebalance_ms=int(written_s * 1000), last_seen_ms=int(written_s * 1000))
        self.view.from_offsets(summary)

    def poll(self, at: float, state: str) -> Shown:
        self.now = at
        changed = self.view.live.observe({G: (state, "classic")}, at, True)
        self.view.refresh(changed | set(self.view.stale()))
        return self.shown()

    def shown(self) -> Shown:
        shown = self.view.shown(G)
        assert shown is not None
        return shown


def test_a_generation_completing_mid_rebalance_does_not_hide_the_rebalance_past_the_next_poll():
    """The replayed case: the coordinator said "rebalancing" for 120 s, a generation completed at +55 s."""
    m = Monitor()
    assert m.poll(START - POLL_S, "Stable").state == "Stable"
    for i in range(6):  # +0 .. +50 s
        shown = m.poll(START + i * POLL_S, "PreparingRebalance" if i < 3 else "CompletingRebalance")
        assert (shown.state, shown.source, shown.rebalancing_since_s) == (
            "PreparingRebalance" if i < 3 else "CompletingRebalance", "live", START)
    m.now = START + 57
    m.generation(5, START + 55)  # read 2 s after it was written
    shown = m.shown()
    assert (shown.state, shown.source, shown.rebalancing_since_s) == ("Stable", "offsets", None)
    for i in range(6, 13):  # +60 .. +120 s: every poll still sees the group rebalancing
        shown = m.poll(START + i * POLL_S, "PreparingRebalance")
        assert (shown.state, shown.source) == ("PreparingRebalance", "live")
        assert shown.rebalancing_since_s == START  # one rebalance no poll saw settle: its first sight
        assert shown.since_s == START + 60  # the state shown again since the poll after the generation
    # GroupRebalanceStuck's condition (time() - rebalancing_since > timeout / 2, at most 120 s) now holds.
    assert m.now - shown.rebalancing_since_s >= 120


def test_a_generation_read_after_the_poll_that_followed_it_never_shows_stable():
    """Spark read the generation late: a poll after it already found the group rebalancing."""
    m = Monitor()
    m.poll(START, "PreparingRebalance")
    m.poll(START + 10, "CompletingRebalance")
    m.poll(START + 20, "PreparingRebalance")
    m.now = START + 25
    m.generation(5, START + 15)
    shown = m.shown()
    assert (shown.state, shown.source, shown.rebalancing_since_s) == ("PreparingRebalance", "live", START)


def test_a_rejoin_loop_keeps_the_rebalance_start_across_every_generation():
    m = Monitor()
    m.poll(START - POLL_S, "Stable")
    generation = 5
    for i in range(30):  # 300 s of polls that all see the group rebalancing
        at = START + i * POLL_S
        shown = m.poll(at, "PreparingRebalance" if i % 2 == 0 else "CompletingRebalance")
        assert shown.source == "live" and shown.rebalancing_since_s == START
        if i % 3 == 1:  # a generation completes every 30 s, read before the next poll
            m.now = at + 7
            m.generation(generation, at + 5)
            generation += 1
            assert (m.shown().state, m.shown().rebalancing_since_s) == ("Stable", None)
    assert m.view.live.durations(G) == ((), 0.0)  # no poll saw it settle: nothing observed yet
    shown = m.poll(START + 300, "Stable")
    assert (shown.state, shown.rebalancing_since_s) == ("Stable", None)
    cumulative, total = m.view.live.durations(G)
    assert total == 300 and cumulative[-1] == 1  # one observed rebalance, 300 s long


def test_a_poll_finding_the_group_stable_after_the_generation_ends_the_rebalance():
    m = Monitor()
    m.poll(START, "PreparingRebalance")
    m.poll(START + 10, "CompletingRebalance")
    m.now = START + 14
    m.generation(5, START + 12)
    assert m.shown().state == "Stable" and m.shown().source == "offsets"
    shown = m.poll(START + 20, "Stable")
    assert (shown.state, shown.source, shown.rebalancing_since_s) == ("Stable", "live", None)
    assert shown.since_s == START + 12  # Stable since the generation (kept across the switch of source)
    # A later rebalance starts afresh.
    shown = m.poll(START + 30, "PreparingRebalance")
    assert shown.rebalancing_since_s == START + 30


def test_a_rebalance_first_seen_after_a_generation_starts_at_that_poll():
    m = Monitor()
    m.poll(START, "Stable")
    m.now = START + 5
    m.generation(5, START + 3)  # a rebalance the polls missed completed
    shown = m.poll(START + 10, "PreparingRebalance")  # and another one started
    assert (shown.state, shown.source, shown.rebalancing_since_s) == ("PreparingRebalance", "live", START + 10)


def test_kip848_reconciling_is_not_hidden_by_a_new_group_epoch_either():
    m = Monitor()
    m.poll(START, "Stable")
    m.poll(START + 10, "Assigning")
    m.now = START + 16
    m.generation(5, START + 15)  # the group epoch's records
    assert m.shown().state == "Stable"
    shown = m.poll(START + 20, "Reconciling")
    assert (shown.state, shown.rebalancing_since_s) == ("Reconciling", START + 10)
