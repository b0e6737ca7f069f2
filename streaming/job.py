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

import contextlib
import faulthandler
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from streaming.advisor_pass import AdvisorPass
from streaming.dead_letters import DeadLetterLog
from streaming.exporter import Exporter
from streaming.groups import StageLimits
from streaming.history import EventLog, run_id_for_checkpoint
from streaming.jars import connector_jars
from streaming.kafka_config import (
    KafkaAccessError,
    UnsupportedKafkaOption,
    check_access,
    client_config_from_kafka_options,
    redact,
    secret_values,
)
from streaming.lag import LagTracker
from streaming.lag_poller import LogEndPoller
from streaming.options import JobOptions, parse_args, validate_group_patterns
from streaming.progress import ProgressListener
from streaming.sink import BatchSink
from streaming.source import decoded_stream, excluded_groups
from streaming.statestore import StateStore, last_committed_batch
from streaming.topic_names import TopicNames

log = logging.getLogger("rebalance_monitor")

# SIGINT/SIGTERM: the batch in flight gets DRAIN_SECONDS to finish before it is cancelled, and the
# stop ends within STOP_SECONDS whatever hangs (a kill at any point leaves the checkpoint valid:
# tests/test_faults.py kills the driver mid-batch).
DRAIN_SECONDS = 10
STOP_SECONDS = 30


class BatchFailed(RuntimeError):
    """A micro-batch's failure, as the few lines Spark gets back from the Python side."""


# Spark runs a regex that recurses once per character over a failed foreachBatch's error (see
# short_errors); on a default thread stack it overflowed at 2,000 characters.
MAX_ERROR_CHARS = 600


def error_head(exc: BaseException) -> str:
    """``exc`` as Python prints its last line, without the Java stack trace a Py4JJavaError carries."""
    kind = type(exc)
    try:
        text = str(exc)  # a Py4JJavaError asks the JVM for its text
    except Exception:
        text = str(exc.args[0]) if exc.args else ""
    lines = f"{kind.__module__}.{kind.__qualname__}: {text}".splitlines()
    return "\n".join(itertools.takewhile(lambda line: not line.startswith("\tat "), lines))[:MAX_ERROR_CHARS]


