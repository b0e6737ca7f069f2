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
is never taken for smaller than it is. A batch with more Spark partitions than the topic has partitions had
a partition cut and is large for sure. A coalesce that follows Spark's preferred locations may hand
a task pieces of a partition out of order; the decode puts a task's commits in log order before
reducing them (:func:`streaming.decode.stage.latest_commits`).
"""

from __future__ import annotations

import json
from pathlib import Path

# Records of one source partition in one Spark partition (one task result at most this many
# records' output: W2's mix collects about 210 bytes a record, so about 21 MB).
PIECE_RECORDS = 100_000
# A batch of at most this many records is coalesced to the cores. Under steady load a batch one
# task per partition made slow is followed by a larger one: at 50,000, 20,000 rec/s and a 1 s
# trigger, batches of 60,000-70,000 records after the first ran 50 tasks each in turn.
COALESCE_UP_TO_RECORDS = PIECE_RECORDS

Offsets = dict[str, dict[str, int]]  # a Kafka source offset: topic -> partition -> offset


def _source_offsets(path: Path, line: int) -> Offsets | None:
    """The Kafka source's offsets on ``line`` of a checkpoint log file (None: missing or unreadable).

    Offset-log files are ``v1``, the batch's metadata, then one line per source; the source's
    initial-offsets file is a NUL byte (Spark 2.1's format), ``v1`` and the offsets.
    """
    try:
        lines = path.read_text(encoding="utf-8").lstrip("\x00").splitlines()
        value = json.loads(lines[line])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return {str(topic): {str(partition): int(offset) for partition, offset in partitions.items()}
                for topic, partitions in value.items()}
    except (AttributeError, TypeError, ValueError):
        return None


def batch_records(spark_checkpoint: Path, batch_id: int) -> tuple[int, int] | None:
    """The records batch ``batch_id`` reads at most (the sum of its offset ranges) and the topic
    partitions it reads, from Spark's checkpoint; None when the checkpoint cannot say."""
    end = _source_offsets(spark_checkpoint / "offsets" / str(batch_id), 2)
    start = (_source_offsets(spark_checkpoint / "offsets" / str(batch_id - 1), 2) if batch_id > 0
             else _source_offsets(spark_checkpoint / "sources" / "0" / "0", 1))
    if not end or start is None:
        return None
    records = 0
    for topic, partitions in end.items():
        for partition, offset in partitions.items():
            # A partition new since the start is read from its beginning.
            begin = start.get(topic, {}).get(partition, 0)
            if offset < 0 or begin < 0:  # Spark's unresolved earliest/latest: not a range
                return None
            records += max(0, offset - begin)
    return records, sum(len(partitions) for partitions in end.values())


def coalesce_to(size: tuple[int, int] | None, partitions: int, cores: int) -> int | None:
    """The task count for a batch of ``partitions`` Spark partitions: ``cores`` for a small batch
    (``size``: :func:`batch_records`), None (one task per Spark partition) otherwise or when its
    size is unknown."""
    if size is None:
        return None
    records, topic_partitions = size
    if records > COALESCE_UP_TO_RECORDS or partitions > topic_partitions:
        return None
    return cores
