"""The group stage's state on disk, in the job's checkpoint directory, in step with Spark's own.

Each batch writes a *delta* under ``<checkpoint>/monitor/state/delta-<batch>``: the batch's
own input to the group stage (its reduced commits with the topic ids they carry, raw group
records, Arrow IPC files as they arrived), the groups it expired, and what the cluster told the
stage for it (:class:`~streaming.groups.stage.FactsUsed`: KIP-848 topic names and groups'
timeouts, which no record carries). Recovery replays deltas through the same pure functions with
the same answers, so a replay gives the answer the batch gave, and a batch costs no
serialisation of the groups it touched. When the deltas since
the last snapshot outweigh the state, the whole state is written once as
``snapshot-<batch>`` (snapshots as JSON, offsets as Arrow) and older files go. Every
directory is written under a temporary name and renamed: complete or absent.

Recovery follows Spark's commit log (``<checkpoint>/spark/commits``): the state is the newest
snapshot at or before the last batch Spark committed plus the deltas after it up to that batch.
A delta written for a batch Spark did not commit (the driver died in between) is dropped, and
Spark runs that batch again with the same offsets, so nothing is applied twice or lost.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from streaming.groups.model import GroupSnapshot
from streaming.groups.offsets import NO_TIME
from streaming.groups.stage import FactsUsed, GroupOffsets, GroupStage, StageLimits
from streaming.protocol import STAGE_SCHEMA, BatchInput, ClusterFacts, GroupTimeouts
from streaming.pylists import pylist, pylists

GROUPS_SCHEMA = pa.schema([
    ("group", pa.string()),
    ("removed", pa.bool_()),
    ("snapshot", pa.string()),  # GroupSnapshot JSON; null: no group metadata (offsets only)
    ("commits_total", pa.int64()),
    ("last_commit_ms", pa.int64()),
])
OFFSETS_SCHEMA = pa.schema([
    ("group", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),  # null: the offset was deleted (a tombstone)
    ("commit_timestamp", pa.int64()),
])
DELTA_COMMIT_COLUMNS = ["group", "topic", "partition", "offset", "commit_timestamp", "record_time_ms", "count",
                        "kafka_partition", "kafka_offset", "topic_id"]
DELTA_RECORD_COLUMNS = ["group", "raw_key", "raw_value", "record_time_ms", "kafka_partition", "kafka_offset",
                        "decoded", "record_type"]
# What the cluster told a batch (FactsUsed), one row per fact: kind "learnt" (group, topic_id, name: taught
# before the batch), "name" (topic_id, name) or "timeouts" (group, session_ms, heartbeat_ms).
FACTS_SCHEMA = pa.schema([
    ("kind", pa.string()),
    ("group", pa.string()),
    ("topic_id", pa.string()),
    ("name", pa.string()),
    ("session_ms", pa.int64()),
    ("heartbeat_ms", pa.int64()),
])
DISCARDED = "spark.discarded"  # Spark's checkpoint on its way out (see discard)
_ENTRY = re.compile(r"^(delta|snapshot)-(\d+)$")


def load_snapshot(checkpoint_dir: Path, group: str) -> GroupSnapshot | None:
    """One group's snapshot as of the last committed batch, read without touching the checkpoint."""
    store = StateStore(Path(checkpoint_dir) / "monitor" / "state")
    return store.load(last_committed_batch(Path(checkpoint_dir) / "spark"), prune=False).snapshots.get(group)


def last_committed_batch(spark_checkpoint: Path) -> int | None:
    """The newest batch id in Spark's commit log, None before the first commit."""
    commits = spark_checkpoint / "commits"
    if not commits.is_dir():
        return None
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


