"""The decode stage, run in the executors by ``mapInArrow``: Kafka rows in, :data:`STAGE_SCHEMA` rows out.

Offset commits (nearly all of the traffic) are decoded by the vectorised ``decode_batch`` and
reduced to the latest commit per group/topic/partition between two of that group's records
inside the task, so their volume ends here while each group record still sees the commits
written before it. Every other record is checked here: a vectorised triage settles most bad ones, the rest
are decoded one by one, so only valid records are counted and only group records whose value
decodes are handed to the driver, decoded in full (in parallel tasks, once), ready to fold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders import DecodeError, decode
from decoders.batch import decode_batch, record_types, triage
from decoders.folding import fold_json
from decoders.records import GROUP_STATE_TYPES, OFFSET_COMMIT_TYPES
from streaming.protocol import STAGE_SCHEMA, OutputKind

_COMMIT_TYPES = np.array(sorted(OFFSET_COMMIT_TYPES), np.int16)
_GROUP_STATE_TYPES = np.array(sorted(GROUP_STATE_TYPES), np.int16)
_COMMIT_KEY = ["group", "topic", "partition"]
_COMMIT_COLUMNS = ["group", "topic", "partition", "offset", "commit_timestamp",
                   "kafka_partition", "kafka_offset", "record_time_ms", "count", "topic_id"]


def commit_segments(commits: pa.Table, marks: pa.Table) -> np.ndarray:
    """For each commit row, how many of its group's records (``marks``: group, kafka_offset)
    come before it in the log: commits with the same number lie between the same two records.

    A group lives on one partition of the offsets topic, so its commits and records share one
    offset sequence.
    """
    segments = np.zeros(commits.num_rows, np.int64)
    if commits.num_rows == 0 or marks.num_rows == 0:
        return segments
    # Only the commits of groups with records here can be in a later stretch than the first.
    marked_groups = pc.unique(pc.cast(marks.column("group").combine_chunks(), pa.string()))
    rows = np.flatnonzero(pc.is_in(pc.cast(commits.column("group").combine_chunks(), pa.string()),
                                   value_set=marked_groups).to_numpy(zero_copy_only=False))
    if rows.size == 0:
        return segments
    commits = commits.take(pa.array(rows, pa.int64()))
    groups = pa.concat_arrays([pc.cast(t.column("group").combine_chunks(), pa.string()) for t in (commits, marks)])
    offsets = pa.concat_arrays([pc.cast(t.column("kafka_offset").combine_chunks(), pa.int64())
                                for t in (commits, marks)])
    both = pa.table({"group": groups.dictionary_encode().indices, "offset": offsets})
    order = pc.sort_indices(both, sort_keys=[("group", "ascending"), ("offset", "ascending")]).to_numpy()
    is_mark = (order >= commits.num_rows).astype(np.int64)
    seen = np.cumsum(is_mark)
    group = both.column("group").to_numpy()[order]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    before_group = (seen - is_mark)[starts]  # marks of earlier groups in the sorted order
    sizes = np.diff(np.r_[starts, order.size])
    segment = seen - np.repeat(before_group, sizes)
    commit_rows = is_mark == 0
    segments[rows[order[commit_rows]]] = segment[commit_rows]
    return segments


def latest_commits(commits: pa.Table, marks: pa.Table | None = None) -> pa.Table:
    """The latest commit of each group/topic/partition, ``count`` summed, kept once per stretch
    between two of the group's records (``marks``, see :func:`commit_segments`); in log order.

    Rows of one key come from one Kafka partition (a group lives on one partition of the
    offsets topic), so the latest is the one at the highest offset. The rows are put in log order
    first: a task may be handed pieces of one partition out of order (Spark's coalesce of a source
    partition split by ``maxRecordsPerPartition``). Keeping one per stretch lets the driver show
    each group record the commits written before it: how long before a rebalance a departed
    member last committed is what tells how it left.
    """
    if commits.num_rows == 0:
        return commits
    commits = commits.sort_by([("kafka_partition", "ascending"), ("kafka_offset", "ascending")])
    numbered = commits.append_column("_row", pa.array(np.arange(commits.num_rows, dtype=np.int64)))
    key = _COMMIT_KEY
    if marks is not None and marks.num_rows:
        numbered = numbered.append_column("_segment", pa.array(commit_segments(commits, marks)))
        key = [*_COMMIT_KEY, "_segment"]
    reduced = numbered.group_by(key, use_threads=False).aggregate([("_row", "max"), ("count", "sum")])
    order = pc.sort_indices(reduced, sort_keys=[("_row_max", "ascending")])
    reduced = reduced.take(order)
    latest = commits.take(reduced.column("_row_max"))
    return latest.set_column(latest.schema.get_field_index("count"), "count", reduced.column("count_sum"))


class TaskDecoder:
    """Decodes one task's Kafka batches; commits accumulate until :meth:`finish`."""

    def __init__(self, dead_letter_max: int) -> None:
        self.dead_letter_max = dead_letter_max
        self._commits: list[pa.Table] = []
        self._pending_rows = 0
        self._records: Counter[int] = Counter()
        self._errors: Counter[str] = Counter()
        self._newest_ms: dict[int, int] = {}
        self._read_ms: dict[int, int] = {}  # offsets-topic partition -> newest record read from it
        self._dead_letters = 0
        self._pending_dead_letters: list[pa.RecordBatch] = []
        self._marks: list[pa.Table] = []  # group, kafka_offset of the task's group records

    def decode(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Decode one Kafka batch; yields its group-record and dead-letter rows at once."""
        keys, values = batch.column("key"), batch.column("value")
        kafka_partition, kafka_offset = batch.column("partition"), batch.column("offset")
        times = pc.cast(pc.cast(batch.column("timestamp"), pa.timestamp("ms")), pa.int64())
        self._note_read(kafka_partition, times)
        types = record_types(keys)
        is_commit = np.isin(types, _COMMIT_TYPES)
        others = np.flatnonzero(~is_commit)
        if others.size:  # first: a reduction of the commits must know the group records among them
            yield from self._other_rows(keys, values, kafka_partition, kafka_offset, times, others)
        if is_commit.any():
            self._add_commits(keys, values, kafka_partition, kafka_offset, times, is_commit)

    def _add_commits(self, keys: pa.Array, values: pa.Array, kafka_partition: pa.Array, kafka_offset: pa.Array,
                     times: pa.Array, is_commit: np.ndarray) -> None:
        mask = pa.array(is_commit)
        table = decode_batch(keys.filter(mask), values.filter(mask))
        partitions, offsets, row_times = kafka_partition.filter(mask), kafka_offset.filter(mask), times.filter(mask)
        error = table.column("error").combine_chunks()
        bad = error.is_valid()
        if pc.any(bad).as_py():
            reasons = error.filter(bad)
            self._count_errors(reasons)
            bad_rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
            commit_rows = np.flatnonzero(is_commit)[bad_rows]
            room = max(self.dead_letter_max - self._dead_letters, 0)
            self._dead_letter(keys, values, kafka_partition, kafka_offset, times, commit_rows,
                              reasons[:room].to_pylist())
        good = pc.invert(bad)
        record_type = table.column("record_type").combine_chunks().filter(good)
        self._count_records(record_type, row_times.filter(good))
        tombstone = table.column("is_tombstone").combine_chunks().filter(good)
        commits = pa.table({
            "group": table.column("group").combine_chunks().filter(good),
            "topic": table.column("topic").combine_chunks().filter(good),
            "partition": table.column("partition").combine_chunks().filter(good),
            "offset": table.column("offset").combine_chunks().filter(good),
            "commit_timestamp": table.column("commit_timestamp").combine_chunks().filter(good),
            "kafka_partition": partitions.filter(good),
            "kafka_offset": offsets.filter(good),
            "record_time_ms": row_times.filter(good),
            "count": pc.cast(pc.invert(tombstone), pa.int64()),
            "topic_id": table.column("topic_id").combine_chunks().filter(good),
        })
        self._commits.append(commits)
        self._pending_rows += commits.num_rows
        if self._pending_rows > 1 << 20:  # keep a long task's memory bounded by its distinct keys
            self._commits = [latest_commits(pa.concat_tables(self._commits), self._group_marks())]
            self._pending_rows = self._commits[0].num_rows

    def _other_rows(self, keys: pa.Array, values: pa.Array, kafka_partition: pa.Array, kafka_offset: pa.Array,
                    times: pa.Array, rows: np.ndarray) -> Iterator[pa.RecordBatch]:
        """Decode every non-commit record here, group records in full for the driver's fold.

        The vectorised triage settles what a key, a value's version or its leading fields make
        undecodable, so only rows whose value gets past those are decoded one by one: other
        records without members' consumer-protocol payloads (which never make a record bad), group
        records in full, handed over as :func:`~decoders.folding.fold_json` instead of their
        raw bytes. The driver never decodes a group record again, and never meets a bad value.
        """
        taken = pa.array(rows, pa.int64())
        row_keys, row_values = keys.take(taken), values.take(taken)
        checked = triage(row_keys, row_values)
        reasons = checked.reasons(np.arange(rows.size))
        bodies = np.flatnonzero((checked.code == 0) & row_values.is_valid().to_numpy(zero_copy_only=False))
        folding = np.isin(checked.record_type, _GROUP_STATE_TYPES)
        decoded: dict[int, str] = {}
        if bodies.size:
            # One conversion per column: reading Arrow scalars row by row costs more than decoding them.
            picked = pa.array(bodies, pa.int64())
            for i, key, value in zip(bodies.tolist(), row_keys.take(picked).to_pylist(),
                                     row_values.take(picked).to_pylist(), strict=True):
                # Group records are decoded in full, once, here; the rest only checked (payloads skipped).
                result = decode(key, value, payloads=bool(folding[i]))
                if isinstance(result, DecodeError):
                    reasons[i] = result.reason
                elif folding[i]:
                    decoded[i] = fold_json(result)
        for i in np.flatnonzero(folding & ~row_values.is_valid().to_numpy(zero_copy_only=False)).tolist():
            if not reasons[i]:  # a tombstone: its key alone says what it deletes
                result = decode(row_keys[i].as_py(), None)
                if isinstance(result, DecodeError):
                    reasons[i] = result.reason
                else:
                    decoded[i] = fold_json(result)
        bad = reasons.astype(bool)
        if bad.any():
            self._errors.update(reasons[bad].tolist())
            self._dead_letter(keys, values, kafka_partition, kafka_offset, times, rows[bad],
                              reasons[bad][:max(self.dead_letter_max - self._dead_letters, 0)].tolist())
        good = np.flatnonzero(~bad)
        if good.size == 0:
            return
        record_type = checked.record_type[good]
        self._count_records(pa.array(record_type, pa.int16()), times.take(pa.array(rows[good], pa.int64())))
        folded = np.isin(record_type, _GROUP_STATE_TYPES)
        if folded.any():
            take = pa.array(rows[good[folded]], pa.int64())
            group = checked.group.take(pa.array(good[folded], pa.int64()))
            self._marks.append(pa.table({"group": pc.cast(group, pa.string()),
                                         "kafka_offset": pc.cast(kafka_offset.take(take), pa.int64())}))
            yield _batch(OutputKind.GROUP_RECORD, len(take), {
                "group": group,
                "record_type": pa.array(record_type[folded], pa.int16()),
                "kafka_partition": kafka_partition.take(take),
                "kafka_offset": kafka_offset.take(take),
                "record_time_ms": times.take(take),
                # decoded instead of raw: the driver (and the state's deltas) need nothing else
                "decoded": pa.array([decoded[i] for i in good[folded].tolist()], pa.string()),
            })

    def _dead_letter(self, keys: pa.Array, values: pa.Array, kafka_partition: pa.Array, kafka_offset: pa.Array,
                     times: pa.Array, rows: np.ndarray, reasons: list[str]) -> None:
        room = self.dead_letter_max - self._dead_letters
        if room <= 0 or rows.size == 0:
            return
        take = pa.array(rows[:room], pa.int64())
        self._dead_letters += len(take)
        self._pending_dead_letters.append(_batch(OutputKind.DEAD_LETTER, len(take), {
            "error": pa.array(reasons[:room], pa.string()),
            "kafka_partition": kafka_partition.take(take),
            "kafka_offset": kafka_offset.take(take),
            "record_time_ms": times.take(take),
            "raw_key": pc.cast(keys.take(take), pa.binary()),
            "raw_value": pc.cast(values.take(take), pa.binary()),
        }))

    def _count_records(self, record_type: pa.Array, times: pa.Array) -> None:
        if len(record_type) == 0:
            return
        grouped = pa.table({"t": record_type, "ms": times}).group_by("t", use_threads=False).aggregate(
            [("ms", "max"), ([], "count_all")])
        for t, newest, count in zip(grouped.column("t").to_pylist(), grouped.column("ms_max").to_pylist(),
                                    grouped.column("count_all").to_pylist(), strict=True):
            self._records[t] += count
            self._newest_ms[t] = max(self._newest_ms.get(t, 0), newest or 0)

    def _note_read(self, kafka_partition: pa.Array, times: pa.Array) -> None:
        if len(times) == 0:
            return
        grouped = pa.table({"p": kafka_partition, "ms": times}).group_by("p", use_threads=False).aggregate(
            [("ms", "max")])
        for partition, newest in zip(grouped.column("p").to_pylist(), grouped.column("ms_max").to_pylist(),
                                     strict=True):
            if partition is not None and newest is not None:
                self._read_ms[partition] = max(self._read_ms.get(partition, newest), newest)

    def _count_errors(self, reasons: pa.Array) -> None:
        counts = pc.value_counts(reasons)
        for item in counts.to_pylist():
            self._errors[item["values"]] += item["counts"]

    def _group_marks(self) -> pa.Table | None:
        if not self._marks:
            return None
        self._marks = [pa.concat_tables(self._marks)]
        return self._marks[0]

    def drain_dead_letters(self) -> Iterator[pa.RecordBatch]:
        pending, self._pending_dead_letters = self._pending_dead_letters, []
        yield from pending

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The task's reduced commits and its counts, once every batch is decoded."""
        if self._commits:
            commits = latest_commits(pa.concat_tables(self._commits), self._group_marks())
            self._commits = []
            for chunk in commits.to_batches(max_chunksize=1 << 16):
                yield _batch(OutputKind.COMMIT, chunk.num_rows, {name: chunk.column(name) for name in _COMMIT_COLUMNS})
        if self._records:
            types = sorted(self._records)
            yield _batch(OutputKind.RECORD_COUNT, len(types), {
                "record_type": pa.array(types, pa.int16()),
                "count": pa.array([self._records[t] for t in types], pa.int64()),
                "record_time_ms": pa.array([self._newest_ms.get(t) for t in types], pa.int64()),
            })
        if self._read_ms:
            partitions = sorted(self._read_ms)
            yield _batch(OutputKind.PARTITION_READ, len(partitions), {
                "kafka_partition": pa.array(partitions, pa.int32()),
                "record_time_ms": pa.array([self._read_ms[p] for p in partitions], pa.int64()),
            })
        if self._errors:
            reasons = sorted(self._errors)
            yield _batch(OutputKind.ERROR_COUNT, len(reasons), {
                "error": pa.array(reasons, pa.string()),
                "count": pa.array([self._errors[r] for r in reasons], pa.int64()),
            })


def _batch(kind: OutputKind, rows: int, columns: dict[str, pa.Array]) -> pa.RecordBatch:
    arrays = []
    for field in STAGE_SCHEMA:
        if field.name == "kind":
            arrays.append(pa.array(np.full(rows, int(kind), np.int8)))
        elif field.name in columns:
            arrays.append(pc.cast(columns[field.name], field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=STAGE_SCHEMA)


def make_decoder(dead_letter_max: int):
    """The ``mapInArrow`` body: one :class:`TaskDecoder` per task."""

    def decode_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decoder = TaskDecoder(dead_letter_max)
        for batch in batches:
            yield from decoder.decode(batch)
            yield from decoder.drain_dead_letters()
        yield from decoder.finish()

    return decode_task
