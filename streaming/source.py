"""Source and decode: Spark's Kafka source on the offsets topic, decoded by :mod:`streaming.decode_stage`."""

from __future__ import annotations

from typing import Any

from streaming.contract import STAGE_SCHEMA
from streaming.decode_stage import make_decoder
from streaming.options import JOB_GROUP_PREFIX, JobOptions

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


def source_options(options: JobOptions) -> dict[str, str]:
    """Every option of the Kafka source; ``--kafka.*`` options from the command line win."""
    settings = {
        "kafka.bootstrap.servers": options.bootstrap_servers,
        "subscribe": options.topic,
        "startingOffsets": options.starting_offsets,
        "failOnDataLoss": "false",
        # Aborted commits must not count; open transactions hold a partition back (see README).
        "kafka.isolation.level": "read_committed",
        "groupIdPrefix": JOB_GROUP_PREFIX.rstrip("-"),
        **FETCH_OPTIONS,
    }
    if options.max_offsets_per_trigger:
        settings["maxOffsetsPerTrigger"] = str(options.max_offsets_per_trigger)
    settings.update(options.kafka_options)
    return settings


def decoded_stream(spark: Any, options: JobOptions) -> Any:
    """The decoded, group-filtered stream: :data:`~streaming.contract.STAGE_SCHEMA` rows.

    The source's partitions (one per topic partition) are coalesced to the cores first, so a
    micro-batch pays PySpark's fixed per-task set-up a few times, not once per partition.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    reader = spark.readStream.format("kafka")
    for name, value in source_options(options).items():
        reader = reader.option(name, value)
    raw = reader.load().select("key", "value", "partition", "offset", "timestamp")
    decoder = make_decoder(options.dead_letter_max)
    decoded = raw.coalesce(spark.sparkContext.defaultParallelism).mapInArrow(decoder, from_arrow_schema(STAGE_SCHEMA))
    return decoded.where(F.col("group").isNull() | group_filter(options))


def group_filter(options: JobOptions) -> Any:
    """The groups the job reports on, as a Spark column: ``rlike`` is Java's regex, as the options say."""
    from pyspark.sql import functions as F

    return F.col("group").rlike(options.include_groups) & ~F.col("group").rlike(options.exclude_groups)


def excluded_groups(spark: Any, groups: set[str], options: JobOptions) -> set[str]:
    """Groups in restored state that the current filters leave out (the filters changed since)."""
    if not groups:
        return set()
    frame = spark.createDataFrame([(g,) for g in sorted(groups)], "group string")
    return groups - {row[0] for row in frame.where(group_filter(options)).collect()}
