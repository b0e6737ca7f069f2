"""Issue 30's prototype, second step: the project's real group fold inside ``transformWithStateInPandas``.

The job's own state-store fold (``--fold state-store``) grew out of it: streaming/groups/stateful. This one
stays for the prototype's measurements and its bucketed variant (``--buckets``), which the job does not have.

Keyed by offsets-topic partition (the better key of the first step, docs/scale-out.md), each key's
call builds a :class:`~streaming.groups.stage.GroupStage` holding only the groups its rows name,
loaded from the state store, folds the rows with the stage's own ``apply`` and ``changes`` (the
rebalance definition, causes, departures, summaries: everything the driver fold does), writes the
groups back and emits one row per changed or removed group: the pickled
:class:`~streaming.protocol.GroupChange` and that group's rebalance events. The driver then only
renders what it receives (:class:`ChangesSink`).

What a group keeps in the state store (:data:`GROUP_STATE`): one pickled value holding its
snapshot, its committed offsets and the two things the stage remembers about what it last handed
over (whether that summary showed member churn, and the activity and last commit it showed).
``--bucket`` groups of a partition share one state value instead (a map entry per bucket), which
trades the state store's per-call round trips for larger values rewritten whole.

Left out, and why: the abandoned deadlines (a processing-time timer a group in the real operator),
KIP-848 topic names and timeouts (they would come in with the batch: W2's groups are classic and
need neither), ``--max-groups`` (a limit over all keys, which one key cannot see), dead letters and
record counts (the decode stage's, unchanged by where the fold runs).
"""

from __future__ import annotations

import pickle
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streaming.groups.stage import GroupStage
from streaming.groups.stateful.saved import Saved, load, save
from streaming.protocol import STAGE_SCHEMA, BatchInput, GroupChange, OutputKind, RebalanceEvent

GROUP_STATE = "groups binary"
KEY_SCHEMA = "key string"
CHANGE_SCHEMA = "group string, change binary, events binary, removed boolean"
CHANGE_COLUMNS = [c.split()[0] for c in CHANGE_SCHEMA.split(", ")]

def bucket_of(group: str, buckets: int) -> str:
    """The state key of ``group``: the group itself, or one of ``buckets`` shared keys (stable across
    processes: ``hash`` of a string is salted per interpreter)."""
    return group if buckets <= 0 else str(zlib.crc32(group.encode()) % buckets)


def fold_rows(table: pa.Table, state: dict[str, dict[str, Saved]], now_ms: int) -> tuple[pd.DataFrame, set[str]]:
    """Fold one key's rows of a batch into ``state`` (state key -> group -> saved, only the keys the rows
    name, loaded by the caller); the change rows and the state keys to write back."""
    batch = BatchInput.from_arrow(table)
    stage = GroupStage()
    for groups in state.values():
        for group, saved in groups.items():
            load(stage, group, saved)
    result = stage.apply(batch)
    events: dict[str, list[RebalanceEvent]] = defaultdict(list)
    for event in result.events:
        events[event.group].append(event)
    changes: list[GroupChange] = stage.changes(result, now_ms)
    rows: list[tuple[str, bytes | None, bytes | None, bool]] = [
        (change.group, pickle.dumps(change, pickle.HIGHEST_PROTOCOL), logged(events, change.group), False)
        for change in changes]
    rows += [(group, None, logged(events, group), True) for group in sorted(result.removed)]
    touched: set[str] = set()
    for key, groups in state.items():
        for group in list(groups):
            if group in result.removed:
                del groups[group]
                touched.add(key)
            elif group in result.changed:
                groups[group] = save(stage, group)
                touched.add(key)
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS), touched


def logged(events: dict[str, list[RebalanceEvent]], group: str) -> bytes | None:
    """A group's events of the batch, pickled (a group removed by the batch can have rebalanced in it first)."""
    return pickle.dumps(events[group], pickle.HIGHEST_PROTOCOL) if events.get(group) else None


def groups_of(table: pa.Table) -> list[str]:
    return pc.unique(table.column("group")).to_pylist()


def processor(buckets: int, clock: Callable[[], float] = time.time) -> Any:
    """The processor (a class made here: pyspark's streaming module is imported only where it runs); ``clock``
    (seconds) dates its summaries."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class RealFold(StatefulProcessor):
        """Keyed by offsets-topic partition; a map of group (or bucket) -> pickled groups."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.groups = handle.getMapState("groups", KEY_SCHEMA, GROUP_STATE)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            frame = pd.concat(list(rows))
            table = pa.Table.from_pandas(frame, schema=STAGE_SCHEMA, preserve_index=False)
            state: dict[str, dict[str, Saved]] = {}
            for group in groups_of(table):
                state_key = bucket_of(group, buckets)
                if state_key not in state:
                    value = self.groups.getValue((state_key,))
                    state[state_key] = pickle.loads(value[0]) if value else {}
                state[state_key].setdefault(group, (None, None, None, None))
            # The executor's clock, as the driver fold reads the driver's: the processing-time mode would give
            # every key one batch time, but it also makes every trigger run a batch (timers may be due), so
            # processAllAvailable never returns and an idle query never idles.
            changes, touched = fold_rows(table, state, int(clock() * 1000))
            for state_key in touched:
                if state[state_key]:
                    self.groups.updateValue((state_key,), (pickle.dumps(state[state_key], pickle.HIGHEST_PROTOCOL),))
                else:
                    self.groups.removeKey((state_key,))
            yield changes

        def close(self) -> None:
            pass

    return RealFold()


def folded_input(decoded: Any) -> Any:
    """The decode stage's output the fold reads (commits and group records), keyed by offsets-topic partition."""
    from pyspark.sql import functions as F

    rows = decoded.where(F.col("kind").isin(int(OutputKind.COMMIT), int(OutputKind.GROUP_RECORD)))
    return rows.groupBy("kafka_partition")


class ChangesSink:
    """``foreachBatch`` on the driver: the changed groups' rows collected as Arrow and rendered by the
    project's publisher; events appended to the event log. The driver keeps the rendered series only."""

    def __init__(self, publisher: Any, event_log: Any) -> None:
        self.publisher, self.event_log = publisher, event_log
        self.groups: set[str] = set()

    def __call__(self, df: Any, batch_id: int) -> None:
        table = df.toArrow()
        events: list[RebalanceEvent] = []
        with self.publisher.batch():
            for group, change, logged, removed in zip(*(table.column(c).to_pylist() for c in CHANGE_COLUMNS),
                                                      strict=True):
                if logged is not None:
                    events.extend(pickle.loads(logged))
                if removed:
                    self.publisher.remove(group)
                    self.groups.discard(group)
                else:
                    self.publisher.apply(pickle.loads(change))
                    self.groups.add(group)
        self.event_log.append(batch_id, events)
