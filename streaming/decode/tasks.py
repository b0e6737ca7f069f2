"""How many decode tasks a micro-batch runs: what bounds the Arrow collect in Spark's driver JVM.

The collect (``DataFrame.toArrow``) hands the driver each task's whole output as one task result,
held in the JVM's heap several times over (the executor's Arrow batches, their serialized copy,
the block manager's, the driver's deserialized copy) while it is written to Python. Coalesced to
the cores, a first batch of W2's backlog (1.1 M records, 232 MB of Arrow) made two task results of
about 116 MB each, and Spark's default 1 GiB heap ran out (docs/benchmarks.md, 2026-11-27).

So no decode task reads more than :data:`PIECE_RECORDS` records: the source cuts a partition's range
into pieces of at most that many (its ``maxRecordsPerPartition``). A batch of at most a piece in all
is coalesced to the cores; a larger one to the fewest tasks, never fewer than the cores, in which no
task reads more than :data:`SHARE_RECORDS` (:func:`coalesce_to`). Task results stay small and Spark
writes each to Python as it arrives, while a batch pays PySpark's fixed per-task set-up (about 1.3 s
for 50 tasks on the offsets topic) no more often than that needs. A rule on the batch's records alone
was bistable: under steady load a batch just over the bound ran one task per partition, was slow, and
so was followed by a larger one (batches of 100,000-270,000 records at 20,000 rec/s, each in 50 tasks,
6-13 s).

What a batch reads is known before it runs: Spark writes the offsets it ends at to the offset log
(``offsets/<batch>``) first, and where it starts is the previous batch's end or, for a checkpoint's
first batch, the source's initial offsets (``sources/0/0``). So every batch is sized from the
offset ranges it reads, the first of a backlog as exactly as one under steady load. The ranges
bound the records from above (a compacted log has gaps, transaction markers take offsets): a task is
never taken for smaller than it is. A coalesce may hand a task pieces of a partition out of order; the
decode puts a task's commits in log order before reducing them
(:func:`streaming.decode.stage.latest_commits`).
"""

from __future__ import annotations

from pathlib import Path

from streaming.decode.checkpoint import checkpoint_offsets

# Records of one source partition in one Spark partition, and of one decode task at most (one task
# result at most this many records' output: W2's mix collects about 210 bytes a record, so about 21 MB).
PIECE_RECORDS = 100_000
# Records of one decode task at most in a batch larger than a piece. Tasks of up to a piece made W2's
# first batch (1.1 M records) 13 tasks, not 50: its collect took as long (32.5 s against 34.3 s) and the
# process tree's peak rose by 0.27 GiB (the driver's JVM 1.10 against 0.83 GiB, the Python workers 0.48
# against 0.05). So a batch with a partition of more than this many records keeps one task per partition,
# as W2's backlog does (22,000 records a partition).
SHARE_RECORDS = PIECE_RECORDS // 4


def batch_ranges(spark_checkpoint: Path, batch_id: int) -> list[int] | None:
    """The records (at most) of each topic partition's range that batch ``batch_id`` reads, from Spark's
    checkpoint; None when the checkpoint cannot say."""
    end = checkpoint_offsets(spark_checkpoint, batch_id)
    start = checkpoint_offsets(spark_checkpoint, batch_id - 1 if batch_id > 0 else None)
    if not end or start is None:
        return None
    ranges = []
    for partition, offset in end.items():
        begin = start.get(partition, 0)  # a partition new since the start is read from its beginning
        if offset < 0 or begin < 0:  # Spark's unresolved earliest/latest: not a range
            return None
        ranges.append(max(0, offset - begin))
    return ranges


def pieces(ranges: list[int]) -> list[int]:
    """The Spark partitions the source makes of the ranges, by records: an empty range none, a range of
    more than :data:`PIECE_RECORDS` cut into that many equal pieces as make each at most that."""
    cut = []
    for records in ranges:
        parts = -(-records // PIECE_RECORDS)
        cut += [records // parts + (part < records % parts) for part in range(parts)]
    return cut


def coalesce_to(ranges: list[int] | None, cores: int) -> int | None:
    """The task count for a batch (``ranges``: :func:`batch_ranges`): ``cores`` for at most a piece in all,
    else the fewest, never fewer than ``cores``, in which no task reads more than :data:`SHARE_RECORDS`
    records; None (one task per Spark partition) when only that keeps to it, or when the ranges are unknown.

    The source gives its partitions no preferred location once it cuts ranges (``maxRecordsPerPartition``
    is always set), and Spark's coalesce of partitions without one hands each of ``k`` tasks a run of at
    most ``ceil(P / k)`` of the ``P`` in a row. The source's order of them is not known here, so a ``k``
    is taken when even the ``ceil(P / k)`` largest pieces fit.
    """
    if ranges is None:
        return None
    largest = sorted(pieces(ranges), reverse=True)
    if len(largest) <= cores or sum(largest) <= PIECE_RECORDS:
        return cores
    running = [0]
    for records in largest:
        running.append(running[-1] + records)
    for tasks in range(cores, len(largest)):
        if running[-(-len(largest) // tasks)] <= SHARE_RECORDS:
            return tasks
    return None
