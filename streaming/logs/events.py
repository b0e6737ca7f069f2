"""A durable, append-only log of rebalance events: one Parquet file per micro-batch and run.

Layout: ``<path>/run=<run id>/batch=<batch id>.parquet``. A *run* is one checkpoint's
life (its id comes from :func:`run_id_for_checkpoint`), so batch ids restarting at 0
under a new checkpoint land in a new directory and never touch earlier history: files
of other runs are never deleted or overwritten. Within a run Spark may execute a
micro-batch again after a failure; writing the batch's events through a temporary file
and an atomic rename makes the re-run replace its own first attempt instead of
duplicating it, and a re-run without events removes that attempt's file. Files written
before runs existed (``<path>/batch=<id>.parquet``) are still read.

Parquet schema (:data:`EVENT_SCHEMA`): the :class:`~streaming.protocol.RebalanceEvent`
fields with tuple fields as ``list<string>`` columns (moved partitions as ``"topic:partition"``),
times and durations as int64 milliseconds, plus ``run_id`` and ``batch_id``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from streaming.protocol import MEMBER_CHURN_CAP, RebalanceEvent

_STRINGS = pa.list_(pa.string())

EVENT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("group_type", pa.string(), nullable=False),
        pa.field("old_generation", pa.int64(), nullable=False),
        pa.field("new_generation", pa.int64(), nullable=False),
        pa.field("event_time_ms", pa.int64(), nullable=False),
        pa.field("protocol", pa.string()),
        pa.field("leader", pa.string()),
        pa.field("leader_changed", pa.bool_(), nullable=False),
        pa.field("members_joined", _STRINGS, nullable=False),
        pa.field("members_left", _STRINGS, nullable=False),
        pa.field("member_count", pa.int64(), nullable=False),
        pa.field("partitions_moved", pa.int64(), nullable=False),
        pa.field("moved_partitions", _STRINGS, nullable=False),
        pa.field("partitions_revoked", pa.int64(), nullable=False),
        pa.field("partitions_assigned", pa.int64(), nullable=False),
        pa.field("imbalance_before", pa.float64()),
        pa.field("imbalance_after", pa.float64()),
        # Added with runs; files written before them read these as null.
        pa.field("causes", _STRINGS),
        pa.field("departures", _STRINGS),
        pa.field("joined_clients", _STRINGS),
        pa.field("left_clients", _STRINGS),
        pa.field("duration_ms", pa.int64()),
    ]
)

_BATCH_FILE = re.compile(r"^batch=(\d+)\.parquet$")
_RUN_DIR = re.compile(r"^run=([A-Za-z0-9_.-]+)$")
_RUN_ID_FILE = "event-log-run-id"


def run_id_for_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> str:
    """The checkpoint's run id: created once (a random uuid) and kept in the checkpoint.

    A restart with the same checkpoint gets the same id (its re-run batches replace
    their own files); a new checkpoint gets a new one (its batch 0 is a new file).
    """
    path = Path(checkpoint_dir) / _RUN_ID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{_RUN_ID_FILE}.{os.getpid()}.tmp")
        tmp.write_text(uuid.uuid4().hex + "\n")
        try:
            os.link(tmp, path)  # fails if another process created it first: keep theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


class EventLog:
    """Rebalance events under one directory: this run's batches appended, every run read back.

    ``run_id`` names this run's directory (see :func:`run_id_for_checkpoint`); the
    default suits a single run and tests, not a deployment that may start new
    checkpoints.
    """

    def __init__(self, path: str | os.PathLike[str], run_id: str = "default") -> None:
        self.path = Path(path)
        self.use_run(run_id)

    def use_run(self, run_id: str) -> None:
        """Append under ``run_id`` from now on (the job names its checkpoint's run once it starts)."""
        if not _RUN_DIR.match(f"run={run_id}"):
            raise ValueError(f"run id {run_id!r}: letters, digits, '_', '.', '-' only")
        self.run_id = run_id
        self.run_path = self.path / f"run={run_id}"

    def _file(self, batch_id: int) -> Path:
        return self.run_path / f"batch={batch_id}.parquet"

    def append(self, batch_id: int, events: Sequence[RebalanceEvent]) -> None:
        """Write the batch's events, replacing whatever an earlier attempt of this run's batch wrote."""
        target = self._file(batch_id)
        if not events:
            target.unlink(missing_ok=True)
            return
        self.run_path.mkdir(parents=True, exist_ok=True)
        rows = [{"run_id": self.run_id, "batch_id": batch_id, **event.to_dict()} for event in events]
        table = pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)
        # A dot-name keeps readers (and Spark) off the partial file until the rename.
        tmp = self.run_path / f".{target.name}.{os.getpid()}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, target)

    def batch_ids(self) -> list[int]:
        """This run's batches that have events."""
        return sorted(_batch_files(self.run_path))

    def runs(self) -> list[str]:
        """Every run with a directory under the log, this one included once it wrote."""
        if not self.path.is_dir():
            return []
        return sorted(m.group(1) for p in self.path.iterdir() if (m := _RUN_DIR.match(p.name)) and p.is_dir())

    def files(self) -> list[Path]:
        """Every run's batch files, and files from before runs existed."""
        dirs = [self.path / f"run={run}" for run in self.runs()] + [self.path]
        return [path for d in dirs for path in _batch_files(d).values()]

    def read(self, group: str | None = None) -> list[RebalanceEvent]:
        """All events of all runs (or one group's), by event time, then group and generation."""
        files = [str(path) for path in self.files()]
        if not files:
            return []
        dataset = ds.dataset(files, schema=EVENT_SCHEMA, format="parquet")
        table = dataset.to_table(filter=pc.field("group") == group if group is not None else None)
        events = [RebalanceEvent.from_dict(row) for row in table.to_pylist()]
        events.sort(key=lambda e: (e.event_time_ms, e.group, e.new_generation))
        return events


