"""Cluster facts the job needs besides offsets: KIP-848 topic ids mapped back to names, and each
KIP-848 group's session timeout and heartbeat interval (its group config, else the brokers').

KIP-848 assignments name topics by id. Up to Kafka 4.0 the group's partition-metadata record
(type 4) carried the names; 4.1 stopped writing it, so the names come from elsewhere: offset
commits that carry their topic's id (OffsetCommitValue v4, 4.1+) and cluster metadata.
:class:`TopicMetadata` asks the cluster (through its own admin client, apart from the lag
poller's, since lookups run on the batch thread) and :class:`TopicNames` keeps the answers: a
steady cluster costs no requests.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from decoders.reader import uuid_text
from streaming.cluster.client import LazyClient
from streaming.protocol import CONSUMER, GroupTimeouts, RebalanceEvent, TopicPartition

log = logging.getLogger(__name__)

TOPIC_ID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")  # validates an id's text; never tells an id from a name
SESSION_TIMEOUT_CONFIG = "group.consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "group.consumer.heartbeat.interval.ms"
# A group's own (GroupConfig, Kafka 4.0+; kafka-configs --entity-type groups): DescribeConfigs on the
# GROUP resource answers the value in force, the group's when set, else the brokers'.
GROUP_SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
GROUP_HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"
KAFKA_DEFAULT_TIMEOUTS = GroupTimeouts(45_000, 5_000)  # Kafka's defaults of the two broker settings
GROUP_CONFIGS_PER_REQUEST = 500  # groups described in one DescribeConfigs request
GROUP_TIMEOUTS_MAX_AGE_S = 300.0  # a group's timeouts are read again after this long
GROUP_TIMEOUTS_REMEMBERED = 100_000  # groups whose timeouts are cached (oldest forgotten first)
OFFSETS_TOPIC = "__consumer_offsets"
REFRESH_SECONDS = 5.0  # an id not in the cache asks the cluster at most this often
SESSION_TIMEOUT_MAX_AGE_S = 600.0  # the brokers' session timeout is read again after this long
NAMES_REMEMBERED = 100_000  # topic ids named (oldest learnt first: a deleted topic's id is never asked for again)
UNRESOLVED_REMEMBERED = 10_000  # ids already counted as unresolved, or asked and not named yet (oldest forgotten first)


class TopicMetadata:
    """Topic ids and names, and broker configuration, from the cluster; a component (see
    :mod:`streaming.lifecycle`).

    ``client_config`` is kafka-python configuration (see
    :func:`streaming.cluster.client.client_config_from_kafka_options`). The admin client is
    made at the first lookup, not at construction.
    """

    name = "topic-metadata"

    def __init__(self, bootstrap_servers: str, client_config: Mapping[str, Any] | None = None,
                 admin_factory: Callable[..., Any] = KafkaAdminClient) -> None:
        self._config = {"bootstrap_servers": bootstrap_servers, "client_id": "rebalance-monitor-metadata",
                        **(client_config or {})}
        self._admin = LazyClient(admin_factory, self._config, "metadata client")

    def topic_names(self, topics: Iterable[str] | None = None) -> dict[str, str]:
        """Topic id (Kafka's text uuid) → name (all topics when ``topics`` is None).

        kafka-python 3 returns topic ids in Metadata responses (v10+). Topics without an id
        (older brokers) and topics the cluster does not know are left out.
        """
        return self._describe(list(topics) if topics is not None else None)

    def names_by_id(self, topic_ids: Collection[str]) -> dict[str, str]:
        """Topic id → name for those of ``topic_ids`` the cluster knows (Metadata by topic id, v12+):
        one request however many; a deleted topic's id is left out."""
        return self._describe([uuid.UUID(bytes=_id_bytes(t)) for t in topic_ids]) if topic_ids else {}

    def partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has; None while the cluster does not know it (no group has
        made ``__consumer_offsets`` yet) or refuses to say. Never creates it: an admin client's
        Metadata request does not ask for creation."""
        [described] = self._describe_topics([topic])
        partitions = described.get("partitions") or ()
        return len(partitions) if described.get("error_code") == 0 and partitions else None

    def consumer_session_timeout_ms(self) -> int | None:
        """The consumer protocol's session timeout as a broker is configured (DescribeConfigs of a
        broker leading an offsets-topic partition: found through metadata the job may read anyway,
        no DescribeCluster); KIP-848 records do not carry it. None when the broker does not have
        the setting. Needs DescribeConfigs on the cluster; refused, the caller keeps Kafka's default."""
        return _int_config(self._broker_configs([SESSION_TIMEOUT_CONFIG]), SESSION_TIMEOUT_CONFIG)

    def consumer_group_timeouts(self, groups: Collection[str]) -> dict[str, GroupTimeouts]:
        """Each group's consumer-protocol session timeout and heartbeat interval in force.

        DescribeConfigs on the GROUP resources (type 32, Kafka 4.0+), a few hundred groups per request:
        Kafka answers a group's value, or the brokers' where the group has none. A group the answer
        leaves without them (DescribeConfigs on it refused: kafka-python reports the error as no
        configs; a broker before 4.0 knows no GROUP resource) gets the brokers' settings, read from a
        broker leading an offsets-topic partition; Kafka's defaults where that is refused too."""
        wanted = sorted(set(groups))
        found: dict[str, GroupTimeouts] = {}
        admin = self._admin.get()
        for start in range(0, len(wanted), GROUP_CONFIGS_PER_REQUEST):
            chunk = wanted[start:start + GROUP_CONFIGS_PER_REQUEST]
            answer = admin.describe_configs(
                [ConfigResource(ConfigResourceType.GROUP, group, [GROUP_SESSION_TIMEOUT_CONFIG,
                                                                 GROUP_HEARTBEAT_INTERVAL_CONFIG])
                 for group in chunk], config_filter="all")
            for group, configs in (answer.get("group") or {}).items():
                session = _int_config(configs, GROUP_SESSION_TIMEOUT_CONFIG)
                heartbeat = _int_config(configs, GROUP_HEARTBEAT_INTERVAL_CONFIG)
                if session is not None and heartbeat is not None:
                    found[group] = GroupTimeouts(session, heartbeat)
        missing = [g for g in wanted if g not in found]
        if missing:
            brokers = self._broker_timeouts()
            found.update(dict.fromkeys(missing, brokers))
        return found

    def _broker_timeouts(self) -> GroupTimeouts:
        """The brokers' ``group.consumer.*`` settings (Kafka's defaults where not readable)."""
        try:
            configs = self._broker_configs([SESSION_TIMEOUT_CONFIG, HEARTBEAT_INTERVAL_CONFIG])
        except Exception as exc:
            log.warning("could not read the brokers' %s: %s", SESSION_TIMEOUT_CONFIG, exc)
            configs = {}
        session = _int_config(configs, SESSION_TIMEOUT_CONFIG)
        heartbeat = _int_config(configs, HEARTBEAT_INTERVAL_CONFIG)
        return GroupTimeouts(session if session is not None else KAFKA_DEFAULT_TIMEOUTS.session_timeout_ms,
                             heartbeat if heartbeat is not None else KAFKA_DEFAULT_TIMEOUTS.heartbeat_interval_ms)

    def _broker_configs(self, names: list[str]) -> dict[str, Any]:
        """``names`` as a broker leading an offsets-topic partition has them ({} without a leader)."""
        admin = self._admin.get()
        [offsets_topic] = admin.describe_topics([OFFSETS_TOPIC])
        leaders = sorted({p["leader_id"] for p in offsets_topic.get("partitions") or () if p.get("leader_id", -1) >= 0})
        if not leaders:
            return {}
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(leaders[0]), names)],
                                        config_filter="all")
        merged: dict[str, Any] = {}
        for configs in (answer.get("broker") or {}).values():
            merged.update(configs)
        return merged

    def _describe_topics(self, topics: list[Any] | None) -> list[dict[str, Any]]:
        """kafka-python's describe_topics; a failed client is dropped, made afresh at the next lookup."""
        try:
            return self._admin.get().describe_topics(topics)
        except Exception:
            self._admin.close()
            raise

    def _describe(self, topics: list[Any] | None) -> dict[str, str]:
        names = {}
        for topic in self._describe_topics(topics):
            topic_id = topic.get("topic_id")
            if topic.get("error_code") != 0 or not topic_id or not topic.get("name"):
                continue
            parsed = topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))
            if parsed.int:
                names[uuid_text(parsed.bytes)] = topic["name"]
        return names

    def start(self) -> None:
        """Nothing to open ahead of the first lookup."""

    def stop(self) -> None:
        self._admin.close()


