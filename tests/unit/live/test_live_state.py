"""The live view folded from recorded ListGroups sequences, and the rule that reconciles it with the offsets topic."""

from __future__ import annotations

import dataclasses

from streaming.driver.publish import build_publishing
from streaming.lag.tracker import LagTracker
from streaming.live.state import LiveGroup, LiveStates
from streaming.live.view import FromOffsets, choose
from tests.support.publishing import orders_summary, scrape, whole

CLASSIC = "classic"


def listing(**states: str) -> dict[str, tuple[str, str]]:
    return {group: (state, CLASSIC) for group, state in states.items()}


def test_a_stuck_rebalance_is_timed_from_its_first_sight_to_its_completion():
    live = LiveStates()
    assert live.observe(listing(g="Stable"), 100.0, True) == {"g"}
    assert live.observe(listing(g="Stable"), 110.0, True) == set()
    assert live.observe(listing(g="PreparingRebalance"), 120.0, True) == {"g"}
    live.observe(listing(g="PreparingRebalance"), 130.0, True)
    assert live.observe(listing(g="CompletingRebalance"), 140.0, True) == {"g"}
    seen = live.get("g")
    assert seen is not None and seen.state == "CompletingRebalance" and seen.since_s == 140.0
    assert seen.rebalancing_since_s == 120.0  # one rebalance across both of its phases
    assert live.durations("g") == ((), 0.0)
    live.observe(listing(g="Stable"), 150.0, True)
    cumulative, total = live.durations("g")
    assert total == 30.0 and cumulative[-1] == 1
    assert cumulative[10] == 1 and cumulative[9] == 0  # 30 s lands in le="30.0", not below it
    assert live.get("g").rebalancing_since_s is None  # type: ignore[union-attr]


def test_a_group_missing_from_a_complete_listing_goes_and_stays_when_a_broker_failed():
    live = LiveStates()
    live.observe(listing(a="Stable", b="Empty"), 100.0, True)
    assert live.observe(listing(a="Stable"), 110.0, False) == set()
    assert live.get("b") is not None and live.get("b").seen_s == 100.0  # type: ignore[union-attr]
    assert live.observe(listing(a="Stable"), 120.0, True) == {"b"}
    assert live.get("b") is None and len(live) == 1


def test_only_classic_groups_rebalancing_or_changed_are_described_longest_first_within_the_limit():
    live = LiveStates()
    live.observe({"s": ("Stable", CLASSIC), "p": ("PreparingRebalance", CLASSIC), "k": ("Assigning", "consumer")},
                 100.0, True)
    changed = live.observe({"s": ("Stable", CLASSIC), "p": ("PreparingRebalance", CLASSIC),
                            "q": ("CompletingRebalance", CLASSIC), "k": ("Reconciling", "consumer"),
                            "e": ("Empty", CLASSIC)}, 110.0, True)
    assert changed == {"q", "k", "e"}
    assert live.to_describe(changed, 10) == ["p", "e", "q"]
    assert live.to_describe(changed, 1) == ["p"]
    live.described("p", 3)
    live.described("s", 2)  # stable: not kept
    assert live.get("p").members == 3 and live.get("s").members is None  # type: ignore[union-attr]


def test_the_fresh_live_state_wins_unless_the_log_holds_a_newer_generation():
    offsets = FromOffsets("Stable", completed_ms=100_000, rebalance_timeout_ms=30_000, generation=4)
    rebalancing = LiveGroup("PreparingRebalance", CLASSIC, since_s=120.0, seen_s=150.0, rebalancing_since_s=120.0)
    assert choose(offsets, rebalancing, 155.0, 30.0) == "live"
    assert choose(offsets, rebalancing, 181.0, 30.0) == "offsets"  # three polls missed: stale
    assert choose(offsets, None, 155.0, 30.0) == "offsets"
    # A generation completed after the last poll: the rebalance that poll saw is over, until the next poll.
    completed = dataclasses.replace(offsets, completed_ms=152_000, generation=5)
    assert choose(completed, rebalancing, 155.0, 30.0) == "offsets"
    # A generation completed before the last poll, which still saw the group rebalancing: the poll is newer.
    assert choose(dataclasses.replace(completed, completed_ms=125_000), rebalancing, 155.0, 30.0) == "live"
    completed = dataclasses.replace(offsets, completed_ms=125_000, generation=5)
    stable = LiveGroup("Stable", CLASSIC, since_s=126.0, seen_s=150.0)
    assert choose(completed, stable, 155.0, 30.0) == "live"
    # Every member left after the poll that saw the group Stable: the Empty generation is newer.
    emptied = dataclasses.replace(offsets, state="Empty", completed_ms=152_000, generation=6)
    assert choose(emptied, stable, 155.0, 30.0) == "offsets"
    assert choose(emptied, dataclasses.replace(stable, state="Empty", seen_s=160.0), 165.0, 30.0) == "live"


def test_metrics_show_one_state_per_group_switching_source_without_contradiction():
    clock = [1_700_000_100.0]
    publisher = build_publishing("c", LagTracker(interval_s=10), live_poll_seconds=10)
    publisher.states._clock = lambda: clock[0]
    summary = orders_summary()
    publisher.apply(whole(summary, None))

    def states() -> list[tuple[str, float]]:
        samples = scrape(publisher)[0]
        return [(lab["state"], v) for lab, v in samples["kafka_consumergroup_state"] if lab["group"] == "orders"]

    assert states() == [("Stable", 1)]
    live = publisher.states.live
    live.observe(listing(orders="PreparingRebalance"), clock[0], True)
    publisher.states.refresh(["orders", "unknown-group"])
    assert states() == [("PreparingRebalance", 1)]
    samples = scrape(publisher)[0]
    assert [v for lab, v in samples["kafka_consumergroup_rebalancing_since_timestamp_seconds"]
            if lab["group"] == "orders"] == [clock[0]]
    assert [lab["state"] for lab, _ in samples["kafka_consumergroup_state_since_timestamp_seconds"]
            if lab["group"] == "orders"] == ["PreparingRebalance"]
    clock[0] += 31  # three polls missed: the offsets topic's state is shown again
    publisher.states.refresh(publisher.states.stale())
    assert states() == [("Stable", 1)]
    assert "unknown-group" not in scrape(publisher)[2]
    publisher.remove("orders")
    publisher.states.refresh(["orders"])
    assert states() == []


def test_a_generation_read_after_the_live_view_saw_the_rebalance_ends_it():
    """The live poll saw the group forming (PreparingRebalance at t=1,700,000,050); the offsets topic then
    brings its generation written at 1,700,000,060: the rebalance is over, Stable is shown until the next poll."""
    clock = [1_700_000_065.0]
    publisher = build_publishing("c", LagTracker(interval_s=10), live_poll_seconds=10)
    publisher.states._clock = lambda: clock[0]
    publisher.states.live.observe(listing(orders="PreparingRebalance"), 1_700_000_050.0, True)
    publisher.apply(whole(orders_summary(), None))
    shown = publisher.states.shown("orders")
    assert shown is not None and (shown.state, shown.source) == ("Stable", "offsets")
    publisher.states.live.observe(listing(orders="Stable"), 1_700_000_066.0, True)
    publisher.states.refresh(["orders"])
    shown = publisher.states.shown("orders")
    assert shown is not None and (shown.state, shown.source) == ("Stable", "live")
    assert shown.since_s == 1_700_000_060.0  # the same state: its earlier start is kept
