"""A durable log of rebalance events: one Parquet file per micro-batch, written once.

Spark may run a micro-batch again after a failure; writing the batch's events to
``batch=<id>.parquet`` through a temporary file and an atomic rename makes the re-run
replace the first attempt instead of duplicating it. Batches without events write no
file (and remove a stale one from an earlier attempt).

Parquet schema (:data:`EVENT_SCHEMA`): the :class:`~streaming.state.RebalanceEvent`
fields with list fields as ``list<string>`` columns, times as int64 milliseconds, plus
``batch_id`` (int64).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from streaming.state import RebalanceEvent

EVENT_SCHEMA = pa.schema(
    [
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("group_type", pa.string(), nullable=False),
        pa.field("old_generation", pa.int64(), nullable=False),
        pa.field("new_generation", pa.int64(), nullable=False),
        pa.field("event_time_ms", pa.int64(), nullable=False),
        pa.field("protocol", pa.string()),
        pa.field("leader", pa.string()),
        pa.field("leader_changed", pa.bool_(), nullable=False),
        pa.field("members_joined", pa.list_(pa.string()), nullable=False),
        pa.field("members_left", pa.list_(pa.string()), nullable=False),
        pa.field("member_count", pa.int64(), nullable=False),
        pa.field("partitions_moved", pa.int64(), nullable=False),
        pa.field("moved_partitions", pa.list_(pa.string()), nullable=False),
        pa.field("partitions_revoked", pa.int64(), nullable=False),
        pa.field("partitions_assigned", pa.int64(), nullable=False),
        pa.field("imbalance_before", pa.float64()),
        pa.field("imbalance_after", pa.float64()),
    ]
)

_BATCH_FILE = re.compile(r"^batch=(\d+)\.parquet$")


class EventLog:
    """Rebalance events under one directory, appended per batch id, read back in time order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _file(self, batch_id: int) -> Path:
        return self.path / f"batch={batch_id}.parquet"

    def append(self, batch_id: int, events: Sequence[RebalanceEvent]) -> None:
        """Write the batch's events, replacing whatever an earlier attempt of the batch wrote."""
        target = self._file(batch_id)
        if not events:
            target.unlink(missing_ok=True)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        rows = [{"batch_id": batch_id, **event.to_dict()} for event in events]
        table = pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)
        # A dot-name keeps readers (and Spark) off the partial file until the rename.
        tmp = self.path / f".{target.name}.{os.getpid()}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, target)

    def batch_ids(self) -> list[int]:
        if not self.path.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.path.iterdir() if (m := _BATCH_FILE.match(p.name)))

    def read(self, group: str | None = None) -> list[RebalanceEvent]:
        """All events (or one group's), by event time, then group and generation."""
        files = [str(self._file(batch_id)) for batch_id in self.batch_ids()]
        if not files:
            return []
        dataset = ds.dataset(files, schema=EVENT_SCHEMA, format="parquet")
        table = dataset.to_table(filter=pc.field("group") == group if group is not None else None)
        events = [RebalanceEvent.from_dict(row) for row in table.to_pylist()]
        events.sort(key=lambda e: (e.event_time_ms, e.group, e.new_generation))
        return events


def format_event(event: RebalanceEvent) -> str:
    """One timeline line: when, generation step, assignor, leader, membership, movement, balance."""
    when = datetime.fromtimestamp(event.event_time_ms / 1000, UTC).isoformat(timespec="milliseconds")
    leader = event.leader or "-"
    if event.leader_changed:
        leader += " (changed)"
    return (
        f"{when.replace('+00:00', 'Z')}  gen {event.old_generation} -> {event.new_generation}"
        f"  protocol={event.protocol or '-'}  leader={leader}"
        f"  joined=[{', '.join(event.members_joined)}]  left=[{', '.join(event.members_left)}]"
        f"  members={event.member_count}"
        f"  moved={event.partitions_moved} revoked={event.partitions_revoked}"
        f" assigned={event.partitions_assigned}"
        f"  imbalance {_ratio(event.imbalance_before)} -> {_ratio(event.imbalance_after)}"
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_history(path: str | os.PathLike[str], group: str, out: TextIO) -> int:
    """Print ``group``'s generation timeline, one line per rebalance; returns how many."""
    events = EventLog(path).read(group)
    if not events:
        print(f"no rebalance events for group {group!r} in {path}", file=out)
        return 0
    print(f"group {group} ({events[-1].group_type}): {len(events)} rebalance(s)", file=out)
    for event in events:
        print(format_event(event), file=out)
    return len(events)
