"""How often the lag poller asks the cluster for log offsets."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.settings import Config, positive, setting

DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True)
class LagConfig(Config):
    poll_seconds: float = field(default=DEFAULT_INTERVAL_S, metadata=setting(
        "log-end offset poll interval", flag="--lag-poll-seconds", type=float))

    def problems(self) -> list[str]:
        return positive(self, "poll_seconds")
