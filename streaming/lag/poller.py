"""The log-end poller: a thread that keeps a :class:`~streaming.lag.LagTracker` fed.

Each round (every ``interval_s``):

1. cluster metadata for the tracked topics and ``__consumer_offsets``: partitions that no
   longer exist or have no leader are counted as errors and skipped;
2. ListOffsets LATEST and EARLIEST, one call per leader, so a broker that times out costs
   only its own partitions. LATEST is asked under read_uncommitted, the high watermark, as
   Kafka's ``kafka-consumer-groups`` does (default ListOffsetsOptions): a read_committed
   consumer can only get as far as the last stable offset, but lag stays comparable with
   the tool everyone checks against; records of an open transaction and the commit marker
   at the end of the log count as lag there too. kafka-python fails a
   whole call when one partition carries an error code; such a call is split (by topic,
   then in halves) until the failing partitions stand alone;
3. the offsets topic's high watermark and last stable offset (LATEST under read_committed):
   an open transaction holds the LSO back and freezes that partition for our job;
4. record timestamps at committed offsets, at most ``lookups_per_round`` partitions
   (:meth:`LagTracker.next_lookups` rotates through a larger backlog).

Errors never end the thread; they are counted by reason in the tracker, whose samples
then age until the lag series stop showing them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka import IsolationLevel, KafkaAdminClient, OffsetSpec
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType

from streaming.cluster.client import LazyClient, config_values
from streaming.cluster.errors import error_reason
from streaming.lag.config import DEFAULT_INTERVAL_S
from streaming.lag.timestamps import RecordTimestamps
from streaming.lag.tracker import DEFAULT_LOOKUPS_PER_ROUND, LagTracker, TopicConfig
from streaming.lag.unreadable import STEADY_REASONS, UnreadableTopics
from streaming.lifecycle import PollingThread
from streaming.protocol import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TOPIC_CONFIG_MAX_AGE_S = 600.0  # a topic's settings are read again after this long
TOPIC_CONFIGS = ("message.timestamp.type", "retention.ms", "cleanup.policy")
QUICK_TIMEOUT_MS = 2000  # a scrape's own log-end fetch gives up after this long
def _partition_level(exc: BaseException) -> bool:
    """An error about some partitions of a call rather than the broker: worth splitting on."""
    return isinstance(exc, Errors.BrokerResponseError) and error_reason(exc) not in ("timeout", "connection")


class LogEndPoller(PollingThread):
    """A daemon thread fetching log offsets and record timestamps every ``interval_s``; a component
    (see :mod:`streaming.lifecycle`).

    ``client_config`` is kafka-python configuration (see
    :func:`streaming.cluster.client.client_config_from_kafka_options`); ``admin_factory`` and
    ``timestamps`` replace the real clients only where a test needs a failure a broker
    cannot produce on demand.
    """

    def __init__(self, bootstrap_servers: str, tracker: LagTracker, interval_s: float = DEFAULT_INTERVAL_S,
                 client_config: Mapping[str, Any] | None = None,
                 lookups_per_round: int = DEFAULT_LOOKUPS_PER_ROUND,
                 admin_factory: Callable[..., Any] = KafkaAdminClient,
                 timestamps: RecordTimestamps | None = None) -> None:
        super().__init__("lag-poller")
        self._config: dict[str, Any] = {"bootstrap_servers": bootstrap_servers, "client_id": "rebalance-monitor-lag",
                                        "request_timeout_ms": int(max(5.0, interval_s) * 1000),
                                        **(client_config or {})}
        self.tracker = tracker
        self._interval_s = interval_s
        self._lookups_per_round = lookups_per_round
        self._admin = LazyClient(admin_factory, self._config, "lag poller's admin client")
        self._polled: set[TopicPartition] = set()  # what the last round asked for
        self._timestamps = timestamps or RecordTimestamps(self._config)
        self._leader_cache: dict[TopicPartition, int] = {}  # from the last full round, for quick fetches
        # Quick fetches run on the caller's thread (a scrape's) with a client of their own, never waiting
        # behind a full round's record lookups; a short request timeout bounds the scrape.
        # Its bootstrap is bounded the same way: a broker that is down must not hold a scrape for the
        # client's default 30 s.
        self._quick_admin = LazyClient(admin_factory, {**self._config, "request_timeout_ms": QUICK_TIMEOUT_MS,
                                                       "bootstrap_timeout_ms": QUICK_TIMEOUT_MS},
                                       "quick log-end client")
        self._quick_lock = threading.Lock()
        self.unreadable = UnreadableTopics()

    def _run(self) -> None:
        while not self._stopping.is_set():
            next_round = time.monotonic() + self._interval_s
            self.poll_once()
            # New committed offsets are looked up at once rather than at the next round
            # (until then their lag in seconds is interpolated from the log-end history, or left out
            # while that history has no produce rate to go by); partitions never
            # sampled yet take a whole round, once.
            while not self._stopping.is_set() and (wait := next_round - time.monotonic()) > 0:
                if self.tracker.wanted_changed.wait(min(wait, 0.5)):
                    if self.tracker.partitions() - self._polled:
                        self.poll_once()
                    else:
                        self.tracker.wanted_changed.clear()
                        errors: Counter[str] = Counter()
                        self._look_up_timestamps(errors)
                        self.tracker.record_round(0.0, errors)

    def poll_once(self) -> None:
        """One round; every failure is counted in the tracker, none is raised."""
        errors: Counter[str] = Counter()
        sampled_at = time.time()
        fetched = False
        self.tracker.wanted_changed.clear()  # before reading: a change during the round is kept
        try:
            wanted = self._polled = self.tracker.partitions()
            topics = {t for t, _ in wanted}
            self.unreadable.begin_round(topics)
            leaders, missing = self._leaders(topics | {OFFSETS_TOPIC})
            unreadable: dict[str, set[str]] = defaultdict(set)
            for topic, partition in wanted - leaders.keys():
                reason = missing.get((topic, partition)) or missing.get((topic, -1)) or "unknown_topic_or_partition"
                errors[reason] += 1
                if reason in STEADY_REASONS:
                    unreadable[reason].add(topic)
            for reason, topics in unreadable.items():
                self.unreadable.failed(topics, reason)
            tracked = {tp: leader for tp, leader in leaders.items() if tp in wanted}
            ends = self._list_offsets(tracked, OffsetSpec.LATEST, IsolationLevel.READ_UNCOMMITTED, errors)
            self.unreadable.read({t for t, _ in ends})
            starts = self._list_offsets({tp: tracked[tp] for tp in ends}, OffsetSpec.EARLIEST,
                                        IsolationLevel.READ_UNCOMMITTED, errors)
            both = {tp: (starts[tp], ends[tp]) for tp in ends if tp in starts}
            self.tracker.record_offsets(both, sampled_at)
            self._leader_cache = tracked
            self._describe_topic_configs(errors)
            fetched = bool(both)
            fetched |= self._poll_offsets_topic(leaders, sampled_at, errors)
            self.tracker.forget_unwanted()
            self._look_up_timestamps(errors)
        except Exception as exc:  # the whole round: no metadata, broker unreachable, ...
            errors[error_reason(exc)] += 1
            log.warning("log-end poll failed (%s): %s", error_reason(exc), exc)
            self._admin.close()
        self.tracker.record_round(sampled_at if fetched else 0.0, errors)

    def _describe_topic_configs(self, errors: Counter[str]) -> None:
        """Read the settings of topics not seen for TOPIC_CONFIG_MAX_AGE_S (DescribeConfigs, one call for all
        of them): ``message.timestamp.type``, what "lag in seconds" is measured against on each topic, and
        ``retention.ms``, how long the group's next unread record may stay in the log, and ``cleanup.policy``
        (compact alone: no deletion by age, so no retention deadline)."""
        topics = sorted(self.tracker.topics_to_describe(TOPIC_CONFIG_MAX_AGE_S))
        if not topics:
            return
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic, list(TOPIC_CONFIGS)) for topic in topics]
        try:
            answer = self._admin.get().describe_configs(resources, config_filter="all")
        except Exception as exc:  # DescribeConfigs refused (ACLs) or failed: the settings stay unknown
            errors[error_reason(exc)] += 1
            log.warning("DescribeConfigs of %d topic(s) failed (%s): %s", len(topics), error_reason(exc), exc)
            self.tracker.record_topic_configs(dict.fromkeys(topics, TopicConfig()), time.time())  # not every round
            return
        found = {name: TopicConfig(str(configs.get("message.timestamp.type") or ""),
                                   _integer(configs.get("retention.ms")),
                                   str(configs.get("cleanup.policy") or "").replace(" ", ""))
                 for name, configs in config_values(answer, "topic").items()}
        self.tracker.record_topic_configs(found, time.time())

    def fetch_log_ends(self) -> bool | None:
        """A quick fetch, from any thread: log ends only (ListOffsets LATEST, one call per leader known from
        the last full round), log starts kept from the last sample; anything new or moved waits for a full
        round. True when it fetched something; None when the cluster could not be reached (a timeout or a
        connection failure), which a caller takes as a reason to stop asking for a while."""
        with self._quick_lock:
            errors: Counter[str] = Counter()
            sampled_at = time.time()
            fetched = False
            try:
                starts = self.tracker.log_starts()
                tracked = {tp: leader for tp, leader in self._leader_cache.items() if tp in starts}
                ends = self._list_offsets(tracked, OffsetSpec.LATEST, IsolationLevel.READ_UNCOMMITTED, errors,
                                          self._quick_admin)
                self.tracker.record_offsets({tp: (starts[tp], end) for tp, end in ends.items()}, sampled_at)
                fetched = bool(ends)
            except Exception as exc:
                errors[error_reason(exc)] += 1
                log.warning("quick log-end fetch failed (%s): %s", error_reason(exc), exc)
                self._quick_admin.close()
            self.tracker.record_round(sampled_at if fetched else 0.0, errors)
            if not fetched and (errors["timeout"] or errors["connection"]):
                return None
            return fetched

    def fetch_committed(self, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
        """The groups' committed offsets now (OffsetFetch: one request per coordinator for all of them, on the
        caller's thread and the quick client). kafka-python fails the whole call on any group- or
        partition-level error, so such a call is split in halves until the failing groups stand alone: the
        answer holds every group that answered, and a group missing from it was not answered (its error
        counted by reason). A timeout or a lost connection ends the fetch with what was answered so far."""
        found: dict[str, dict[TopicPartition, int]] = {}
        with self._quick_lock:
            self._fetch_isolating(sorted(set(groups)), found)
        return found

    def _fetch_isolating(self, groups: list[str], found: dict[str, dict[TopicPartition, int]]) -> bool:
        """OffsetFetch of ``groups`` into ``found``; False once the cluster could not be reached."""
        if not groups:
            return True
        try:
            answer = self._quick_admin.get().list_group_offsets(dict.fromkeys(groups))
        except Exception as exc:
            reason = error_reason(exc)
            if _partition_level(exc) and len(groups) > 1:
                middle = len(groups) // 2
                return self._fetch_isolating(groups[:middle], found) and self._fetch_isolating(groups[middle:],
                                                                                                found)
            self.tracker.record_round(0.0, {reason: len(groups)})
            log.warning("OffsetFetch of %d group(s) from %s failed (%s): %s", len(groups), groups[0], reason, exc)
            if reason in ("timeout", "connection"):
                self._quick_admin.close()
                return False
            return True
        for group, offsets in answer.items():
            found[group] = {(tp.topic, tp.partition): int(meta.offset) for tp, meta in offsets.items()
                            if meta.offset >= 0}
        return True

    def _poll_offsets_topic(self, leaders: Mapping[TopicPartition, int], sampled_at: float,
                            errors: Counter[str]) -> bool:
        offsets_topic = {tp: leader for tp, leader in leaders.items() if tp[0] == OFFSETS_TOPIC}
        hw = self._list_offsets(offsets_topic, OffsetSpec.LATEST, IsolationLevel.READ_UNCOMMITTED, errors)
        lso = self._list_offsets(offsets_topic, OffsetSpec.LATEST, IsolationLevel.READ_COMMITTED, errors)
        self.tracker.record_offsets_topic({p: o for (_, p), o in hw.items()},
                                          {p: o for (_, p), o in lso.items()}, sampled_at)
        return bool(hw)

    def _look_up_timestamps(self, errors: Counter[str]) -> None:
        wanted = self.tracker.next_lookups(self._lookups_per_round)
        if not wanted:
            return
        tried = [(tp, committed) for tp, (committed, _) in wanted.items()]
        try:
            found = self._timestamps.lookup(wanted)
        except Exception as exc:
            errors[error_reason(exc)] += 1
            log.warning("record timestamp lookup failed (%s): %s", error_reason(exc), exc)
            found = {}
        self.tracker.record_times({(tp, wanted[tp][0]): t for tp, t in found.items()}, tried, time.time())

    def _leaders(self, topics: Iterable[str]) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
        """Leader of every partition of ``topics``, and why partitions have none (a topic-level
        error is reported under partition -1)."""
        leaders: dict[TopicPartition, int] = {}
        missing: dict[TopicPartition, str] = {}
        for topic in self._admin.get().describe_topics(sorted(topics)):
            name = topic["name"]
            if topic.get("error_code", 0) != 0:
                missing[(name, -1)] = error_reason(Errors.for_code(topic["error_code"])())
                continue
            for part in topic.get("partitions", ()):
                tp = (name, part["partition_index"])
                if part.get("error_code", 0) != 0 or part.get("leader_id", -1) < 0:
                    missing[tp] = error_reason(Errors.for_code(part.get("error_code", 0) or 5)())
                else:
                    leaders[tp] = part["leader_id"]
        return leaders, missing

    def _list_offsets(self, leaders: Mapping[TopicPartition, int], spec: OffsetSpec, isolation: IsolationLevel,
                      errors: Counter[str], admin: LazyClient | None = None) -> dict[TopicPartition, int]:
        """Offsets by ``spec``, one call per leader; failures are counted per partition."""
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp, leader in leaders.items():
            by_leader[leader].append(tp)
        result: dict[TopicPartition, int] = {}
        for tps in by_leader.values():
            self._list_isolating(sorted(tps), spec, isolation, result, errors, admin or self._admin)
        return result

    def _list_isolating(self, tps: list[TopicPartition], spec: OffsetSpec, isolation: IsolationLevel,
                        result: dict[TopicPartition, int], errors: Counter[str], admin: LazyClient) -> None:
        try:
            answer = admin.get().list_partition_offsets(
                {KafkaTopicPartition(*tp): spec for tp in tps}, isolation_level=isolation)
        except Exception as exc:
            if not _partition_level(exc) or len(tps) == 1:
                reason = error_reason(exc)
                errors[reason] += len(tps)
                if reason in STEADY_REASONS:  # the same every round: named once (UnreadableTopics)
                    self.unreadable.failed({t for t, _ in tps}, reason)
                    log.debug("ListOffsets failed for %d partition(s) from %s (%s): %s", len(tps), tps[0], reason, exc)
                else:
                    log.warning("ListOffsets failed for %d partition(s) from %s (%s): %s",
                                len(tps), tps[0], reason, exc)
                return
            for part in _split(tps):
                self._list_isolating(part, spec, isolation, result, errors, admin)
            return
        result.update({(tp.topic, tp.partition): int(o.offset) for tp, o in answer.items()})

    def _close(self) -> None:
        self._admin.close()
        with self._quick_lock:
            self._quick_admin.close()
        self._timestamps.close()


def _split(tps: list[TopicPartition]) -> list[list[TopicPartition]]:
    """Halves by topic when several topics are asked for (errors are mostly per topic), else
    halves of the partitions."""
    topics = sorted({t for t, _ in tps})
    if len(topics) > 1:
        first = set(topics[: len(topics) // 2])
        return [[tp for tp in tps if tp[0] in first], [tp for tp in tps if tp[0] not in first]]
    return [tps[: len(tps) // 2], tps[len(tps) // 2:]]


def _integer(value: object) -> int | None:
    """A numeric setting's value, None when absent or not a number."""
    try:
        return int(str(value))
    except ValueError:
        return None
