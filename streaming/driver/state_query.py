"""The streaming query of the state-store fold (``--fold state-store``): decode, fold on the executors, publish.

The plan: the Kafka source, the decode stage (``mapInArrow``), then the fold keyed by offsets-topic partition
(:mod:`streaming.groups.stateful`) with one state partition per offsets-topic partition, so each executor task
holds and hands over one partition's groups; ``foreachBatch`` gets only the fold's rows
(:class:`~streaming.driver.changes_sink.ChangesSink`). At each start every group of the last committed batch is
read back from the checkpoint's state store and shown before the first batch.

A checkpoint belongs to one fold for its life: Spark fixes the plan's stateful operator and its partitions at
the first start, and the driver fold keeps its state beside Spark's, so the mode is written in the checkpoint
and a start with the other one is refused (:mod:`streaming.driver.fold_mode`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from streaming.decode.config import SourceConfig
from streaming.decode.source import decode, group_filter, kafka_stream
from streaming.driver.changes_sink import ChangesSink
from streaming.driver.floor_log import FloorLog
from streaming.driver.query import QueryRunner
from streaming.driver.sink import Sink
from streaming.groups.stateful.processor import KEY_COLUMN, FoldSettings, processor
from streaming.groups.stateful.restore import restore
from streaming.groups.stateful.rows import SCHEMA
from streaming.groups.store import last_committed_batch
from streaming.logs.dead_letters import DeadLetterLog

log = logging.getLogger("rebalance_monitor")

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_PARTITIONS = "spark.sql.shuffle.partitions"
# Spark's state server warns each time a value asked for is absent: here each new group's first batch (a soak's
# new group every 4 s, a line each). Quieted in the driver's JVM: local mode's executors; a cluster's executors
# keep their own log settings.
STATE_SERVER_LOGGER = "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer"
# Checkpoint files are written to a temporary name and renamed. Spark's default manager renames through Hadoop's
# FileContext, which on a local file system (a volume, as deployment.md asks for) forks `readlink` for every
# rename: 50 state partitions' commits a batch, each fork slower as the JVM grows (docs/reliability.md). The
# FileSystem-based manager renames in the JVM; --spark-conf can name another.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
IN_JVM_RENAMES = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
SESSION_SETTINGS = (PROVIDER, STATE_PARTITIONS, CHECKPOINT_FILE_MANAGER)  # what the fold sets on the session
# The offsets topic's default partitions (offsets.topic.num.partitions), when its count cannot be read.
DEFAULT_STATE_PARTITIONS = 50

ChangesSinkFactory = Callable[[DeadLetterLog, pa.Table | None, FloorLog], ChangesSink]


class StateStoreRunner(QueryRunner):
    """:class:`QueryRunner` with the fold in Spark's state store."""

    fold = "state-store"

    def __init__(self, *args: Any, settings: FoldSettings, make_changes_sink: ChangesSinkFactory,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.make_changes_sink = make_changes_sink

    def _restore(self, publish: bool) -> None:
        started = time.monotonic()
        last_committed = last_committed_batch(self.driver.checkpoint_dir / "spark")
        restored = restore(self.spark, self.driver.checkpoint_dir / "spark", last_committed, self.settings,
                           group_filter(self.source), len(self.publisher.floors)) if publish else None
        dead_letters = DeadLetterLog(self.driver.monitor_dir / "dead-letters", self.source.topic,
                                     self.source.dead_letter_max)
        self.floor_log.restored(last_committed)
        previous = self.sink
        self.sink = self.make_changes_sink(dead_letters, restored, self.floor_log)
        if not publish and isinstance(previous, ChangesSink):  # a restart in this process shows what it showed
            self.sink.carry_over(previous)
        self.floor_log.write(None, None, self.publisher.floors)
        log.info("restored %d groups from the checkpoint's state store in %.2fs",
                 restored.num_rows if restored is not None else 0, time.monotonic() - started)

    def _stream(self, source: SourceConfig) -> Any:
        from pyspark.sql import functions as F

        partitions = self._topic_partitions()
        conf = self.spark.conf
        settings = self.driver.spark_settings
        jvm = self.spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            STATE_SERVER_LOGGER, jvm.org.apache.logging.log4j.Level.ERROR)
        # The provider and the partitions are read at the checkpoint's first start only, then fixed by it.
        conf.set(PROVIDER, ROCKSDB_PROVIDER)
        conf.set(STATE_PARTITIONS, settings.get(STATE_PARTITIONS, str(partitions or DEFAULT_STATE_PARTITIONS)))
        conf.set(CHECKPOINT_FILE_MANAGER, settings.get(CHECKPOINT_FILE_MANAGER, IN_JVM_RENAMES))
        decoded = decode(kafka_stream(self.spark, self.kafka, source, partitions), source, None)
        keyed = decoded.withColumn(KEY_COLUMN, F.coalesce(F.col("kafka_partition"), F.lit(-1)))
        return keyed.groupBy(KEY_COLUMN).transformWithStateInPandas(
            statefulProcessor=processor(self.settings), outputStructType=SCHEMA, outputMode="Append",
            timeMode="None")

    def _batch_body(self, sink: Sink, source: SourceConfig) -> Callable[[Any, int], None]:
        return sink