def _int_config(configs: Mapping[str, Any], name: str) -> int | None:
    entry = configs.get(name)
    if entry is None or entry.get("value") is None:
        return None
    try:
        return int(entry["value"])
    except (TypeError, ValueError):
        return None


def _id_bytes(text: str) -> bytes:
    """Kafka's text topic id (22 characters of unpadded url-safe base64) as its 16 bytes."""
    if not TOPIC_ID_TEXT.match(text):
        raise ValueError(f"not a topic id: {text!r}")
    return base64.urlsafe_b64decode(text + "==")


class TopicNames:
    """KIP-848 topic ids → names, cached: the group stage's :class:`~streaming.protocol.ClusterFacts`.

    ``describe(ids)`` maps ids to names from cluster metadata; it is called only for ids not in
    the cache, at most once every ``refresh_s`` (an id asked meanwhile waits for the next one),
    so a steady cluster costs no requests and a burst of new groups one request. :meth:`learn`
    adds the pairs offset commits carry (no request at all). An id a lookup did not resolve
    (a deleted topic: ``unknown_topic_id``; the request failed: ``metadata_error``) is counted
    once by reason in :meth:`unresolved`, however often it is asked for again; callers leave
    such ids out rather than show or measure them as topic names.

    Which strings are ids is what callers ask for: the group stage asks for the topics of the
    KIP-848 records' Uuid fields (:func:`~streaming.groups.model.referenced_topic_ids`), never for a
    name. A topic name can have an id's shape (any 22 characters of ``[A-Za-z0-9_-]``, say
    ``customer-orders-events``), so :meth:`resolve` renames only strings known as ids (named, or
    asked for and not named yet), never a string for its shape.

    ``session_timeout()`` reads the brokers' ``group.consumer.session.timeout.ms``, kept for
    ``SESSION_TIMEOUT_MAX_AGE_S``. ``group_timeouts(groups)`` reads KIP-848 groups' timeouts in force
    (:meth:`TopicMetadata.consumer_group_timeouts`), each kept for ``group_max_age_s``: only the groups
    asked for and not cached (or cached longer) go in the one request; a failed request is tried again
    after ``refresh_s``, meanwhile a group keeps what it had, else gets the brokers' session timeout.
    Without it every group gets the brokers' session timeout and Kafka's default heartbeat interval.
    Thread-safe (the batch thread and the scrape's lag renders ask).
    """

    def __init__(self, describe: Callable[[Collection[str]], dict[str, str]],
                 session_timeout: Callable[[], int | None] | None = None, refresh_s: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 group_timeouts: Callable[[Collection[str]], dict[str, GroupTimeouts]] | None = None,
                 group_max_age_s: float = GROUP_TIMEOUTS_MAX_AGE_S) -> None:
        self._describe = describe
        self._session_timeout = session_timeout
        self._group_timeouts = group_timeouts
        self._group_max_age_s = group_max_age_s
        self._groups: dict[str, tuple[GroupTimeouts, float]] = {}  # group -> (timeouts, read at)
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        self._asked_at = -math.inf
        self._counted: dict[str, str] = {}  # id -> the reason it was counted for (insertion ordered)
        self._unnamed: dict[str, None] = {}  # ids asked for that have no name yet (insertion ordered)
        self._unresolved: dict[str, int] = {}
        self._session: tuple[int | None, float] | None = None

    def learn(self, names: Mapping[str, str]) -> None:
        """Pairs learnt without asking (the topic id an offset commit carries beside its topic)."""
        with self._lock:
            learnt = {t: n for t, n in names.items() if t and n}
            for topic_id in learnt:  # learnt again: the newest, the last forgotten
                self._names.pop(topic_id, None)
            self._names.update(learnt)
            _forget_oldest(self._names, NAMES_REMEMBERED)
            for topic_id in learnt:
                self._unnamed.pop(topic_id, None)

    def topic_names(self, topic_ids: Collection[str]) -> dict[str, str]:
        with self._lock:
            unknown = {t for t in topic_ids if t not in self._names}
            for topic_id in unknown:
                self._unnamed[topic_id] = None
            _forget_oldest(self._unnamed, UNRESOLVED_REMEMBERED)
            due = bool(unknown) and self._clock() - self._asked_at >= self._refresh_s
            if due:
                self._asked_at = self._clock()
        if due:  # the request goes out without the lock: a scrape reading the counts never waits for it
            self._ask(unknown)
        with self._lock:
            return {t: self._names[t] for t in topic_ids if t in self._names}

    def _ask(self, unknown: set[str]) -> None:
        wellformed = {t for t in unknown if TOPIC_ID_TEXT.match(t)}
        try:
            found = self._describe(sorted(wellformed)) if wellformed else {}
        except Exception as exc:
            log.warning("could not map %d topic id(s) to names: %s", len(wellformed), exc)
            found, failed = {}, wellformed
        else:
            failed = set()
        with self._lock:
            self._names.update(found)
            _forget_oldest(self._names, NAMES_REMEMBERED)
            for topic_id in found:
                self._unnamed.pop(topic_id, None)
            self._count(failed, "metadata_error")
            self._count(wellformed - failed - found.keys(), "unknown_topic_id")  # a malformed string is no id

    def _count(self, ids: Iterable[str], reason: str) -> None:
        for topic_id in ids:
            if self._counted.get(topic_id) == reason:
                continue
            self._counted.pop(topic_id, None)
            self._counted[topic_id] = reason
            self._unresolved[reason] = self._unresolved.get(reason, 0) + 1
            _forget_oldest(self._counted, UNRESOLVED_REMEMBERED)

    def unresolved(self) -> dict[str, int]:
        """Topic ids a lookup could not name so far, counted once each, by reason."""
        with self._lock:
            return dict(self._unresolved)

    def consumer_session_timeout_ms(self) -> int | None:
        if self._session_timeout is None:
            return None
        now = self._clock()
        with self._lock:
            if self._session is not None and now - self._session[1] < SESSION_TIMEOUT_MAX_AGE_S:
                return self._session[0]
            known = self._session[0] if self._session is not None else None
        try:
            known = self._session_timeout()
        except Exception as exc:  # kept (or unknown) until the next try
            log.warning("could not read %s: %s", SESSION_TIMEOUT_CONFIG, exc)
        with self._lock:
            self._session = (known, now)
        return known

    def consumer_group_timeouts(self, groups: Collection[str]) -> dict[str, GroupTimeouts]:
        """Each of ``groups``' consumer-protocol timeouts in force (see the class docstring)."""
        if self._group_timeouts is None:
            brokers = self._brokers_timeouts()
            return dict.fromkeys(groups, brokers)
        now = self._clock()
        with self._lock:
            due = sorted({g for g in groups
                          if g not in self._groups or now - self._groups[g][1] >= self._group_max_age_s})
        if due:
            try:
                found = self._group_timeouts(due)
            except Exception as exc:
                log.warning("could not read the timeouts of %d group(s): %s", len(due), exc)
                with self._lock:
                    kept = {g: self._groups[g][0] for g in due if g in self._groups}
                brokers = self._brokers_timeouts()
                found = {g: kept.get(g, brokers) for g in due}
                read_at = now - self._group_max_age_s + self._refresh_s  # asked again after refresh_s
            else:
                read_at = now
            with self._lock:
                for group in due:
                    if group in found:
                        self._groups.pop(group, None)
                        self._groups[group] = (found[group], read_at)
                _forget_oldest(self._groups, GROUP_TIMEOUTS_REMEMBERED)
        with self._lock:
            return {g: self._groups[g][0] for g in groups if g in self._groups}

    def _brokers_timeouts(self) -> GroupTimeouts:
        session = self.consumer_session_timeout_ms()
        return GroupTimeouts(session or KAFKA_DEFAULT_TIMEOUTS.session_timeout_ms,
                             KAFKA_DEFAULT_TIMEOUTS.heartbeat_interval_ms)

    def resolve(self, events: list[RebalanceEvent]) -> list[RebalanceEvent]:
        """Events whose moved partitions still name a topic by id (folded before its name was known),
        renamed where the id is known now. A moved partition's topic is an id only if it was asked for
        as one (see the class docstring); a name shaped like an id is left as it is, never looked up."""
        with self._lock:
            ids = {topic for e in events if e.group_type == CONSUMER
                   for topic, _ in e.moved_partitions if topic in self._names or topic in self._unnamed}
        if not ids:
            return events
        names = self.topic_names(ids)
        return [dataclasses.replace(e, moved_partitions=tuple(_named(tp, names) for tp in e.moved_partitions))
                if e.group_type == CONSUMER else e for e in events]


def _forget_oldest(remembered: dict[Any, Any], limit: int) -> None:
    """Drop the first-inserted entries of ``remembered`` beyond ``limit``."""
    while len(remembered) > limit:
        del remembered[next(iter(remembered))]


def _named(tp: TopicPartition, names: Mapping[str, str]) -> TopicPartition:
    topic, partition = tp
    return names.get(topic, topic), partition
