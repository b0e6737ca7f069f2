"""The stateful processor: one offsets-topic partition's groups folded by the driver fold's own stage.

A key's call builds a :class:`~streaming.groups.stage.GroupStage` holding only the groups its rows name
(read from the map state), folds the rows with the stage's ``apply`` and ``changes`` (the rebalance
definition, causes, departures, summaries: what the driver fold does), writes back the groups that changed,
removes the groups that went, and yields :mod:`.rows`. KIP-848 topic names and group timeouts come from the
executor's own metadata client (:func:`cluster_facts`), asked only when a batch needs them.

Once every ``--expiry-sweep-seconds`` a key's call also loads all its groups and forgets those past
``--group-ttl-seconds``; a partition nothing is written to is swept at its next record.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.stateful.rows import COLUMNS, KeyCounts, Row, change_row, counts_row, removed_row
from streaming.groups.stateful.saved import (
    MAP_KEY_SCHEMA,
    MAP_VALUE_SCHEMA,
    STATE_NAME,
    Saved,
    dumps,
    load,
    loads,
    save,
)
from streaming.protocol import STAGE_SCHEMA, BatchInput, OutputKind, RebalanceEvent

if TYPE_CHECKING:
    from streaming.cluster.metadata import TopicNames

KEY_COLUMN = "fold_key"  # the offsets-topic partition; -1 for the decode's counts without one
SWEEP_STATE = "swept"


@dataclass(frozen=True)
class FoldSettings:
    """What every key's fold is given (pickled to the executors with the processor)."""

    limits: StageLimits = field(default_factory=StageLimits)
    group_ttl_ms: int = 7 * 24 * 3600 * 1000
    sweep_ms: int = 300_000
    bootstrap_servers: str | None = None  # None: no metadata client (KIP-848 groups keep topic ids)
    # The --kafka.* settings as given (text: a client config holds objects such as an OAUTHBEARER token
    # provider, which do not travel to the executors; each worker builds its own from these).
    kafka_options: tuple[tuple[str, str], ...] = ()


@lru_cache(maxsize=4)
def cluster_facts(bootstrap_servers: str, kafka_options: tuple[tuple[str, str], ...]) -> TopicNames:
    """One metadata client per Python worker and cluster (it connects at its first question)."""
    from streaming.cluster.client import client_config_from_kafka_options
    from streaming.cluster.metadata import TopicMetadata, TopicNames

    metadata = TopicMetadata(bootstrap_servers, client_config_from_kafka_options(dict(kafka_options)))
    return TopicNames(metadata.names_by_id, metadata.consumer_session_timeout_ms,
                      group_timeouts=metadata.consumer_group_timeouts)


def fold_key(table: pa.Table, saved: dict[str, Saved], settings: FoldSettings, facts: TopicNames | None,
             now_ms: int, sweep: bool = False) -> tuple[list[Row], dict[str, Saved], set[str]]:
    """Fold one key's rows of a batch on the saved state of the groups they name (all its groups with
    ``sweep``): the rows for the driver, the groups to write back and the groups to remove."""
    batch = BatchInput.from_arrow(table)
    stage = GroupStage(settings.limits, facts)
    for group, value in saved.items():
        load(stage, group, value)
    result = stage.apply(batch)
    if sweep:
        expired = stage.expire(now_ms, settings.group_ttl_ms).removed
        result.removed |= expired
        result.changed -= expired
    events = result.events
    if facts is not None:
        events = facts.resolve(events)
    by_group: dict[str, list[RebalanceEvent]] = defaultdict(list)
    for event in events:
        by_group[event.group].append(event)
    rows: list[Row] = [change_row(change, by_group.get(change.group, []))
                       for change in stage.changes(result, now_ms)]
    rows += [removed_row(group, by_group.get(group, [])) for group in sorted(result.removed)]
    rows.append(counts_row(KeyCounts(batch.records, batch.errors + result.errors, batch.newest_record_ms,
                                     _read_through(table, batch), result.dead_letters, stage.take_limit_hits(),
                                     dict(stage.members_dropped))))
    written = {group: save(stage, group) for group in result.changed - result.removed}
    return rows, written, result.removed & saved.keys()


def _read_through(table: pa.Table, batch: BatchInput) -> int | None:
    """The oldest of the key's partitions' newest records read: the batch's folded-through time when the key read
    any partition, else None (the counts without a partition say nothing of how far one was read)."""
    read = pc.any(pc.equal(table.column("kind"), int(OutputKind.PARTITION_READ))).as_py()
    return batch.folded_through_ms if read else None


def groups_named(table: pa.Table) -> list[str]:
    return [g for g in pc.unique(table.column("group")).to_pylist() if g is not None]


def processor(settings: FoldSettings, clock: Callable[[], float] = time.time) -> Any:
    """The processor (its class made here: pyspark's streaming module loads only where it runs); ``clock``
    (seconds) dates summaries, as the driver's clock does for the driver fold."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class GroupFold(StatefulProcessor):
        """Keyed by offsets-topic partition; a map of group -> its pickled :data:`Saved`."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.groups = handle.getMapState(STATE_NAME, MAP_KEY_SCHEMA, MAP_VALUE_SCHEMA)
            self.swept = handle.getValueState(SWEEP_STATE, "at long")
            self.facts = (cluster_facts(settings.bootstrap_servers, settings.kafka_options)
                          if settings.bootstrap_servers else None)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            frame = pd.concat(list(rows))
            table = pa.Table.from_pandas(frame[STAGE_SCHEMA.names], schema=STAGE_SCHEMA, preserve_index=False)
            now_ms = int(clock() * 1000)
            # Asked first: Spark logs a warning for every get of a value state that holds nothing (a key's first call).
            swept = self.swept.get() if self.swept.exists() else None
            sweep = swept is None or now_ms - swept[0] >= settings.sweep_ms
            saved: dict[str, Saved] = {}
            if sweep:
                self.swept.update((now_ms,))
                if swept is not None:
                    saved = {k[0]: loads(v[0]) for k, v in self.groups.iterator()}
            # A key's first call (no sweep time yet) has nothing saved to read: a backlog's first batch would
            # otherwise ask the state server once for each of its groups, one round trip each, to hear nothing.
            for group in groups_named(table) if swept is not None else ():
                if group not in saved:
                    value = self.groups.getValue((group,))
                    if value is not None:
                        saved[group] = loads(value[0])
            out, written, removed = fold_key(table, saved, settings, self.facts, now_ms,
                                             sweep=sweep and swept is not None)
            for group, value in written.items():
                self.groups.updateValue((group,), (dumps(value),))
            for group in removed:
                self.groups.removeKey((group,))
            yield pd.DataFrame(out, columns=COLUMNS)

        def close(self) -> None:
            pass

    return GroupFold()
