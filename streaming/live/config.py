"""How often the job asks the group coordinators for every group's live state."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.settings import Config, not_negative, positive, setting

DEFAULT_INTERVAL_S = 10.0
DEFAULT_DESCRIBE_MAX = 200


@dataclass(frozen=True)
class LiveConfig(Config):
    poll_seconds: float = field(default=DEFAULT_INTERVAL_S, metadata=setting(
        "live group state poll interval: one ListGroups per broker (state and type of every group), then "
        "DescribeGroups for classic groups that are rebalancing or changed state; 0: off, the state comes from "
        "the offsets topic alone (which never shows a classic group mid-rebalance)",
        flag="--live-poll-seconds", type=float))
    describe_max: int = field(default=DEFAULT_DESCRIBE_MAX, metadata=setting(
        "at most this many groups described per poll (the rest wait for the next one): bounds the poll's cost "
        "when many groups rebalance at once", flag="--live-describe-max", type=int))

    def problems(self) -> list[str]:
        return [*not_negative(self, "poll_seconds"), *positive(self, "describe_max")]