def _batch_files(directory: Path) -> dict[int, Path]:
    if not directory.is_dir():
        return {}
    return {int(m.group(1)): p for p in directory.iterdir() if (m := _BATCH_FILE.match(p.name))}


def format_event(event: RebalanceEvent) -> str:
    """One timeline line: when, generation step, causes, assignor, leader, membership, movement, balance."""
    when = datetime.fromtimestamp(event.event_time_ms / 1000, UTC).isoformat(timespec="milliseconds")
    leader = event.leader or "-"
    if event.leader_changed:
        leader += " (changed)"
    left = [f"{m} ({how})" for m, how in zip(event.members_left, event.departures, strict=False)]
    left += list(event.members_left[len(left):])  # events logged before departures existed
    duration = "-" if event.duration_ms is None else f"{event.duration_ms / 1000:.3f}s"
    return (
        f"{when.replace('+00:00', 'Z')}  gen {event.old_generation} -> {event.new_generation}"
        f"  causes={','.join(event.causes) or '-'}"
        f"  protocol={event.protocol or '-'}  leader={leader}"
        f"  joined=[{', '.join(event.members_joined)}]  left=[{', '.join(left)}]"
        f"  members={event.member_count}"
        f"  moved={event.partitions_moved} revoked={event.partitions_revoked}"
        f" assigned={event.partitions_assigned}"
        f"  imbalance {_ratio(event.imbalance_before)} -> {_ratio(event.imbalance_after)}"
        f"  duration={duration}"
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def churn(events: Sequence[RebalanceEvent]) -> list[tuple[str, int]]:
    """Clients (``client_id@host``) by how often they joined or left in ``events``, busiest first."""
    counts = Counter(client for e in events for client in (*e.joined_clients, *e.left_clients))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:MEMBER_CHURN_CAP]


def print_history(path: str | os.PathLike[str], group: str, out: TextIO) -> int:
    """Print ``group``'s rebalance timeline, its causes and churn; returns how many rebalances."""
    events = EventLog(path).read(group)
    if not events:
        print(f"no rebalance events for group {group!r} in {path}", file=out)
        return 0
    print(f"group {group} ({events[-1].group_type}): {len(events)} rebalance(s)", file=out)
    for event in events:
        print(format_event(event), file=out)
    causes = Counter(cause for e in events for cause in e.causes)
    print("causes: " + ", ".join(f"{c}={n}" for c, n in sorted(causes.items(), key=lambda i: (-i[1], i[0]))),
          file=out)
    busiest = churn(events)
    print("churn (joins + leaves): " + (", ".join(f"{c} x{n}" for c, n in busiest) or "-"), file=out)
    return len(events)