def short_errors(sink: Any, stopping_run: Callable[[], str | None]) -> Any:
    """``sink`` as a foreachBatch function whose failures reach Spark as a short line.

    When a stop cancels a batch, Spark tells its own interruption from a real failure by matching
    the foreachBatch error's text (``StreamExecution.isInterruptionException``), first with a regex
    that recurses once per character (``PROXY_ERROR``, ``((.|\\r\\n|\\r|\\n)*)``). The whole
    Python traceback, with the Java stack trace of the cancelled collect in it, overflowed the stream
    thread's stack (StackOverflowError in java.util.regex): the query died instead of stopping, and
    the stop hung. So a failure reaches Spark as one short line; while the job stops
    (``stopping_run`` gives the query's run id, its job group) the line is what Spark takes for a
    cancelled job group, and the query ends as stopped.
    """
    def batch(df: Any, batch_id: int) -> None:
        try:
            sink(df, batch_id)
        except Exception as exc:
            run_id = stopping_run()
            if run_id is not None:
                log.info("batch %d cancelled by the stop; Spark runs it again on restart", batch_id)
                raise BatchFailed(f"org.apache.spark.SparkException: batch {batch_id} cancelled, "
                                  f"job group {run_id} stopped") from None
            log.error("batch %d failed", batch_id, exc_info=True)
            raise BatchFailed(error_head(exc)) from None

    return batch


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
        self._stopping_run: str | None = None  # the query's run id once stop() cancels batches

    def start(self) -> Monitor:
        options = self.options
        options.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        validate_group_patterns(options, self.spark)
        self._restore()
        self.metrics_port = self.exporter.serve(options.metrics_host, options.metrics_port,
                                                tls_cert=options.metrics_tls_cert, tls_key=options.metrics_tls_key,
                                                basic_auth_file=options.metrics_basic_auth_file)
        self._start_query()
        self.exporter.start_lag_refresh()
        self.advisor.start()
        self.poller.start()
        return self

    def restart_query(self) -> None:
        """Start the failed query again from the checkpoint, as a new process would: the group stage is
        reloaded from the state of the last committed batch, whatever a failed batch left in memory."""
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
        self.exporter.query_restarts.labels(self.options.cluster).inc()
        self._restore()
        self._start_query()

    def _restore(self) -> None:
        """The group stage and the sink from the state of the last batch Spark committed."""
        options = self.options
        started = time.monotonic()
        stage = self.state_store.load(last_committed_batch(options.checkpoint_dir / "spark"),
                                      limits=StageLimits.from_options(options))
        stage.forget(excluded_groups(self.spark, stage.groups, options))
        self.sink = BatchSink(options, stage, self.state_store, self.exporter, self.event_log,
                              DeadLetterLog(options.checkpoint_dir / "monitor" / "dead-letters", options.topic,
                                            options.dead_letter_max),
                              TopicNames(self._metadata.topic_names))
        log.info("restored %d groups from the checkpoint in %.2fs", len(stage.groups), time.monotonic() - started)

    def _start_query(self) -> None:
        options, sink = self.options, self.sink
        assert sink is not None
        self._listener = ProgressListener(self.exporter, lambda: self.query.id if self.query else None,
                                          lambda: sink.last_report)
        self.spark.streams.addListener(self._listener)
        self.query = (decoded_stream(self.spark, options).writeStream
                      # Unique per running job: one checkpoint never serves two jobs at once.
                      .queryName(f"rebalance-monitor:{options.checkpoint_dir.resolve()}")
                      .option("checkpointLocation", str(options.checkpoint_dir / "spark"))
                      .trigger(processingTime=f"{options.trigger_seconds} seconds")
                      .foreachBatch(short_errors(sink, lambda: self._stopping_run))
                      .start())

    @property
    def metrics_url(self) -> str:
        host = "localhost" if self.options.metrics_host in ("0.0.0.0", "") else self.options.metrics_host
        scheme = "https" if self.options.metrics_tls_cert else "http"
        return f"{scheme}://{host}:{self.metrics_port}/metrics"

    def _last_batch_id(self) -> int | None:
        progress = self.query.lastProgress
        return None if progress is None else progress["batchId"]

    def stop(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """Stop between micro-batches if the one in flight ends within ``drain_seconds``, else cancel
        it (Spark runs it again on restart). The JVM may have gone first (it got the signal too)."""
        from py4j.protocol import Py4JError

        self.poller.stop()
        self._metadata.stop()
        self.advisor.stop()
        try:
            if self.query is not None:
                in_flight = self._last_batch_id()
                deadline = time.monotonic() + drain_seconds
                while (self.query.isActive and self.query.status["isTriggerActive"]
                       and self._last_batch_id() == in_flight and time.monotonic() < deadline):
                    time.sleep(0.1)
                self._stopping_run = str(self.query.runId)
                self.query.stop()
            if self._listener is not None:
                self.spark.streams.removeListener(self._listener)
        except (Py4JError, ConnectionError) as exc:
            log.warning("Spark's JVM is gone, nothing left to stop there: %s", str(exc).splitlines()[0])
        finally:
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
        # Source options shown in plans and the web UI: the JAAS text carries the SASL password.
        "spark.sql.redaction.options.regex": "(?i)url|jaas|password|secret|token",
        # An idle query says so once per trigger, not once per 10 s (Spark's default): the last-batch
        # gauge, which idle triggers refresh, is then never more than a trigger old on a healthy job.
        "spark.sql.streaming.noDataProgressEventInterval": f"{max(1, round(options.trigger_seconds * 1000))}ms",
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
    # py4j logs every callback at INFO, and from __del__ too: at interpreter exit that took the log
    # handler's lock held by a thread already frozen, and the process never ended.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Before Spark starts: a refused login would otherwise look like a job that never progresses.
    try:
        check_access(options.bootstrap_servers, client_config_from_kafka_options(options.kafka_options), options.topic)
    except (KafkaAccessError, UnsupportedKafkaOption) as exc:
        raise SystemExit(f"rebalance-monitor: {exc}") from None
    spark = spark_session(options)
    monitor = Monitor(spark, options).start()
    log.info("metrics at %s; event log %s; checkpoint %s", monitor.metrics_url,
             options.event_log_path, options.checkpoint_dir)
    print(f"Metrics: {monitor.metrics_url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    failure = None
    try:
        failure = _supervise(monitor, stop)
    finally:
        # The stop ends within STOP_SECONDS whatever hangs in it: faulthandler's own thread then
        # prints every thread's stack and exits (a signal's default action would not end PID 1 in
        # a container). Disarmed once the stop is done (the demo stops its broker after this returns).
        faulthandler.dump_traceback_later(STOP_SECONDS, exit=True)
        monitor.stop()
        faulthandler.cancel_dump_traceback_later()
    if failure:
        # Kafka's client hides passwords in its errors; redacted anyway, as every message of the job.
        raise SystemExit(redact(f"streaming query failed: {failure}", secret_values(options.kafka_options)))


def _supervise(monitor: Monitor, stop: threading.Event) -> str | None:
    """Wait for a stop signal, starting the query again after each failure (see RetryClock); the failure
    that ends the job, if one does."""
    clock = RetryClock(monitor.options.query_retry_seconds)
    while not stop.is_set():
        if monitor.query.isActive:
            stop.wait(1)
            continue
        failure = _query_failure(monitor)
        if failure is None:  # stopped from outside the job (the JVM went): nothing to start again
            return None
        wait = clock.failed(time.monotonic(), monitor.exporter.last_progress)
        if wait is None:
            return failure
        log.error("streaming query failed; starting it again from the checkpoint in %.0fs: %s", wait,
                  redact(failure, secret_values(monitor.options.kafka_options)))
        if not stop.wait(wait):
            monitor.restart_query()
    return None


def _query_failure(monitor: Monitor) -> str | None:
    with contextlib.suppress(Exception):  # the JVM may be gone: then there is no query to ask
        failure = monitor.query.exception()
        return None if failure is None else str(failure)
    return None


class RetryClock:
    """When to start a failed query again: 1 s after the first failure, doubling to 60 s while failures
    follow each other without a batch in between; give up once failing has lasted ``limit_seconds``."""

    FIRST_SECONDS = 1.0
    MAX_SECONDS = 60.0

    def __init__(self, limit_seconds: float) -> None:
        self.limit_seconds = limit_seconds
        self.failing_since: float | None = None  # monotonic time of the first failure in a row
        self.last_batch: float | None = None  # the exporter's last batch time at that failure
        self.failures = 0

    def failed(self, now: float, last_batch: float | None) -> float | None:
        """A failure at ``now`` (the last batch at ``last_batch``): seconds to wait before the restart, or
        None to give up."""
        if self.failing_since is None or last_batch != self.last_batch:  # a batch since: a new run of failures
            self.failing_since, self.last_batch, self.failures = now, last_batch, 0
        self.failures += 1
        if now - self.failing_since >= self.limit_seconds:
            return None
        return min(self.MAX_SECONDS, self.FIRST_SECONDS * 2 ** (self.failures - 1))


def main(argv: list[str] | None = None) -> None:
    run(parse_args(sys.argv[1:] if argv is None else argv, prog="streaming/job.py"))


if __name__ == "__main__":
    main()
