"""The monitor job: Kafka source and decode -> group stage -> driver sink -> progress, wired together.

* source and decode (:mod:`streaming.source`, :mod:`streaming.decode_stage`): Spark's Kafka
  source on the offsets topic, coalesced to the cores, decoded by ``mapInArrow``; offset
  commits are reduced inside each task;
* group stage (:mod:`streaming.groups`) on the driver, fed once per micro-batch through
  ``foreachBatch`` with one Arrow collect (:mod:`streaming.sink`); its state lives in the
  checkpoint directory beside Spark's (:mod:`streaming.statestore`);
* exporter (:mod:`streaming.exporter`) and progress (:mod:`streaming.progress`).

No stateful Spark operator is involved, so a trigger that finds no new data runs no batch.
Run with spark-submit (deploy/spark-submit) or ``rebalance-monitor run``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from streaming.advisor_pass import AdvisorPass
from streaming.dead_letters import DeadLetterLog
from streaming.exporter import Exporter
from streaming.groups import StageLimits
from streaming.history import EventLog, run_id_for_checkpoint
from streaming.jars import connector_jars
from streaming.kafka_config import client_config_from_kafka_options
from streaming.lag import LagTracker
from streaming.lag_poller import LogEndPoller
from streaming.options import JobOptions, parse_args, validate_group_patterns
from streaming.progress import ProgressListener
from streaming.sink import BatchSink
from streaming.source import decoded_stream, excluded_groups
from streaming.statestore import StateStore, last_committed_batch
from streaming.topic_names import TopicNames

log = logging.getLogger("rebalance_monitor")


class Monitor:
    """The running job: the streaming query, the exporter and the lag poller."""

    def __init__(self, spark: Any, options: JobOptions) -> None:
        self.spark = spark
        self.options = options
        monitor_dir = options.checkpoint_dir / "monitor"
        tracker = LagTracker(interval_s=options.lag_poll_seconds)
        self.exporter = Exporter(options.cluster, tracker, options.lag_granularity, options.max_series)
        self.advisor = self.exporter.advisor = AdvisorPass(self.exporter.publish_advice)
        self.event_log = EventLog(options.event_log_path, run_id_for_checkpoint(options.checkpoint_dir))
        self.state_store = StateStore(monitor_dir / "state")
        client_config = client_config_from_kafka_options(options.kafka_options)
        self.poller = LogEndPoller(options.bootstrap_servers, tracker, interval_s=options.lag_poll_seconds,
                                   client_config=client_config)
        # Its own client: topic-id lookups run on the batch thread, the poller on its own.
        self._metadata = LogEndPoller(options.bootstrap_servers, LagTracker(), client_config=client_config)
        self.sink: BatchSink | None = None
        self.query: Any = None
        self.metrics_port: int | None = None
        self._listener: ProgressListener | None = None

    def start(self) -> Monitor:
        options = self.options
        options.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        validate_group_patterns(options, self.spark)
        started = time.monotonic()
        stage = self.state_store.load(last_committed_batch(options.checkpoint_dir / "spark"),
                                      limits=StageLimits.from_options(options))
        stage.forget(excluded_groups(self.spark, stage.groups, options))
        self.sink = BatchSink(options, stage, self.state_store, self.exporter, self.event_log,
                              DeadLetterLog(options.checkpoint_dir / "monitor" / "dead-letters", options.topic,
                                            options.dead_letter_max),
                              TopicNames(self._metadata.topic_names))
        log.info("restored %d groups from the checkpoint in %.2fs", len(stage.groups), time.monotonic() - started)
        self.metrics_port = self.exporter.serve(options.metrics_host, options.metrics_port)
        sink = self.sink
        self._listener = ProgressListener(self.exporter, lambda: self.query.id if self.query else None,
                                          lambda: sink.last_report)
        self.spark.streams.addListener(self._listener)
        self.query = (decoded_stream(self.spark, options).writeStream
                      # Unique per running job: one checkpoint never serves two jobs at once.
                      .queryName(f"rebalance-monitor:{options.checkpoint_dir.resolve()}")
                      .option("checkpointLocation", str(options.checkpoint_dir / "spark"))
                      .trigger(processingTime=f"{options.trigger_seconds} seconds")
                      .foreachBatch(sink)
                      .start())
        self.exporter.start_lag_refresh()
        self.advisor.start()
        self.poller.start()
        return self

    @property
    def metrics_url(self) -> str:
        host = "localhost" if self.options.metrics_host in ("0.0.0.0", "") else self.options.metrics_host
        return f"http://{host}:{self.metrics_port}/metrics"

    def _last_batch_id(self) -> int | None:
        progress = self.query.lastProgress
        return None if progress is None else progress["batchId"]

    def stop(self, drain_seconds: float = 60) -> None:
        """Stop between micro-batches: interrupting one mid-collect only produces noise."""
        self.poller.stop()
        self._metadata.stop()
        self.advisor.stop()
        if self.query is not None:
            in_flight = self._last_batch_id()
            deadline = time.monotonic() + drain_seconds
            while (self.query.isActive and self.query.status["isTriggerActive"]
                   and self._last_batch_id() == in_flight and time.monotonic() < deadline):
                time.sleep(0.1)
            self.query.stop()
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
        self.exporter.close()


def spark_session(options: JobOptions, extra_conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with the connector jars and the settings the job relies on."""
    from pyspark.sql import SparkSession

    # Python workers must run the interpreter that has this project and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-rebalance-monitor")
    if options.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(options.master or "local[*]")
        builder = builder.config("spark.jars", ",".join(str(p) for p in connector_jars(options.jars_dir)))
    conf = {
        # Spark 4's default offset reader leaves internal topics out; this one reads them.
        "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Larger Arrow batches into the decode stage: fewer Python round trips per task.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
        "spark.ui.showConsoleProgress": "false",
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(options: JobOptions) -> None:
    """Run until SIGINT/SIGTERM, then stop the query cleanly (the checkpoint stays consistent)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = spark_session(options)
    monitor = Monitor(spark, options).start()
    log.info("metrics at %s; event log %s; checkpoint %s", monitor.metrics_url,
             options.event_log_path, options.checkpoint_dir)
    print(f"Metrics: {monitor.metrics_url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and monitor.query.isActive:
        stop.wait(1)
    monitor.stop()
    if monitor.query.exception():
        raise SystemExit(f"streaming query failed: {monitor.query.exception()}")


def main(argv: list[str] | None = None) -> None:
    run(parse_args(sys.argv[1:] if argv is None else argv, prog="streaming/job.py"))


if __name__ == "__main__":
    main()
