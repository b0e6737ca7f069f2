"""What the decode stage (executors) hands to the group stage (driver): one typed Arrow schema.

Every row has an :class:`OutputKind`; the columns a kind does not use are null. The decode
stage reduces offset commits inside each task, so the driver receives at most one COMMIT row
per group/topic/partition and task instead of every commit, and raw bytes only for the rare
records the group stage folds and for a bounded sample of undecodable ones.
"""

from __future__ import annotations

from enum import IntEnum

import pyarrow as pa


class OutputKind(IntEnum):
    """The kinds of row in :data:`STAGE_SCHEMA`."""

    COMMIT = 0
    """The latest offset commit (``offset`` null: an offset tombstone) of one group/topic/partition
    in one task; ``count`` = commits (tombstones excluded) it stands for."""
    GROUP_RECORD = 1
    """A classic group-metadata or KIP-848 consumer-group record, raw, for the driver to decode and fold."""
    DEAD_LETTER = 2
    """An undecodable record's bytes and reason (a bounded sample per task)."""
    RECORD_COUNT = 3
    """``count`` records of ``record_type`` in one task; ``record_time_ms`` = the newest one's time."""
    ERROR_COUNT = 4
    """``count`` undecodable records with reason ``error`` in one task."""


STAGE_SCHEMA = pa.schema([
    ("kind", pa.int8()),
    ("group", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("commit_timestamp", pa.int64()),
    ("record_type", pa.int16()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("record_time_ms", pa.int64()),
    ("count", pa.int64()),
    ("error", pa.string()),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
])
