"""How many decode tasks a micro-batch runs: what bounds the Arrow collect in Spark's driver JVM.

The collect (``DataFrame.toArrow``) hands the driver each task's whole output as one task result,
held in the JVM's heap several times over (the executor's Arrow batches, their serialized copy,
the block manager's, the driver's deserialized copy) while it is written to Python. Coalesced to
the cores, a first batch of W2's backlog (1.1 M records, 232 MB of Arrow) made two task results of
about 116 MB each, and Spark's default 1 GiB heap ran out (docs/benchmarks.md, 2026-11-27).

So a batch that may be large runs one task per source partition, each partition at most
:data:`PIECE_RECORDS` records (the source's ``maxRecordsPerPartition``): task results stay small
and Spark writes each to Python as it arrives. A small batch is coalesced to the cores, where one
task per partition would add about 1.3 s of task set-up to it (50 tasks on the offsets topic).

What a batch reads is known before it runs: Spark writes the offsets it ends at to the offset log
(``offsets/<batch>``) first, and where it starts is the previous batch's end or, for a checkpoint's
first batch, the source's initial offsets (``sources/0/0``). So every batch is sized from the
offset ranges it reads, the first of a backlog as exactly as one under steady load. The ranges
bound the records from above (a compacted log has gaps, transaction markers take offsets): a batch
is never taken for smaller than it is. A batch with a partition cut into pieces read more than a
piece and is large for sure, so its Spark partitions need not be counted (0.14 s on a first batch). A
coalesce that follows Spark's preferred locations may hand a task pieces of a partition out of order;
the decode puts a task's commits in log order before reducing them (:func:`streaming.decode.stage.latest_commits`).
"""

from __future__ import annotations

from pathlib import Path

from streaming.decode.checkpoint import checkpoint_offsets

# Records of one source partition in one Spark partition (one task result at most this many
# records' output: W2's mix collects about 210 bytes a record, so about 21 MB).
PIECE_RECORDS = 100_000
# A batch of at most this many records is coalesced to the cores. Under steady load a batch one
# task per partition made slow is followed by a larger one: at 50,000, 20,000 rec/s and a 1 s
# trigger, batches of 60,000-70,000 records after the first ran 50 tasks each in turn.
COALESCE_UP_TO_RECORDS = PIECE_RECORDS  # never more: a batch coalesced must have no partition cut


def batch_records(spark_checkpoint: Path, batch_id: int) -> tuple[int, int] | None:
    """The records batch ``batch_id`` reads at most (the sum of its offset ranges) and the topic
    partitions it reads, from Spark's checkpoint; None when the checkpoint cannot say."""
    end = checkpoint_offsets(spark_checkpoint, batch_id)
    start = checkpoint_offsets(spark_checkpoint, batch_id - 1 if batch_id > 0 else None)
    if not end or start is None:
        return None
    records = 0
    for partition, offset in end.items():
        begin = start.get(partition, 0)  # a partition new since the start is read from its beginning
        if offset < 0 or begin < 0:  # Spark's unresolved earliest/latest: not a range
            return None
        records += max(0, offset - begin)
    return records, len(end)


def coalesce_to(size: tuple[int, int] | None, cores: int) -> int | None:
    """The task count for a batch: ``cores`` for a small batch (``size``: :func:`batch_records`), None
    (one task per Spark partition) otherwise or when its size is unknown. A batch with a partition cut
    into pieces read more than :data:`PIECE_RECORDS` records, so it is never small."""
    if size is None or size[0] > COALESCE_UP_TO_RECORDS:
        return None
    return cores
