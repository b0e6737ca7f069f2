"""What the state-store fold hands the driver: one row per changed or removed group, one row of counts a key.

A change row carries the pickled :class:`~streaming.protocol.GroupChange` (as the driver fold hands it to the
publisher) and the group's rebalance events of the batch; a removed row only the events (a group deleted in
the batch that rebalanced it keeps them). A key's counts row (``group`` null) carries what the driver fold
counts for the whole batch (records read, errors, dead letters, limits hit, how far each partition was read),
so the driver adds up the keys' rows into the figures one batch would have given.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streaming.protocol import DeadLetter, GroupChange, RebalanceEvent
from streaming.pylists import pylist, pylists

SCHEMA = "group string, change binary, events binary, removed boolean, counts binary"
COLUMNS = [c.split()[0] for c in SCHEMA.split(", ")]
ARROW_SCHEMA = pa.schema([("group", pa.string()), ("change", pa.binary()), ("events", pa.binary()),
                          ("removed", pa.bool_()), ("counts", pa.binary())])


@dataclass
class KeyCounts:
    """One key's share of a batch's counts (summed by :meth:`add`)."""

    records: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    newest_record_ms: int | None = None
    read_through_ms: int | None = None  # the oldest of the key's partitions' newest records read
    dead_letters: list[DeadLetter] = field(default_factory=list)
    limit_hits: Counter[str] = field(default_factory=Counter)
    members_dropped: dict[str, int] = field(default_factory=dict)  # of the groups summarised in the batch

    def add(self, other: KeyCounts) -> None:
        self.records.update(other.records)
        self.errors.update(other.errors)
        self.newest_record_ms = _newest(self.newest_record_ms, other.newest_record_ms)
        if other.read_through_ms is not None:
            self.read_through_ms = (other.read_through_ms if self.read_through_ms is None
                                    else min(self.read_through_ms, other.read_through_ms))
        self.dead_letters.extend(other.dead_letters)
        self.limit_hits.update(other.limit_hits)
        self.members_dropped.update(other.members_dropped)

    @property
    def folded_through_ms(self) -> int | None:
        """As :attr:`streaming.protocol.BatchInput.folded_through_ms`, over every key."""
        return self.read_through_ms if self.read_through_ms is not None else self.newest_record_ms


def _newest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


Row = tuple[str | None, bytes | None, bytes | None, bool, bytes | None]


def change_row(change: GroupChange, events: list[RebalanceEvent]) -> Row:
    return change.group, _dumps(change), _dumps(events) if events else None, False, None


def removed_row(group: str, events: list[RebalanceEvent]) -> Row:
    return group, None, _dumps(events) if events else None, True, None


def counts_row(counts: KeyCounts) -> Row:
    return None, None, None, False, _dumps(counts)


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


@dataclass
class Handed:
    """A batch's rows read back on the driver."""

    changes: list[GroupChange] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)
    events: list[RebalanceEvent] = field(default_factory=list)
    counts: KeyCounts = field(default_factory=KeyCounts)

    @classmethod
    def without_changes(cls, table: pa.Table) -> Handed:
        """The batch's events, removed groups and counts (its changes are read by :func:`changes_in`)."""
        handed = cls()
        rest = table.filter(pc.or_(pc.is_valid(table.column("events")),
                                   pc.or_(pc.is_null(table.column("change")), pc.is_valid(table.column("counts")))))
        for group, events, removed, counts in zip(*pylists(rest, ("group", "events", "removed", "counts")),
                                                  strict=True):
            if counts is not None:
                handed.counts.add(pickle.loads(counts))
                continue
            if events is not None:
                handed.events.extend(pickle.loads(events))
            if removed:
                handed.removed.add(group)
        return handed


def changes_in(table: pa.Table, rows: int) -> Iterator[list[GroupChange]]:
    """The changes of ``table``, ``rows`` rows at a time: a first batch's hundreds of thousands of changes are
    never all unpickled at once."""
    changes = table.filter(pc.is_valid(table.column("change"))).column("change")
    for start in range(0, len(changes), rows):
        yield [pickle.loads(value) for value in pylist(changes.slice(start, rows))]
