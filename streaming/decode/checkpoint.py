"""The Kafka source's offsets as Spark's streaming checkpoint and query progress record them."""

from __future__ import annotations

import json
from pathlib import Path

from streaming.protocol import TopicPartition


def source_offsets(text: str | None) -> dict[TopicPartition, int]:
    """Spark's Kafka offsets JSON (``{"topic": {"0": 42}}``) as (topic, partition) -> offset."""
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:  # pyspark 4.0 renders a missing offset as "None"
        return {}
    if not isinstance(parsed, dict):  # "null": pyspark 4.2 builds progress from JSON (first batch: no start)
        return {}
    return {(topic, int(p)): int(o) for topic, parts in parsed.items() for p, o in parts.items()}


def checkpoint_offsets(spark_checkpoint: Path, batch: int | None) -> dict[TopicPartition, int] | None:
    """The Kafka source's offsets in Spark's checkpoint: where ``batch`` ends (its offset log entry,
    ``offsets/<batch>``: a version line, the batch's metadata, then one line per source), or with
    ``batch`` None where the source started in this checkpoint (``sources/0/0``, written as the first
    batch is planned: an optional zero byte, a version line, the offsets). None when the file is missing."""
    path = spark_checkpoint / "offsets" / str(batch) if batch is not None else spark_checkpoint / "sources" / "0" / "0"
    try:
        text = path.read_bytes().decode("utf-8", "replace").lstrip("\0")
    except OSError:
        return None
    lines = text.splitlines()
    found: dict[TopicPartition, int] = {}
    for line in lines[2:] if batch is not None else lines[1:]:
        try:
            found.update(source_offsets(line))
        except (AttributeError, TypeError, ValueError):  # not a Kafka source's offsets
            continue
    return found
