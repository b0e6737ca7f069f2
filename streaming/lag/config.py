"""How often the lag poller asks the cluster for log offsets, which topics' lag it follows, and the health
verdict's window."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

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
        "for up to 2 s), so lag is as fresh as Kafka's own tool; a scrape waits for that at most half of its "
        "timeout (Prometheus's, else 10 s), then serves the lag last rendered; 0: scrapes use what the last "
        "poll found",
        flag="--lag-max-age-seconds", type=float))

    append_time_topics: str = field(default="", metadata=setting(
        "regex (Python's, searched) of topics whose lag in seconds counts from when a record was appended to the "
        "log (interpolated over polled log ends) instead of from its own timestamp: CreateTime topics whose "
        "producers stamp old times, such as MirrorMaker 2 targets or Kafka Streams repartition topics",
        flag="--lag-append-time-topics"))

    include_topics: str = field(default="", metadata=setting(
        "regex (Python's, searched) of the topics whose lag is followed (log ends polled, lag and records-lost "
        "series); empty: every topic. The rebalance series (assignments, movement) keep every topic",
        flag="--include-topics"))
    exclude_topics: str = field(default="", metadata=setting(
        "regex (Python's, searched) of topics whose lag is not followed, for example topics the job's principal "
        "may not describe (it wins over --include-topics); empty: none", flag="--exclude-topics"))

    health_window_seconds: float = field(default=DEFAULT_HEALTH_WINDOW_S, metadata=setting(
        "the health verdict's window (kafka_consumergroup_health): the samples judged, at least how long a group "
        "goes without a commit before it is stopped (longer for a group whose own commit interval is longer), "
        "the rebalances a storm counts", flag="--health-window", type=float))

    def problems(self) -> list[str]:
        problems = [*positive(self, "poll_seconds"), *not_negative(self, "max_age_seconds"),
                    *positive(self, "health_window_seconds")]
        for name in ("append_time_topics", "include_topics", "exclude_topics"):
            try:
                re.compile(getattr(self, name))
            except re.error as exc:
                problems.append(f"{flag(self, name)} {getattr(self, name)!r}: {exc}")
        return problems

    def topic_filter(self) -> TopicFilter | None:
        """The topics whose lag is followed, or None for every topic."""
        if not self.include_topics and not self.exclude_topics:
            return None
        return TopicFilter(self.include_topics, self.exclude_topics)


class TopicFilter:
    """``--include-topics`` and ``--exclude-topics``: whether a topic's lag is followed (decided once a topic)."""

    def __init__(self, include: str = "", exclude: str = "") -> None:
        self._include = re.compile(include) if include else None
        self._exclude = re.compile(exclude) if exclude else None
        self.follows = lru_cache(maxsize=65536)(self._follows)

    def _follows(self, topic: str) -> bool:
        if self._exclude is not None and self._exclude.search(topic):
            return False
        return self._include is None or self._include.search(topic) is not None
