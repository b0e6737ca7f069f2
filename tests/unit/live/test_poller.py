"""The live poller when one broker of two fails its ListGroups: a failure one local broker cannot produce,
so the admin client is replaced here (the real path runs in tests/scenarios/test_live_state_e2e.py)."""

from __future__ import annotations

from typing import Any, ClassVar

from kafka import errors as Errors

from streaming.live.poller import LivePoller
from streaming.live.state import LiveStates
from streaming.live.view import StateView
from streaming.metrics.live import poller_text


class TwoBrokers:
    """Broker 1 coordinates ``a`` (rebalancing) and ``old`` (no state: ListGroups v3); broker 2 times out
    when ``failing``."""

    failing = False
    described: ClassVar[list[tuple[list[str], int]]] = []

    def __init__(self, **config: Any) -> None:
        pass

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"broker_id": 1}, {"broker_id": 2}, {"broker_id": 3, "is_fenced": True}]}

    def list_groups(self, broker_ids: list[int]) -> list[dict[str, Any]]:
        if broker_ids == [1]:
            return [{"group_id": "a", "group_state": "PreparingRebalance", "group_type": "classic"},
                    {"group_id": "old", "protocol_type": "consumer"}]
        if broker_ids == [2] and not TwoBrokers.failing:
            return [{"group_id": "b", "group_state": "Stable", "group_type": "consumer"}]
        if broker_ids == [2]:
            raise Errors.KafkaTimeoutError("no answer")
        raise AssertionError(f"a fenced broker was asked: {broker_ids}")

    def describe_groups(self, names: list[str], group_coordinator_id: int) -> dict[str, Any]:
        TwoBrokers.described.append((names, group_coordinator_id))
        return {name: {"members": [{}, {}, {}], "error": None} for name in names}

    def close(self) -> None:
        pass


def test_a_broker_that_fails_keeps_its_groups_and_counts_the_error():
    live = LiveStates()
    poller = LivePoller("unused:9092", StateView(live, lambda *_: None, 30.0), 10.0, 10, admin_factory=TwoBrokers)
    poller.poll_once()
    assert {g: live.get(g).state for g in ("a", "b")} == {"a": "PreparingRebalance", "b": "Stable"}  # type: ignore[union-attr]
    assert live.get("old") is None
    assert TwoBrokers.described == [(["a"], 1)]  # the rebalancing classic group, at its coordinator only
    assert live.get("a").members == 3  # type: ignore[union-attr]
    TwoBrokers.failing = True
    poller.poll_once()
    assert live.get("b") is not None  # not forgotten: its broker did not answer
    stats = poller.stats()
    assert stats.rounds == 2 and stats.errors == {"timeout": 1}
    assert stats.requests["ListGroups"] == 4 and stats.requests["DescribeGroups"] == 2
    assert stats.groups == 1  # listed this round: a (old has no state)
    rendered = poller_text("c", stats).decode()
    assert 'rebalance_monitor_live_poll_errors_total{cluster="c",reason="timeout"} 1' in rendered
    assert 'rebalance_monitor_live_requests_total{cluster="c",api="ListGroups"} 4' in rendered
    poller.stop()
