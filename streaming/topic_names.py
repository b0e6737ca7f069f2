"""KIP-848 assignments name topics by id; cluster metadata maps them back to names."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable

from streaming.state import RebalanceEvent

log = logging.getLogger(__name__)

TOPIC_ID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")


class TopicNames:
    """Looked up only when an event carries an id not seen before: a steady cluster costs no requests."""

    def __init__(self, lookup: Callable[[], dict[str, str]]) -> None:
        self._lookup = lookup
        self._names: dict[str, str] = {}

    def resolve(self, events: list[RebalanceEvent]) -> list[RebalanceEvent]:
        labels = [label.rpartition(":") for e in events for label in e.moved_partitions]
        unknown = {topic for topic, _, _ in labels if TOPIC_ID_TEXT.match(topic) and topic not in self._names}
        if unknown:
            try:
                self._names.update(self._lookup())
            except Exception:  # names are cosmetic here: keep the ids rather than lose the batch
                log.warning("could not map topic ids to names", exc_info=True)
        return [dataclasses.replace(e, moved_partitions=tuple(self._name(label) for label in e.moved_partitions))
                for e in events]

    def _name(self, label: str) -> str:
        topic, _, partition = label.rpartition(":")
        return f"{self._names.get(topic, topic)}:{partition}"
