"""Cluster metadata the job needs besides offsets: KIP-848 topic ids mapped back to names.

KIP-848 assignments name topics by id. :class:`TopicMetadata` asks the cluster (a Metadata
request through its own admin client, apart from the lag poller's, since lookups run on the
batch thread) and :class:`TopicNames` calls it only when an event carries an id it has not
seen: a steady cluster costs no requests.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka import KafkaAdminClient

from decoders.reader import uuid_text
from streaming.cluster.client import LazyClient
from streaming.protocol import RebalanceEvent, TopicPartition

log = logging.getLogger(__name__)

TOPIC_ID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")


class TopicMetadata:
    """Topic ids and names from cluster metadata; a component (see :mod:`streaming.lifecycle`).

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
        (older brokers) are left out.
        """
        names = {}
        for topic in self._admin.get().describe_topics(list(topics) if topics is not None else None):
            topic_id = topic.get("topic_id")
            if topic.get("error_code") != 0 or not topic_id:
                continue
            parsed = topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))
            if parsed.int:
                names[uuid_text(parsed.bytes)] = topic["name"]
        return names

    def start(self) -> None:
        """Nothing to open ahead of the first lookup."""

    def stop(self) -> None:
        self._admin.close()


class TopicNames:
    """Event partitions named by topic id, renamed by topic name once metadata knows the id."""

    def __init__(self, lookup: Callable[[], dict[str, str]]) -> None:
        self._lookup = lookup
        self._names: dict[str, str] = {}

    def resolve(self, events: list[RebalanceEvent]) -> list[RebalanceEvent]:
        unknown = {topic for e in events for topic, _ in e.moved_partitions
                   if TOPIC_ID_TEXT.match(topic) and topic not in self._names}
        if unknown:
            try:
                self._names.update(self._lookup())
            except Exception:  # names are cosmetic here: keep the ids rather than lose the batch
                log.warning("could not map topic ids to names", exc_info=True)
        return [dataclasses.replace(e, moved_partitions=tuple(self._name(tp) for tp in e.moved_partitions))
                for e in events]

    def _name(self, tp: TopicPartition) -> TopicPartition:
        topic, partition = tp
        return self._names.get(topic, topic), partition
