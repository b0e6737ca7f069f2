"""How many decode tasks a micro-batch runs: what bounds the Arrow collect in Spark's driver JVM.

The collect (``DataFrame.toArrow``) hands the driver each task's whole output as one task result,
held in the JVM's heap several times over (the executor's Arrow batches, their serialized copy,
the block manager's, the driver's deserialized copy) while it is written to Python. Coalesced to
the cores, a first batch of W2's backlog (1.1 M records, 232 MB of Arrow) made two task results of
about 116 MB each, and Spark's default 1 GiB heap ran out (docs/benchmarks.md, 2026-11-27).

So a batch that may be large runs one task per source partition, each partition at most
:data:`PIECE_RECORDS` records (the source's ``maxRecordsPerPartition``): task results stay small
and Spark writes each to Python as it arrives. Coalescing to the cores is kept for the batches the
last progress says are small (steady load), where 50 tasks would add about 1.3 s of task set-up to
every batch. A batch with more Spark partitions than the topic has partitions had a partition cut
and is large for sure: it is never coalesced. One that a burst made larger than the last progress
foresaw may still be; that costs heap, not correctness: a coalesce that follows Spark's preferred
locations may hand a task pieces of a partition out of order, and the decode puts a task's commits
in log order before reducing them (:func:`streaming.decode.stage.latest_commits`).
"""

from __future__ import annotations

import json
from typing import Any

# Records of one source partition in one Spark partition (one task result at most this many
# records' output: W2's mix collects about 210 bytes a record, so about 21 MB).
PIECE_RECORDS = 100_000
# A batch expected to hold at most this many records is coalesced to the cores. Under steady load a
# batch one task per partition made slow is followed by a larger one: at 50,000, 20,000 rec/s and a
# 1 s trigger, batches of 60,000-70,000 records after the first ran 50 tasks each in turn.
COALESCE_UP_TO_RECORDS = PIECE_RECORDS


def _offsets(text: Any) -> dict[str, dict[str, int]] | None:
    """A Kafka source offset as progress reports it (JSON text: topic -> partition -> offset)."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def expected_records(progress: Any) -> tuple[int, int] | None:
    """From a query's last progress: the records the next batch is expected to hold (the last batch's
    input plus what was already waiting when it was planned) and the source's partition count."""
    if progress is None or len(progress.sources) != 1:
        return None
    source = progress.sources[0]
    end, latest = _offsets(source.endOffset), _offsets(source.latestOffset)
    if not end or not latest:
        return None
    waiting = sum(max(0, offset - end.get(topic, {}).get(partition, offset))
                  for topic, partitions in latest.items() for partition, offset in partitions.items())
    return source.numInputRows + waiting, sum(len(partitions) for partitions in end.values())


def coalesce_to(expected: tuple[int, int] | None, partitions: int, cores: int) -> int | None:
    """The task count for a batch of ``partitions`` source partitions: ``cores`` for a batch the last
    progress expects small (``expected``: :func:`expected_records`; None, the query run's first batch,
    is not), None (one task per source partition) otherwise."""
    if expected is None:
        return None
    records, topic_partitions = expected
    if records > COALESCE_UP_TO_RECORDS or partitions > topic_partitions:
        return None
    return cores
