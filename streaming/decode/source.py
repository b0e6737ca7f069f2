"""Spark's Kafka source on the offsets topic, decoded in the executors by :mod:`streaming.decode.stage`."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from streaming.cluster.config import KafkaConfig
from streaming.decode.config import JOB_GROUP_PREFIX, SourceConfig
from streaming.decode.stage import make_decoder
from streaming.decode.tasks import PIECE_RECORDS
from streaming.protocol import STAGE_SCHEMA
from streaming.settings import OptionError, flag

# Fetch sizes of the source's consumers: a fetch per partition at a time, 1 MiB each by default,
# made a micro-batch over 50 partitions mostly round trips (docs/benchmarks.md has the measurements).
FETCH_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(8 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
    # Every record a batch reads exists already; a consumer's prefetch sent past the end of a
    # partition would otherwise park the next batch's first poll on it for up to 500 ms, per
    # partition in turn (slow trickles of data made batches slower than fast streams).
    "kafka.fetch.max.wait.ms": "10",
}


def source_options(kafka: KafkaConfig, source: SourceConfig, partitions: int | None) -> dict[str, str]:
    """Every option of the Kafka source; ``--kafka.*`` options from the command line win.

    With the topic's ``partitions`` known, the source reads them by ``assign``: Spark's driver-side
    consumer then joins no group, and a start does not wait out the coordinator's
    ``group.initial.rebalance.delay.ms`` (3 s by default) for a group of one. ``None`` (the topic does
    not exist yet) subscribes, which waits for the topic to appear.
    """
    settings = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        **({"assign": json.dumps({source.topic: list(range(partitions))})} if partitions
           else {"subscribe": source.topic}),
        "startingOffsets": source.starting_offsets,
        "failOnDataLoss": "false",
        # Aborted commits must not count; open transactions hold a partition back (see README).
        "kafka.isolation.level": "read_committed",
        "groupIdPrefix": JOB_GROUP_PREFIX.rstrip("-"),
        # Small task results for the driver's collect (see streaming.decode.tasks).
        "maxRecordsPerPartition": str(PIECE_RECORDS),
        **FETCH_OPTIONS,
    }
    if source.max_offsets_per_trigger:
        settings["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    settings.update(kafka.kafka_options)
    return settings


def kafka_stream(spark: Any, kafka: KafkaConfig, source: SourceConfig, partitions: int | None) -> Any:
    """The source's rows (key, value, partition, offset, timestamp), decoded batch by batch by :func:`decode`
    (``partitions``: see :func:`source_options`)."""
    reader = spark.readStream.format("kafka")
    for name, value in source_options(kafka, source, partitions).items():
        reader = reader.option(name, value)
    return reader.load().select("key", "value", "partition", "offset", "timestamp")


def decode(batch: Any, source: SourceConfig, tasks: int | None) -> Any:
    """A micro-batch's source rows decoded and group-filtered: :data:`~streaming.protocol.STAGE_SCHEMA` rows.

    ``tasks``: coalesce the source's partitions (one per topic partition or piece of one) to that many
    first, so a small batch pays PySpark's fixed per-task set-up a few times, not once per partition;
    None: one task each (:func:`streaming.decode.tasks.coalesce_to` chooses).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    if tasks is not None:
        batch = batch.coalesce(tasks)
    decoded = batch.mapInArrow(make_decoder(source.dead_letter_max), from_arrow_schema(STAGE_SCHEMA))
    return decoded.where(F.col("group").isNull() | group_filter(source))


def group_filter(source: SourceConfig) -> Any:
    """The groups the job reports on, as a Spark column: ``rlike`` is Java's regex, as the options say."""
    from pyspark.sql import functions as F

    return F.col("group").rlike(source.include_groups) & ~F.col("group").rlike(source.exclude_groups)


def excluded_groups(spark: Any, groups: set[str], source: SourceConfig) -> set[str]:
    """Groups in restored state that the current filters leave out (the filters changed since)."""
    if not groups:
        return set()
    # From Arrow the plan is a local scan with the filter folded in, no Spark job: in a fresh process 3.0 s
    # against 6.7 s from a Python list (medians of 3), the job's first Python task then 1.3 s slower.
    frame = spark.createDataFrame(pa.table({"group": sorted(groups)}))
    return groups - {row[0] for row in frame.where(group_filter(source)).collect()}


def validate_group_patterns(source: SourceConfig, spark: Any) -> None:
    """Compile the group regexes with java.util.regex in Spark's JVM: the engine ``rlike`` runs.

    Python's ``re`` would both reject valid Java patterns (``\\p{Alpha}``, ``\\Q...\\E``) and
    accept ones Java refuses, so the JVM is the judge; call it once the session exists.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import IllegalArgumentException

    pattern_class = spark.sparkContext._jvm.java.util.regex.Pattern
    for name in ("include_groups", "exclude_groups"):
        try:
            pattern_class.compile(getattr(source, name))
        # PatternSyntaxException: pyspark converts it to its IllegalArgumentException once a
        # session has patched py4j, plain py4j raises Py4JJavaError.
        except (IllegalArgumentException, Py4JJavaError) as exc:
            java = getattr(exc, "java_exception", None)
            message = str(java.getMessage() if java is not None else exc).splitlines()[0]
            raise OptionError(f"{flag(source, name)} {getattr(source, name)!r} is not a valid Java regex: "
                              f"{message}") from exc