def last_batch_time_ms(spark_checkpoint: Path) -> int | None:
    """When the last batch Spark committed was planned (epoch ms), None before the first commit.

    Spark plans a batch (``batchTimestampMs`` in its offset log, ``offsets/<batch>``) before it asks
    the source for the offsets the batch ends at, so every record after the checkpoint's position
    was written later than this time. A missing or unreadable offset-log entry falls back to the
    commit file's modification time, which is later still: an age from either is never too large.
    """
    batch = last_committed_batch(spark_checkpoint)
    if batch is None:
        return None
    try:
        lines = (spark_checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return int(json.loads(lines[1])["batchTimestampMs"])
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return int((spark_checkpoint / "commits" / str(batch)).stat().st_mtime * 1000)


def discard(checkpoint_dir: Path) -> None:
    """Remove Spark's checkpoint and the group stage's state, so the next start reads the topic from
    its beginning; the event log and dead letters beside them stay. Spark's part is first renamed:
    a kill part-way leaves :func:`discard_pending` true, and the next start finishes the job."""
    spark, doomed = checkpoint_dir / "spark", checkpoint_dir / DISCARDED
    if spark.exists():
        shutil.rmtree(doomed, ignore_errors=True)
        os.rename(spark, doomed)
    shutil.rmtree(checkpoint_dir / "monitor" / "state", ignore_errors=True)
    shutil.rmtree(doomed, ignore_errors=True)


def discard_pending(checkpoint_dir: Path) -> bool:
    """Whether a :func:`discard` was cut short."""
    return (checkpoint_dir / DISCARDED).exists()


class StateStore:
    """Deltas and snapshots of a :class:`~streaming.groups.stage.GroupStage` (see the module docstring)."""

    def __init__(self, path: Path, compact_min_rows: int = 50_000, compact_factor: float = 2.0) -> None:
        self.path = Path(path)
        self.stage: GroupStage | None = None  # whose facts each delta records (see bind)
        # A snapshot once the rows written since the last one reach compact_factor x the live state
        # (and compact_min_rows): a restart replays at most that much, and snapshots cost O(changes).
        self.compact_min_rows = compact_min_rows
        self.compact_factor = compact_factor
        self._rows_since_snapshot = 0

    def _entries(self) -> list[tuple[int, str, Path]]:
        if not self.path.is_dir():
            return []
        found = [(int(m.group(2)), m.group(1), p) for p in self.path.iterdir() if (m := _ENTRY.match(p.name))]
        return sorted(found, key=lambda e: (e[0], e[1] == "delta"))

    def load(self, last_committed: int | None, prune: bool = True, limits: StageLimits | None = None,
             facts: ClusterFacts | None = None) -> GroupStage:
        """The state as of batch ``last_committed`` (empty when None).

        ``prune`` removes files of later batches (recovery: Spark runs them again); a reader
        beside a running job (``rebalance-monitor advise``) passes False and leaves them.
        ``limits`` hold during the replay too, so it admits the groups the batches did; ``facts``
        (KIP-848 topic names) serve the replay as they served the batches.
        """
        stage = self.bind(GroupStage(limits, facts))
        entries = self._entries()
        for batch, _kind, path in entries:
            if prune and (last_committed is None or batch > last_committed):
                shutil.rmtree(path)
        if last_committed is None:
            return stage
        kept = [e for e in entries if e[0] <= last_committed]
        snapshots = [e for e in kept if e[1] == "snapshot"]
        covered = -1
        if snapshots:
            covered, _, path = snapshots[-1]
            _load_snapshot(stage, path)
        for batch, kind, path in kept:
            if kind == "delta" and batch > covered:  # a snapshot already holds its own batch
                self._rows_since_snapshot += _replay(stage, path)
        return stage

    def bind(self, stage: GroupStage) -> GroupStage:
        """Record ``stage``'s :class:`FactsUsed` in each delta (:meth:`load` binds the stage it makes)."""
        self.stage = stage
        return stage

    def write_delta(self, batch_id: int, batch: BatchInput, expired: Iterable[str]) -> None:
        """Persist ``batch_id``'s input to the group stage, the groups it expired and what the cluster told
        the bound stage for it."""
        expired = sorted(set(expired))
        if batch.commits.num_rows == 0 and batch.group_records.num_rows == 0 and not expired:
            return
        tables = {
            "commits": _present(batch.commits, DELTA_COMMIT_COLUMNS),
            "records": _present(batch.group_records, DELTA_RECORD_COLUMNS),
            "expired": pa.table({"group": pa.array(expired, pa.string())}),
        }
        if self.stage is not None:
            tables["facts"] = _facts_table(self.stage.take_facts_used())
        self._write(f"delta-{batch_id}", tables)
        self._rows_since_snapshot += batch.commits.num_rows + batch.group_records.num_rows + len(expired)

    def maybe_compact(self, committed_batch: int | None, stage: GroupStage) -> bool:
        """Write a snapshot of ``stage`` (the state as of ``committed_batch``, which Spark has
        committed) when the deltas since the last one outweigh it; drop what it replaces."""
        if committed_batch is None:
            return False
        live = len(stage.groups) + sum(len(o.offsets) for o in stage.offsets.values())
        if self._rows_since_snapshot < max(self.compact_min_rows, self.compact_factor * live):
            return False
        self.write_snapshot(committed_batch, stage)
        return True

    def write_snapshot(self, batch_id: int, stage: GroupStage) -> None:
        groups = sorted(stage.groups)
        self._write(f"snapshot-{batch_id}", {"offsets": _offsets_table(stage.offsets, groups),
                                              "groups": _groups_table(stage, groups)})
        for batch, _kind, path in self._entries():
            if batch < batch_id or (batch == batch_id and path.name.startswith("delta")):
                shutil.rmtree(path)
        self._rows_since_snapshot = 0

    def _write(self, name: str, tables: dict[str, pa.Table]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for table_name, table in tables.items():
            feather.write_feather(table, tmp / f"{table_name}.arrow", compression="lz4")
        target = self.path / name
        if target.exists():  # the same batch written by an earlier attempt
            shutil.rmtree(target)
        os.rename(tmp, target)


def _groups_table(stage: GroupStage, groups: list[str]) -> pa.Table:
    removed, snapshots, totals, last_commits = [], [], [], []
    for group in groups:
        snapshot = stage.snapshots.get(group)
        offsets = stage.offsets.get(group)
        removed.append(snapshot is None and offsets is None)
        snapshots.append(snapshot.to_json() if snapshot is not None else None)
        totals.append(offsets.commits_total if offsets else 0)
        last_commits.append(offsets.last_commit_ms if offsets else 0)
    return pa.table([groups, removed, snapshots, totals, last_commits], schema=GROUPS_SCHEMA)


def _offsets_table(offsets: dict[str, GroupOffsets], groups: list[str]) -> pa.Table:
    """The committed offsets of ``groups`` as rows by group, topic and partition, read a topic's array at a time
    (:meth:`PartitionOffsets.laid_out`): W2's 1,000,000 took 2.8 s a partition at a time, 0.36 s this way."""
    names: list[str] = []
    topics: list[str] = []
    lengths: list[int] = []
    laid = array("q")
    for group in groups:
        held = offsets.get(group)
        for topic, column in held.offsets.laid_out() if held is not None else ():
            names.append(group)
            topics.append(topic)
            lengths.append(len(column) // 3)
            laid.extend(column)
    runs = np.array(lengths, dtype=np.int64)
    values = np.frombuffer(laid, dtype=np.int64) if laid else np.empty(0, dtype=np.int64)
    at, length = _run_positions(runs)
    times = values[at + 2 * length]
    run = pa.array(np.repeat(np.arange(len(runs)), runs))
    return pa.table([
        pa.array(names, pa.string()).take(run), pa.array(topics, pa.string()).take(run),
        pa.array(values[at], pa.int32()), pa.array(values[at + length], pa.int64()),
        pa.array(times, pa.int64(), mask=times == NO_TIME),
    ], schema=OFFSETS_SCHEMA)


def _run_positions(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs of topic arrays laid end to end (``lengths`` partitions each, three values a partition: see
    :meth:`PartitionOffsets.adopt`), each row's position of its partition, and its run's length: its offset
    is ``length`` further on, its commit time twice that."""
    starts = np.cumsum(lengths) - lengths
    rows = int(lengths.sum())
    return 2 * np.repeat(starts, lengths) + np.arange(rows), np.repeat(lengths, lengths)


def _present(table: pa.Table, columns: list[str]) -> pa.Table:
    return table.select([c for c in columns if c in table.column_names])


def _facts_table(used: FactsUsed) -> pa.Table:
    rows: list[tuple[str, str | None, str | None, str | None, int | None, int | None]] = []
    rows += [("learnt", group, t, n, None, None) for group, names in sorted(used.learnt.items())
             for t, n in sorted(names.items())]
    rows += [("name", None, t, n, None, None) for t, n in sorted(used.names.items())]
    rows += [("timeouts", group, None, None, *timeouts) for group, timeouts in sorted(used.timeouts.items())]
    return pa.table([list(column) for column in zip(*rows, strict=True)] if rows else
                    [[] for _ in FACTS_SCHEMA.names], schema=FACTS_SCHEMA)


def _facts_used(table: pa.Table) -> FactsUsed:
    used = FactsUsed()
    for kind, group, topic_id, name, session, heartbeat in zip(
            *pylists(table, FACTS_SCHEMA.names), strict=True):
        if kind == "learnt":
            used.learnt.setdefault(group, {})[topic_id] = name
        elif kind == "name":
            used.names[topic_id] = name
        elif kind == "timeouts":
            used.timeouts[group] = GroupTimeouts(session, heartbeat)
    return used


def _replay(stage: GroupStage, path: Path) -> int:
    """Apply one delta to ``stage`` as the batch did, with the cluster's answers it got (deltas written
    before they were recorded: asked again); returns its row count."""
    commits = feather.read_table(path / "commits.arrow")
    records = feather.read_table(path / "records.arrow")
    if "decoded" not in records.column_names:  # written before the decode stage decoded group records
        records = records.append_column("decoded", pa.nulls(records.num_rows, pa.string()))
    expired = feather.read_table(path / "expired.arrow").column("group").to_pylist()
    facts = path / "facts.arrow"
    recorded = _facts_used(feather.read_table(facts)) if facts.exists() else None
    stage.apply(BatchInput(commits, records, STAGE_SCHEMA.empty_table()), recorded)
    stage.forget(expired)
    return commits.num_rows + records.num_rows + len(expired)


def _offsets_by_group(table: pa.Table) -> dict[str, GroupOffsets]:
    """A snapshot's offset rows as each group's offsets, as applying the rows one by one in order would give
    them (the last row of a partition wins; a null offset leaves it out, its group still listed), built a
    topic's array at a time: a million ``set`` calls were about a fifth of a W2 restart's load."""
    key = [("group", "ascending"), ("topic", "ascending"), ("partition", "ascending")]
    if not table.num_rows:
        return {}
    table = table.sort_by(key)  # a stable sort: of rows with one key, the last written stays last
    group, topic, partition = (table.column(name) for name in ("group", "topic", "partition"))
    table = table.filter(np.append(~(_same_as_next(group) & _same_as_next(topic) & _same_as_next(partition)), True))
    held = {name: GroupOffsets() for name in pylist(pc.unique(table.column("group")))}
    table = table.filter(pc.is_valid(table.column("offset")))
    rows = table.num_rows
    if not rows:
        return held
    group, topic = table.column("group"), table.column("topic")
    starts = np.flatnonzero(np.insert(~(_same_as_next(group) & _same_as_next(topic)), 0, True))
    ends = np.append(starts[1:], rows)
    # One buffer, each topic's run laid out as its array is: partitions, then offsets, then commit times.
    at, length = _run_positions(ends - starts)
    laid = np.empty(3 * rows, dtype=np.int64)
    laid[at] = table.column("partition").to_numpy()
    laid[at + length] = table.column("offset").to_numpy()
    laid[at + 2 * length] = table.column("commit_timestamp").fill_null(NO_TIME).to_numpy()
    view = laid.data.cast("B")
    for start, end, name, topic_name in zip(starts.tolist(), ends.tolist(), pylist(group.take(starts)),
                                            pylist(topic.take(starts)), strict=True):
        column = array("q")
        column.frombytes(view[24 * start:24 * end])
        held[name].offsets.adopt(topic_name, column)
    return held


def _same_as_next(column: pa.ChunkedArray) -> np.ndarray:
    """Per row but the last, whether the next row holds the same value."""
    rows = len(column)
    return pc.equal(column.slice(0, rows - 1), column.slice(1)).fill_null(False).to_numpy(zero_copy_only=False)


def _load_snapshot(stage: GroupStage, path: Path) -> None:
    """Load a snapshot directory into (an empty) ``stage``."""
    groups = feather.read_table(path / "groups.arrow")
    stage.offsets.update(_offsets_by_group(feather.read_table(path / "offsets.arrow")))
    for group, removed, snapshot, commits_total, last_commit_ms in zip(
            *pylists(groups, GROUPS_SCHEMA.names), strict=True):
        if removed:
            stage.snapshots.pop(group, None)
            stage.offsets.pop(group, None)
            continue
        if snapshot is None:
            stage.snapshots.pop(group, None)
        else:
            stage.snapshots[group] = GroupSnapshot.from_json(snapshot)
        entry = stage.offsets.get(group)  # not setdefault: that built a GroupOffsets for every group
        if entry is None and (commits_total or last_commit_ms):  # a group known by metadata alone has none
            entry = stage.offsets[group] = GroupOffsets()
        if entry is not None:
            entry.commits_total, entry.last_commit_ms = commits_total, last_commit_ms
