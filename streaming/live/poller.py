"""The live group-state poller: a thread asking the coordinators what state every group is in.

Each round (every ``interval_s``):

1. DescribeCluster: the brokers (fenced ones left out);
2. ListGroups to each broker: every group it coordinates, with its state and type (ListGroups
   v4+ carries the state, Kafka 2.6+; v5 the type, Kafka 3.8+; the type is taken as classic
   when absent). One call per broker, so a broker that fails costs only its own groups, which
   then keep their last state and age (see :mod:`streaming.live.view`);
3. DescribeGroups, one call per coordinator (the broker that listed the group), for the classic
   groups that rebalance or changed state this round, at most ``describe_max`` of them: the
   members Kafka lists mid-rebalance. KIP-848 groups are not described: kafka-python (3.0) has
   no ConsumerGroupDescribe, so their state (Assigning, Reconciling) comes from ListGroups and
   their members' epochs from the offsets topic.

The cost per round is therefore 1 + brokers + coordinators-with-rebalancing-groups requests,
whatever the number of groups; the instruments (requests by API, errors, the round's duration)
are handed over after each round (``on_round``) as :class:`LivePollStats`. Errors never end the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient

from streaming.cluster.client import LazyClient
from streaming.cluster.errors import error_reason
from streaming.lifecycle import PollingThread
from streaming.live.view import StateView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LivePollStats:
    """What the poller has done so far, for the exporter to render (:func:`streaming.metrics.live.poller_text`)."""

    rounds: int = 0
    requests: Mapping[str, int] = field(default_factory=dict)  # by Kafka API
    errors: Mapping[str, int] = field(default_factory=dict)  # by reason (streaming.cluster.errors)
    last_seconds: float = 0.0  # the last round's duration
    groups: int = 0  # groups the last answered round listed
    last_ok_s: float = 0.0  # when a round last got an answer (epoch seconds)


class LivePoller(PollingThread):
    """A daemon thread polling group states every ``interval_s`` into ``view``; a component (see
    :mod:`streaming.lifecycle`). ``on_round`` gets the poller's instruments after each round.
    ``admin_factory`` replaces the real client only where a test needs a failure a broker cannot
    produce on demand."""

    def __init__(self, bootstrap_servers: str, view: StateView, interval_s: float,
                 describe_max: int, client_config: Mapping[str, Any] | None = None,
                 on_round: Callable[[LivePollStats], None] | None = None,
                 admin_factory: Callable[..., Any] = KafkaAdminClient) -> None:
        super().__init__("live-poller")
        self.view = view
        self._interval_s = interval_s
        self._describe_max = describe_max
        self._on_round = on_round
        config = {"bootstrap_servers": bootstrap_servers, "client_id": "rebalance-monitor-live",
                  "request_timeout_ms": int(max(5.0, interval_s) * 1000), **(client_config or {})}
        self._admin = LazyClient(admin_factory, config, "live poller's admin client")
        self._lock = threading.Lock()
        self.rounds = 0
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.last_seconds = 0.0
        self.last_ok_s = 0.0
        self.groups = 0

    def _run(self) -> None:
        while not self._stopping.is_set():
            next_round = time.monotonic() + self._interval_s
            self.poll_once()
            self._stopping.wait(max(0.0, next_round - time.monotonic()))

    def _close(self) -> None:
        self._admin.close()

    def poll_once(self) -> None:
        """One round (see the module docstring); failures are counted, none is raised."""
        started = time.monotonic()
        # What the listing says held when it was asked: a generation the offsets topic completed while the
        # requests were in flight is newer than this poll, and wins until the next one (streaming.live.view).
        now = time.time()
        requests: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        listed: dict[str, tuple[str, str]] = {}
        coordinators: dict[str, int] = {}
        answered = complete = False
        try:
            admin = self._admin.get()
            requests["DescribeCluster"] += 1
            brokers = [b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
            complete = bool(brokers)
            for broker in brokers:
                requests["ListGroups"] += 1
                try:
                    groups = admin.list_groups(broker_ids=[broker])
                except Exception as exc:
                    errors[error_reason(exc)] += 1
                    log.warning("ListGroups to broker %s failed (%s): %s", broker, error_reason(exc), exc)
                    complete = False
                    continue
                answered = True
                for g in groups:
                    if not g.get("group_state"):
                        continue  # ListGroups before v4 (Kafka < 2.6) has no state: the offsets topic's is shown
                    listed[g["group_id"]] = (g["group_state"], g.get("group_type") or "classic")
                    coordinators[g["group_id"]] = broker
        except Exception as exc:  # no client, no broker list: nothing listed this round
            errors[error_reason(exc)] += 1
            log.warning("live group poll failed (%s): %s", error_reason(exc), exc)
            self._admin.close()
        changed = self.view.live.observe(listed, now, complete) if answered else set()
        if answered:
            self._describe(self.view.live.to_describe(changed, self._describe_max), coordinators, requests, errors)
        self.view.refresh(changed | set(self.view.stale()))
        with self._lock:
            self.rounds += 1
            self.requests.update(requests)
            self.errors.update(errors)
            self.last_seconds = time.monotonic() - started
            if answered:
                self.last_ok_s, self.groups = now, len(listed)
        if self._on_round is not None:
            self._on_round(self.stats())

    def _describe(self, groups: list[str], coordinators: Mapping[str, int], requests: Counter[str],
                  errors: Counter[str]) -> None:
        """DescribeGroups, one call per coordinator: the member counts of rebalancing groups."""
        by_coordinator: dict[int, list[str]] = defaultdict(list)
        for group in groups:
            if group in coordinators:
                by_coordinator[coordinators[group]].append(group)
        admin = self._admin.get()
        for coordinator, names in sorted(by_coordinator.items()):
            requests["DescribeGroups"] += 1
            try:
                described = admin.describe_groups(names, group_coordinator_id=coordinator)
            except Exception as exc:
                errors[error_reason(exc)] += 1
                log.warning("DescribeGroups of %d group(s) at broker %s failed (%s): %s", len(names), coordinator,
                            error_reason(exc), exc)
                continue
            for name, description in described.items():
                if not description.get("error"):
                    self.view.live.described(name, len(description.get("members") or ()))

    def stats(self) -> LivePollStats:
        """The poller's instruments as of now (rendered by the metrics stage at scrape time)."""
        with self._lock:
            return LivePollStats(self.rounds, dict(self.requests), dict(self.errors), self.last_seconds, self.groups,
                                 self.last_ok_s)
