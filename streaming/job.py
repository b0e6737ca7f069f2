"""The monitor job: every stage built, wired and started in one place.

* source and decode (:mod:`streaming.decode`): Spark's Kafka source on the offsets topic,
  coalesced to the cores, decoded by ``mapInArrow``; offset commits reduced inside each task;
* group stage (:mod:`streaming.groups`) on the driver, fed once per micro-batch through
  ``foreachBatch`` with one Arrow collect (:mod:`streaming.driver`); its state lives in the
  checkpoint directory beside Spark's;
* lag (:mod:`streaming.lag`), the live group states (:mod:`streaming.live`), the assignor
  advisor (:mod:`streaming.advisor`), the event log and dead letters (:mod:`streaming.logs`);
* metrics (:mod:`streaming.metrics`): the exporter stores rendered text, the endpoint serves it.

:class:`Monitor` builds them without I/O and starts the long-lived ones in order through one
:class:`~streaming.lifecycle.Lifecycle` (stopped in reverse). No stateful Spark operator is
involved, so a trigger that finds no new data runs no batch. Run with spark-submit
(deploy/spark-submit) or ``rebalance-monitor run``.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from streaming.class_archive import sharing_option
from streaming.cluster.client import (
    KafkaAccessError,
    UnsupportedKafkaOption,
    check_access,
    client_config_from_kafka_options,
    describe_delete_retention,
    redact,
    secret_values,
)
from streaming.cluster.metadata import TopicMetadata, TopicNames
from streaming.driver.activity_clock import ActivityClock
from streaming.driver.changes_sink import ChangesSink
from streaming.driver.config import DRIVER_JAVA_OPTIONS, STOP_SECONDS, driver_java_options
from streaming.driver.floor_log import FloorLog
from streaming.driver.fold_mode import FoldModeMismatch
from streaming.driver.health import Health, launched_jvm_status, query_verdict
from streaming.driver.lag_render import ScrapeText
from streaming.driver.progress import ProgressWatcher, checkpoint_progress_time, checkpoint_start_offsets
from streaming.driver.publish import build_publishing
from streaming.driver.query import QueryRunner
from streaming.driver.rebuild import CheckpointCheck, rebuild_limit
from streaming.driver.refresh import LagRefresh
from streaming.driver.retry import RetryClock
from streaming.driver.sink import BatchSink
from streaming.driver.state_query import StateStoreRunner
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.stateful.processor import FoldSettings
from streaming.groups.store import StateStore
from streaming.jars import connector_jars
from streaming.lag.poller import LogEndPoller
from streaming.lag.tracker import LagTracker
from streaming.lifecycle import Component, Lifecycle
from streaming.live.poller import LivePoller
from streaming.logformat import configure_logging
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.logs.upkeep import EventLogUpkeep
from streaming.metrics.instruments import JobMetrics
from streaming.metrics.runtime import register_runtime
from streaming.metrics.server import MetricsServer
from streaming.options import JobOptions, parse_args

log = logging.getLogger("rebalance_monitor")


class Monitor:
    """The running job: every component, built without I/O, started in order and stopped in reverse."""

    def __init__(self, spark: Any, options: JobOptions) -> None:
        self.spark = spark
        self.options = options
        metrics = options.metrics
        client_config = client_config_from_kafka_options(options.kafka.kafka_options)
        self.tracker = LagTracker(interval_s=options.lag.poll_seconds,
                                  append_time_topics=options.lag.append_time_topics)
        self.poller = LogEndPoller(options.kafka.bootstrap_servers, self.tracker,
                                   interval_s=options.lag.poll_seconds, client_config=client_config)
        self.metadata = TopicMetadata(options.kafka.bootstrap_servers, client_config)
        self.topic_names = TopicNames(self.metadata.names_by_id, self.metadata.consumer_session_timeout_ms,
                                      group_timeouts=self.metadata.consumer_group_timeouts)
        self.instruments = JobMetrics(metrics.cluster, self.tracker, options.lag.poll_seconds)
        instruments = self.instruments
        self.health = Health(self.tracker, lambda: self.runner.active(), options.driver.ready_max_behind_records,
                             stall_seconds=options.driver.stall_seconds,
                             records_behind=lambda: instruments.records_behind)
        live = options.live.poll_seconds > 0
        self.scrape_text = ScrapeText(metrics.cluster, self.tracker, self.topic_names.unresolved,
                                      metrics.compat == "kafka_exporter", live=live)
        fresh = options.lag.max_age_seconds > 0
        self.publisher = build_publishing(
            metrics.cluster, self.tracker, metrics.lag_granularity, metrics.max_series, metrics.member_labels,
            metrics.compat, options.live.poll_seconds, text=self.scrape_text, instruments=self.instruments,
            advisor=True,
            fetch_log_ends=self.poller.fetch_log_ends if fresh else None, max_age_s=options.lag.max_age_seconds,
            fetch_committed=self.poller.fetch_committed if fresh else None, on_refresh=(self.health.refresh,),
            ready=lambda: self.health.ready()[0], loss_file=options.driver.monitor_dir / "lost-records.json",
            health_window_s=options.lag.health_window_seconds,
            labels=metrics.static_labels, metrics_allow=metrics.allow, metrics_deny=metrics.deny,
            topics=options.lag.topic_filter())
        self.exporter = self.publisher.exporter
        assert self.publisher.advisor is not None
        self.advisor = self.publisher.advisor
        self.lag_refresh = LagRefresh(self.publisher.book)
        self.instruments.ready.labels(metrics.cluster).set_function(lambda: float(self.health.ready()[0]))
        register_runtime(self.instruments.registry, metrics.cluster, lambda: spark.sparkContext._jvm)
        self.server = MetricsServer(self.publisher.scrape, metrics.host, metrics.port, tls_cert=metrics.tls_cert,
                                    tls_key=metrics.tls_key, basic_auth_file=metrics.basic_auth_file,
                                    healthy=self.health.healthy, ready=self.health.ready)
        self.event_log = EventLog(options.driver.event_log_path)
        # One for the job's life: a query restarted in process keeps its pace.
        self.event_log_upkeep = EventLogUpkeep(self.event_log, options.driver.event_log_retention_seconds)
        topic = options.source.topic
        self.checkpoint_check = CheckpointCheck(options.driver.checkpoint_dir, lambda: rebuild_limit(
            options.driver.rebuild_after_seconds,
            lambda: describe_delete_retention(options.kafka.bootstrap_servers, client_config, topic), topic),
            self.instruments)

        def make_sink(stage: GroupStage, store: StateStore, dead_letters: DeadLetterLog, publish: bool,
                      floor_log: FloorLog) -> BatchSink:
            return BatchSink(options.groups, stage, store, self.publisher, self.event_log, dead_letters,
                             self.topic_names, publish_restored=publish, floor_log=floor_log,
                             upkeep=self.event_log_upkeep)

        limits = StageLimits.from_config(options.groups, options.source.dead_letter_max)
        runner_args = (spark, options.driver, options.source, options.kafka, limits)
        runner_kwargs: dict[str, Any] = dict(
            publisher=self.publisher, event_log=self.event_log, topic_names=self.topic_names, health=self.health,
            checkpoint_check=self.checkpoint_check, partition_count=self.metadata.partition_count)
        if options.groups.fold == "state-store":
            def make_changes_sink(dead_letters: DeadLetterLog, restored: pa.Table | None,
                                  floor_log: FloorLog) -> ChangesSink:
                return ChangesSink(limits, self.publisher, self.event_log, dead_letters, self.topic_names, restored,
                                   floor_log, self.event_log_upkeep)

            settings = FoldSettings(limits, int(options.groups.group_ttl_seconds * 1000),
                                    int(options.groups.expiry_sweep_seconds * 1000), options.kafka.bootstrap_servers,
                                    tuple(sorted(options.kafka.kafka_options.items())))
            self.runner: QueryRunner = StateStoreRunner(*runner_args, make_sink=None, settings=settings,
                                                        make_changes_sink=make_changes_sink, **runner_kwargs)
        else:
            self.runner = QueryRunner(*runner_args, make_sink=make_sink, **runner_kwargs)
        spark_checkpoint = options.driver.checkpoint_dir / "spark"
        # Input lag counts from where the query starts until its first batch completes (a first batch too
        # large for the driver would otherwise show 0 behind).
        self.progress = ProgressWatcher(self.instruments, lambda: self.runner.query, self.runner.last_report,
                                        self.health, min(1.0, options.driver.trigger_seconds),
                                        start_offsets=lambda: checkpoint_start_offsets(spark_checkpoint))
        # Groups turn abandoned by the clock alone: published on time even when no batch runs.
        self.activity_clock = ActivityClock(lambda: self.runner.sink)
        components: list[Component] = [self.server, self.metadata, self.runner, self.progress, self.activity_clock,
                                       self.lag_refresh, self.advisor, self.poller]
        self.live_poller: LivePoller | None = None
        if live:
            self.live_poller = LivePoller(options.kafka.bootstrap_servers, self.publisher.states,
                                          options.live.poll_seconds, options.live.describe_max, client_config,
                                          on_round=self.scrape_text.live_round)
            components.append(self.live_poller)
        self.lifecycle = Lifecycle(components)

    def start(self) -> Monitor:
        checkpoint = self.options.driver.checkpoint_dir
        checkpoint.mkdir(parents=True, exist_ok=True)
        # The last-batch gauge from the start: never absent, so MonitorStalled sees a job that never completes one.
        self.instruments.observe_previous_progress(checkpoint_progress_time(checkpoint / "spark") or time.time())
        self.event_log.follow(checkpoint / "spark")  # the run is the Spark checkpoint's query id
        self.lifecycle.start()
        return self

    def stop(self) -> None:
        """Stop every component in reverse order; the query drains its batch for up to --stop-drain-seconds."""
        self.lifecycle.stop()

    def restart_query(self) -> None:
        self.runner.restart()

    @property
    def query(self) -> Any:
        return self.runner.query

    @property
    def metrics_port(self) -> int | None:
        return self.server.port

    @property
    def metrics_url(self) -> str:
        host = "localhost" if self.options.metrics.host in ("0.0.0.0", "") else self.options.metrics.host
        scheme = "https" if self.options.metrics.tls_cert else "http"
        return f"{scheme}://{host}:{self.metrics_port}/metrics"


def spark_session(options: JobOptions, extra_conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with the connector jars and the settings the job relies on."""
    from pyspark.sql import SparkSession

    # Python workers must run the interpreter that has this project and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-rebalance-monitor")
    if options.driver.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(options.driver.master or "local[*]")
        builder = builder.config("spark.jars", ",".join(str(p) for p in connector_jars(options.driver.jars_dir)))
    conf = {
        # Spark 4's default offset reader leaves internal topics out; this one reads them.
        "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Larger Arrow batches into the decode stage: fewer Python round trips per task.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
        "spark.ui.showConsoleProgress": "false",
        # Source options shown in plans and the web UI: the JAAS text carries the SASL password.
        "spark.sql.redaction.options.regex": "(?i)url|jaas|password|secret|token",
        # A job that runs for months keeps a bounded history in Spark's status store (the web UI's):
        # at Spark's defaults (1,000 jobs, stages and SQL executions, 100,000 tasks) the driver's heap
        # grows for hours before it levels off (docs/reliability.md).
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.retainedDeadExecutors": "10",
        **(extra_conf or {}),
        # --spark-conf: the operator's word is the last.
        **options.driver.spark_settings,
    }
    # Given before the JVM starts (pyspark's launcher passes every setting to spark-submit).
    java_options = driver_java_options(conf.get(DRIVER_JAVA_OPTIONS))
    sharing = sharing_option(java_options)  # Spark's classes mapped from an archive: a faster start
    conf[DRIVER_JAVA_OPTIONS] = f"{java_options} {sharing}" if sharing else java_options
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(options: JobOptions) -> None:
    """Run until SIGINT/SIGTERM, then stop the query cleanly (the checkpoint stays consistent)."""
    configure_logging(options.driver.log_level, options.driver.log_format, secret_values(options.kafka.kafka_options))
    for note in options.notes:
        log.warning("%s", note)
    # Before Spark starts: a refused login would otherwise look like a job that never progresses.
    kafka = options.kafka
    if kafka.config_file is not None:  # the names only: values hold passwords
        log.info("Kafka client settings: %s (from %s and --kafka.* options)",
                 ", ".join(sorted(name.removeprefix("kafka.") for name in kafka.kafka_options)), kafka.config_file)
    try:
        check_access(kafka.bootstrap_servers, client_config_from_kafka_options(kafka.kafka_options),
                     options.source.topic)
    except (KafkaAccessError, UnsupportedKafkaOption) as exc:
        raise SystemExit(f"rebalance-monitor: {exc}") from None
    spark = spark_session(options)
    try:
        monitor = Monitor(spark, options).start()
    except FoldModeMismatch as exc:
        raise SystemExit(f"rebalance-monitor: {exc}") from None
    log.info("metrics at %s; event log %s; checkpoint %s", monitor.metrics_url,
             options.driver.event_log_path, options.driver.checkpoint_dir)
    print(f"Metrics: {monitor.metrics_url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    failure = None
    try:
        failure = _supervise(monitor, stop, lambda wait_s: launched_jvm_status(spark, wait_s))
    finally:
        # The stop ends within STOP_SECONDS whatever hangs in it: faulthandler's own thread then
        # prints every thread's stack and exits (a signal's default action would not end PID 1 in
        # a container). Disarmed once the stop is done (the demo stops its broker after this returns).
        faulthandler.dump_traceback_later(STOP_SECONDS, exit=True)
        monitor.stop()
        faulthandler.cancel_dump_traceback_later()
    if failure:
        # Kafka's client hides passwords in its errors; redacted anyway, as every message of the job.
        raise SystemExit(redact(failure, secret_values(kafka.kafka_options)))


def _supervise(monitor: Monitor, stop: threading.Event,
               jvm_exit_status: Callable[[float], int | None] = lambda _wait: None) -> str | None:
    """Wait for a stop signal, starting the query again after each failure (see RetryClock); why the job
    exits, if not for a signal: the failure that ends it, Spark's JVM gone (see query_verdict), or the query
    stopped from outside the job."""
    clock = RetryClock(monitor.options.driver.query_retry_seconds)
    while not stop.is_set():
        active, jvm_died = query_verdict(lambda: monitor.query.isActive, jvm_exit_status)
        if active:
            stop.wait(1)
            continue
        failure = None if jvm_died else monitor.runner.failure()
        if failure is None:
            # Spark's JVM is gone, or the query ended without an error. Unless a stop signal came with it (a
            # terminal's Ctrl-C reaches the JVM too, which then stops the query or exits), the job exits.
            if stop.wait(1):
                break
            why = jvm_died or "the streaming query was stopped outside the job"
            log.error("%s; the job exits", why)
            return why
        wait = clock.failed(time.monotonic(), monitor.instruments.last_progress)
        monitor.health.query_failed(wait)
        if wait is None:
            return f"streaming query failed: {failure}"
        log.error("streaming query failed; starting it again from the checkpoint in %.0fs: %s", wait,
                  redact(failure, secret_values(monitor.options.kafka.kafka_options)))
        if not stop.wait(wait):
            monitor.restart_query()
    return None


def main(argv: list[str] | None = None) -> None:
    run(parse_args(sys.argv[1:] if argv is None else argv, prog="streaming/job.py"))


if __name__ == "__main__":
    main()
