"""A durable, append-only log of rebalance events: one Parquet file per micro-batch and run.

Layout: ``<path>/run=<run id>/batch=<batch id>.parquet``. A *run* is one Spark checkpoint's
life: its id is the id Spark keeps in the checkpoint's ``metadata`` file (the streaming
query's ``id``, the same across restarts from that checkpoint, new whenever the checkpoint
is new, including when only ``CHECKPOINT_DIR/spark`` was deleted). So batch ids restarting
at 0 land in a new directory and files of other runs are never overwritten (only the
retention, below, deletes them).
Within a run Spark may execute a micro-batch again after a failure; writing the batch's
events through a temporary file and an atomic rename makes the re-run replace its own
first attempt instead of duplicating it, and a re-run without events removes that
attempt's file. Files written before runs existed (``<path>/batch=<id>.parquet``) are
still read.

Bounded on disk by :meth:`EventLog.compact` and :meth:`EventLog.expire`, which the job runs about
hourly (:mod:`streaming.logs.upkeep`): a run's committed batch files are merged into *segments*,
``batch=<first>-<last>.parquet`` (at most :data:`SEGMENT_MAX_PARTS` batch files each, written to a
dot-file and renamed before the batch files go), and a file whose every event is older than the
retention is deleted, by the newest ``event_time_ms`` its Parquet footer records.

A new checkpoint starts from the beginning of the offsets topic, and its uncompacted tail
still holds the records of rebalances an earlier run logged: the same rebalance is then
in two runs. Readers give each rebalance once, by its identity (:func:`event_identity`).

Parquet schema (:data:`EVENT_SCHEMA`): the :class:`~streaming.protocol.RebalanceEvent`
fields with tuple fields as ``list<string>`` columns (moved partitions as ``"topic:partition"``),
times and durations as int64 milliseconds, plus ``run_id`` and ``batch_id``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from streaming.protocol import MEMBER_CHURN_CAP, RebalanceEvent

log = logging.getLogger(__name__)

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
_SEGMENT_FILE = re.compile(r"^batch=(\d+)-(\d+)\.parquet$")
_TEMPORARY = re.compile(r"^\..*\.tmp$")
# Batch files merged into one segment at most: an hour of batches at the default 5-second trigger, so
# that a backlog (a log from before compaction) becomes segments each spanning about an hour, and the
# retention drops it an hour at a time rather than keeping one huge segment for its newest event.
SEGMENT_MAX_PARTS = 720
# Rows buffered before a segment writes a row group: a segment's memory stays bounded whatever it merges.
_ROW_GROUP_ROWS = 65_536
# Reads that list the files again after one vanished under them (the job compacted or expired it).
_READ_ATTEMPTS = 3
_RUN_DIR = re.compile(r"^run=([A-Za-z0-9_.-]+)$")


def spark_run_id(spark_checkpoint: str | os.PathLike[str]) -> str | None:
    """The query id Spark keeps in its checkpoint (``metadata``: ``{"id": "<uuid>"}``), None before it wrote one.

    Spark writes the file when the query is created, before its first batch, and reads it
    back on every restart from that checkpoint.
    """
    path = Path(spark_checkpoint) / "metadata"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        run_id = json.loads(text)["id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a Spark checkpoint metadata file ({exc})") from None
    if not isinstance(run_id, str) or not _RUN_DIR.match(f"run={run_id}"):
        raise ValueError(f"{path}: unexpected query id {run_id!r}")
    return run_id


def event_identity(event: RebalanceEvent) -> tuple[str, int, int]:
    """What makes two logged events the same rebalance: group, new generation, time.

    The new generation (classic) or target assignment epoch (KIP-848) and the time come
    from the record that completed the assignment (classic: the state timestamp the value
    carries, else the record's timestamp; KIP-848: the record's timestamp), so every run
    that folds that record gives the same identity, whatever it saw before it. The old
    generation is left out: a run that started later (or after compaction) may have seen
    fewer of the group's earlier boundaries.
    """
    return event.group, event.new_generation, event.event_time_ms


def unique_events(events: Sequence[RebalanceEvent]) -> list[RebalanceEvent]:
    """Each rebalance once, in the given order: of two with one identity, the one that saw the
    nearer previous boundary (the larger old generation: it saw more of the group's history),
    else the first."""
    kept: dict[tuple[str, int, int], RebalanceEvent] = {}
    for event in events:
        key = event_identity(event)
        first = kept.get(key)
        if first is None or event.old_generation > first.old_generation:
            kept[key] = event
    return list(kept.values())


class EventLog:
    """Rebalance events under one directory: this run's batches appended, every run read back.

    The job makes the log :meth:`follow` its Spark checkpoint, so the run is the
    checkpoint's query id; ``run_id`` (default ``"default"``) suits tests and tools that
    only read.
    """

    def __init__(self, path: str | os.PathLike[str], run_id: str = "default") -> None:
        self.path = Path(path)
        self._spark_checkpoint: Path | None = None
        self.use_run(run_id)

    def use_run(self, run_id: str) -> None:
        """Append under ``run_id`` from now on."""
        if not _RUN_DIR.match(f"run={run_id}"):
            raise ValueError(f"run id {run_id!r}: letters, digits, '_', '.', '-' only")
        self.run_id = run_id
        self.run_path = self.path / f"run={run_id}"

    def follow(self, spark_checkpoint: str | os.PathLike[str]) -> None:
        """Take the run id from Spark's checkpoint once Spark has written it (at the next append):
        the job names the log before the query exists, and a new checkpoint's id only exists then."""
        self._spark_checkpoint = Path(spark_checkpoint)
        run_id = spark_run_id(self._spark_checkpoint)
        if run_id is not None:
            self.use_run(run_id)
            self._spark_checkpoint = None

    def _resolve_run(self) -> None:
        if self._spark_checkpoint is None:
            return
        run_id = spark_run_id(self._spark_checkpoint)
        if run_id is None:
            raise RuntimeError(f"no Spark checkpoint metadata in {self._spark_checkpoint}: the event log has no run")
        self.use_run(run_id)
        self._spark_checkpoint = None

    def _file(self, batch_id: int) -> Path:
        return self.run_path / f"batch={batch_id}.parquet"

    def append(self, batch_id: int, events: Sequence[RebalanceEvent]) -> None:
        """Write the batch's events, replacing whatever an earlier attempt of this run's batch wrote."""
        self._resolve_run()
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
        """This run's batches that have events, whether still in their own file or merged into a segment."""
        ids = set(_batch_files(self.run_path))
        for path in _segments(self.run_path).values():
            ids.update(pq.ParquetFile(path).read(columns=["batch_id"]).column("batch_id").to_pylist())
        return sorted(ids)

    def runs(self) -> list[str]:
        """Every run with a directory under the log, this one included once it wrote."""
        if not self.path.is_dir():
            return []
        return sorted(m.group(1) for p in self.path.iterdir() if (m := _RUN_DIR.match(p.name)) and p.is_dir())

    def files(self) -> list[Path]:
        """Every run's batch files and segments, and files from before runs existed, oldest written first."""
        found = [path for d in self._directories() for path in _event_files(d)]
        return sorted(found, key=_written)

    def read(self, group: str | None = None) -> list[RebalanceEvent]:
        """All events of all runs (or one group's), each rebalance once (:func:`unique_events`),
        by event time, then group and generation."""
        table = self._read_table(group)
        events = unique_events([RebalanceEvent.from_dict(row) for row in table.to_pylist()])
        events.sort(key=lambda e: (e.event_time_ms, e.group, e.new_generation))
        return events

    def _read_table(self, group: str | None) -> pa.Table:
        """The files' rows; listed again if one vanished meanwhile: the job's upkeep renames a segment
        into place before deleting its batch files, so the next listing finds their rows there."""
        for _ in range(_READ_ATTEMPTS - 1):
            with contextlib.suppress(FileNotFoundError):
                return self._table(group)
        return self._table(group)

    def _table(self, group: str | None) -> pa.Table:
        files = [str(path) for path in self.files()]
        if not files:
            return EVENT_SCHEMA.empty_table()
        dataset = ds.dataset(files, schema=EVENT_SCHEMA, format="parquet")
        return dataset.to_table(filter=pc.field("group") == group if group is not None else None)

    def _directories(self) -> list[Path]:
        return [self.path / f"run={run}" for run in self.runs()] + [self.path]

    def compact(self, appending: int) -> int:
        """Merge this run's batch files below ``appending`` (Spark committed them: appending batch N means
        N - 1 is committed, and only the newest batch is ever run again) into segments; how many merged.

        Batch files a segment already holds (a crash after its rename, before their deletion) are
        deleted, and so are dot-files a crash left half-written: this run has no other writer.
        """
        for leftover in _temporaries(self.run_path):
            leftover.unlink(missing_ok=True)
        ranges = list(_segments(self.run_path))
        parts = sorted((batch, path) for batch, path in _batch_files(self.run_path).items() if batch < appending)
        pending = []
        for batch, path in parts:
            if any(first <= batch <= last for first, last in ranges):
                path.unlink(missing_ok=True)
            else:
                pending.append((batch, path))
        for start in range(0, len(pending), SEGMENT_MAX_PARTS):
            self._write_segment(pending[start:start + SEGMENT_MAX_PARTS])
        return len(pending)

    def _write_segment(self, parts: list[tuple[int, Path]]) -> None:
        """One segment of ``parts`` (consecutive batch files), rows in the order they were written; then the
        parts go. The segment carries its first part's mtime, so it keeps that part's place in :meth:`files`
        (among duplicates, the first written wins)."""
        target = self.run_path / f"batch={parts[0][0]}-{parts[-1][0]}.parquet"
        tmp = self.run_path / f".{target.name}.{os.getpid()}.tmp"
        paths = sorted((path for _, path in parts), key=_written)
        with pq.ParquetWriter(tmp, EVENT_SCHEMA) as writer:
            for table in _row_groups(paths):
                writer.write_table(table)
        first_written = paths[0].stat().st_mtime_ns
        os.utime(tmp, ns=(first_written, first_written))
        os.replace(tmp, target)
        for path in paths:
            path.unlink()

    def expire(self, before_ms: int) -> int:
        """Delete every file, of any run, whose events are all older than ``before_ms``, and dot-files a crash
        left older than that; remove other runs' directories left empty. How many event files went."""
        expired = 0
        for directory in self._directories():
            for path in _event_files(directory):
                newest = _newest_event_ms(path)
                if newest is not None and newest < before_ms:
                    path.unlink(missing_ok=True)
                    expired += 1
            for leftover in _temporaries(directory):
                if leftover.stat().st_mtime_ns < before_ms * 1_000_000:
                    leftover.unlink(missing_ok=True)
            if directory not in (self.path, self.run_path) and not any(directory.iterdir()):
                with contextlib.suppress(OSError):  # written into meanwhile: it stays
                    directory.rmdir()
        return expired


def _written(path: Path) -> tuple[int, str]:
    """When a file's first events were written (a batch file's rename; a segment keeps its first part's),
    for "the first written wins" among duplicates."""
    try:
        return path.stat().st_mtime_ns, str(path)
    except FileNotFoundError:  # replaced by a re-run while listing: it is the newest
        return 2**63, str(path)


def _batch_files(directory: Path) -> dict[int, Path]:
    if not directory.is_dir():
        return {}
    return {int(m.group(1)): p for p in directory.iterdir() if (m := _BATCH_FILE.match(p.name))}


def _segments(directory: Path) -> dict[tuple[int, int], Path]:
    if not directory.is_dir():
        return {}
    return {(int(m.group(1)), int(m.group(2))): p for p in directory.iterdir() if (m := _SEGMENT_FILE.match(p.name))}


def _event_files(directory: Path) -> list[Path]:
    return [*_batch_files(directory).values(), *_segments(directory).values()]


def _temporaries(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if _TEMPORARY.match(p.name)]


def _row_groups(paths: Sequence[Path]) -> Iterator[pa.Table]:
    """The files' rows, in order, in tables of about :data:`_ROW_GROUP_ROWS` rows."""
    buffered: list[pa.Table] = []
    for path in paths:
        buffered.append(pq.ParquetFile(path).read().cast(EVENT_SCHEMA))
        if sum(table.num_rows for table in buffered) >= _ROW_GROUP_ROWS:
            yield pa.concat_tables(buffered)
            buffered = []
    if buffered:
        yield pa.concat_tables(buffered)


def _newest_event_ms(path: Path) -> int | None:
    """The newest ``event_time_ms`` in a file, from the min/max statistics in its footer (no data read), else
    from the column; None when the file cannot be read (it is kept)."""
    try:
        metadata = pq.read_metadata(path)
        column = [metadata.schema.column(i).path for i in range(metadata.num_columns)].index("event_time_ms")
        stats = [metadata.row_group(g).column(column).statistics for g in range(metadata.num_row_groups)]
        if stats and all(s is not None and s.has_min_max for s in stats):
            return max(int(s.max) for s in stats if s is not None)
        newest = pc.max(pq.ParquetFile(path).read(columns=["event_time_ms"]).column("event_time_ms")).as_py()
    except (OSError, ValueError, pa.ArrowException) as exc:
        log.warning("event log: %s kept, its newest event time is unreadable (%s)", path, exc)
        return None
    return None if newest is None else int(newest)


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
    """Clients (``client_id@host``) by how often they joined or left in ``events``, busiest first;
    a rebalance logged by two runs counts once."""
    counts = Counter(client for e in unique_events(events) for client in (*e.joined_clients, *e.left_clients))
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
