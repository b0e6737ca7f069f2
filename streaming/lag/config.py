"""How often the lag poller asks the cluster for log offsets, and the health verdict's window."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from streaming.settings import Config, flag, not_negative, positive, setting

DEFAULT_INTERVAL_S = 10.0
DEFAULT_HEALTH_WINDOW_S = 600.0  # streaming.lag.health's window


@dataclass(frozen=True)
class LagConfig(Config):
    poll_seconds: float = field(default=DEFAULT_INTERVAL_S, metadata=setting(
        "log-end offset poll interval (log starts, record timestamps, the offsets topic's transactions)",
        flag="--lag-poll-seconds", type=float))
    max_age_seconds: float = field(default=0.25, metadata=setting(
        "a scrape finding log ends older than this first has them fetched (one ListOffsets per leader, waited "
        "for up to 2 s), so lag is as fresh as Kafka's own tool; 0: scrapes use what the last poll found",
        flag="--lag-max-age-seconds", type=float))

    append_time_topics: str = field(default="", metadata=setting(
        "regex (Python's, searched) of topics whose lag in seconds counts from when a record was appended to the "
        "log (interpolated over polled log ends) instead of from its own timestamp: CreateTime topics whose "
        "producers stamp old times, such as MirrorMaker 2 targets or Kafka Streams repartition topics",
        flag="--lag-append-time-topics"))

    health_window_seconds: float = field(default=DEFAULT_HEALTH_WINDOW_S, metadata=setting(
        "the health verdict's window (kafka_consumergroup_health): the samples judged, at least how long a group "
        "goes without a commit before it is stopped (longer for a group whose own commit interval is longer), "
        "the rebalances a storm counts", flag="--health-window", type=float))

    def problems(self) -> list[str]:
        problems = [*positive(self, "poll_seconds"), *not_negative(self, "max_age_seconds"),
                    *positive(self, "health_window_seconds")]
        try:
            re.compile(self.append_time_topics)
        except re.error as exc:
            problems.append(f"{flag(self, 'append_time_topics')} {self.append_time_topics!r}: {exc}")
        return problems
