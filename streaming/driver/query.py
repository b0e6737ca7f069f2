"""The streaming query as a component: restored from the checkpoint, started, drained, stopped, restarted.

Each start first reloads the group stage from the state of the last batch Spark committed
(:meth:`streaming.groups.store.StateStore.load`) and publishes it, so ``/metrics`` serves
every group before the first batch, and a restart after a failure resumes exactly as a new
process would. Before that, a checkpoint too old to resume from is set aside and the query reads
the topic from its beginning (:mod:`streaming.driver.rebuild`). The counters' floors
(:mod:`streaming.driver.floor_log`) are loaded once, before the first publish, and outlive both a
restart and a rebuild: nothing shown steps back. Failures reach Spark as one short line (see
:func:`short_errors`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from streaming.cluster.config import KafkaConfig
from streaming.cluster.metadata import TopicNames
from streaming.decode.config import SourceConfig
from streaming.decode.source import decode, excluded_groups, kafka_stream, validate_group_patterns
from streaming.decode.tasks import batch_ranges, coalesce_to
from streaming.driver.config import DriverConfig
from streaming.driver.floor_log import FloorLog
from streaming.driver.fold_mode import check_fold_mode
from streaming.driver.health import Health
from streaming.driver.publish import Publisher
from streaming.driver.rebuild import CheckpointCheck
from streaming.driver.sink import BatchSink, Sink, young_garbage_only
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.store import StateStore, last_committed_batch
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import BatchReport

log = logging.getLogger("rebalance_monitor")

# What the runner builds the sink with after each restore: the restored stage, its store, the dead-letter
# log, whether to publish the restored state (see BatchSink) and the floor log the sink writes first.
SinkFactory = Callable[[GroupStage, StateStore, DeadLetterLog, bool, FloorLog], BatchSink]

# Spark runs a regex that recurses once per character over a failed foreachBatch's error (see
# short_errors); on a default thread stack it overflowed at 2,000 characters.
MAX_ERROR_CHARS = 600


class BatchFailed(RuntimeError):
    """A micro-batch's failure, as the few lines Spark gets back from the Python side."""


def error_head(exc: BaseException) -> str:
    """``exc`` as Python prints its last line, without the Java stack trace a Py4JJavaError carries."""
    kind = type(exc)
    try:
        text = str(exc)  # a Py4JJavaError asks the JVM for its text
    except Exception:
        text = str(exc.args[0]) if exc.args else ""
    lines = f"{kind.__module__}.{kind.__qualname__}: {text}".splitlines()
    return "\n".join(itertools.takewhile(lambda line: not line.startswith("\tat "), lines))[:MAX_ERROR_CHARS]


@contextmanager
def cancelling(spark: Any, job_group: str, every_s: float = 0.5) -> Iterator[None]:
    """Cancel ``job_group``'s Spark jobs again and again while the block runs.

    Spark's ``query.stop()`` cancels the run's job group once. A job the batch submits after that (a
    signal between a batch's planning and its collect) is not cancelled, and the stop waited for the
    whole batch: a 3,000,000-record catch-up stopped after 30 s, at the job's hard deadline.
    """
    done = threading.Event()

    def cancel() -> None:
        while not done.wait(every_s):
            try:
                spark.sparkContext.cancelJobGroup(job_group)
            except Exception:  # the JVM going away mid-stop: nothing left to cancel
                return

    thread = threading.Thread(target=cancel, name="cancel-batch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2 * every_s)  # a daemon: a cancel stuck in a dying JVM does not hold the stop


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


class QueryRunner:
    """The streaming query and its sink; a component (see :mod:`streaming.lifecycle`)."""

    name = "streaming-query"

    def __init__(self, spark: Any, driver: DriverConfig, source: SourceConfig, kafka: KafkaConfig,
                 limits: StageLimits, make_sink: SinkFactory | None, publisher: Publisher, event_log: EventLog,
                 topic_names: TopicNames, health: Health | None = None,
                 checkpoint_check: CheckpointCheck | None = None,
                 partition_count: Callable[[str], int | None] | None = None) -> None:
        self.spark = spark
        self.partition_count = partition_count
        self.checkpoint_check = checkpoint_check
        self.health = health
        self.driver, self.source, self.kafka, self.limits = driver, source, kafka, limits
        self.make_sink = make_sink
        self.publisher = publisher
        self.event_log = event_log
        self.topic_names = topic_names
        self.state_store = StateStore(driver.monitor_dir / "state")
        self.floor_log = FloorLog(driver.checkpoint_dir)
        if checkpoint_check is not None:
            checkpoint_check.before_set_aside = self._rebuilding
        self.sink: Sink | None = None
        self.query: Any = None
        self._stopping_run: str | None = None  # the query's run id once stop() cancels batches
        # The checkpoint was set aside in this process: a Spark checkpoint without offsets starts at the
        # topic's beginning whatever --starting-offsets says (one with offsets ignores the option).
        self._from_beginning = False

    fold = "driver"

    def start(self) -> None:
        check_fold_mode(self.driver.checkpoint_dir, self.fold)
        validate_group_patterns(self.source, self.spark)
        loaded = self.floor_log.load(self.publisher.floors)  # before anything is shown; a rebuild keeps them
        log.info("loaded the counter floors of %d groups", loaded)
        self._check_checkpoint()
        self._restore(publish=True)
        self._start_query()

    def restart(self) -> None:
        """Start the failed query again from the checkpoint, as a new process would: the group stage is
        reloaded from the state of the last committed batch, whatever a failed batch left in memory."""
        self.publisher.instruments.query_restarts.labels(self.publisher.cluster).inc()
        if self._check_checkpoint() and self.sink is not None:
            # Shown from the state set aside: the replay shows them anew, starting from their floors.
            with self.publisher.floors.kept():
                for group in sorted(self.sink.groups):
                    self.publisher.remove(group)
            self.sink = None  # nothing of what it showed is carried over
        self._restore(publish=False)  # what is shown already is at least as new (see BatchSink)
        self._start_query()

    def _rebuilding(self) -> None:
        """The checkpoint is about to be set aside: each group's counters start again from its floors at its first
        sight in the replay, written down before the checkpoint goes."""
        self.publisher.floors.rebuilt()
        self.floor_log.write(None, None, self.publisher.floors)

    def _check_checkpoint(self) -> bool:
        """Set a checkpoint too old to resume from aside (see :mod:`streaming.driver.rebuild`); True if it was."""
        if self.checkpoint_check is None or not self.checkpoint_check.run():
            return False
        self._from_beginning = True
        self.event_log.follow(self.driver.checkpoint_dir / "spark")  # the new query id, once Spark writes it
        return True

    def active(self) -> bool:
        """Whether the query runs (asks Spark's JVM: raises when it does not answer)."""
        return self.query is not None and bool(self.query.isActive)

    def failure(self) -> str | None:
        """The failed query's error, None while it runs or once it was stopped."""
        try:  # the JVM may be gone: then there is no query to ask
            failure = self.query.exception()
        except Exception:
            return None
        return None if failure is None else str(failure)

    def _restore(self, publish: bool) -> None:
        """The group stage and the sink from the state of the last batch Spark committed."""
        started = time.monotonic()
        last_committed = last_committed_batch(self.driver.checkpoint_dir / "spark")
        # Without the cyclic collector, as a batch is folded: a state of 100,000 groups is millions of
        # long-lived objects, and the full collections their allocation set off were 7-13 s of a 20 s load.
        with young_garbage_only():
            stage = self.state_store.load(last_committed, limits=self.limits, facts=self.topic_names)
        stage.forget(excluded_groups(self.spark, stage.groups, self.source))
        dead_letters = DeadLetterLog(self.driver.monitor_dir / "dead-letters", self.source.topic,
                                     self.source.dead_letter_max)
        self.floor_log.restored(last_committed)
        assert self.make_sink is not None
        self.sink = self.make_sink(stage, self.state_store, dead_letters, publish, self.floor_log)
        # Floors the restored state raised (a checkpoint older than its floors): the state shows them again after a
        # kill, but a rebuild would not.
        self.floor_log.write(None, None, self.publisher.floors)
        log.info("restored %d groups from the checkpoint in %.2fs", len(stage.groups), time.monotonic() - started)

    def _start_query(self) -> None:
        sink = self.sink
        assert sink is not None
        if self.health is not None:
            self.health.query_started()
        checkpoint = self.driver.checkpoint_dir
        # A fresh Spark checkpoint starts at startingOffsets; a rebuild needs every record the topic kept.
        source = replace(self.source, starting_offsets="earliest") if self._from_beginning else self.source
        self.query = (self._stream(source).writeStream
                      # Unique per running job: one checkpoint never serves two jobs at once.
                      .queryName(f"rebalance-monitor:{checkpoint.resolve()}")
                      .option("checkpointLocation", str(checkpoint / "spark"))
                      .trigger(processingTime=f"{self.driver.trigger_seconds} seconds")
                      .foreachBatch(short_errors(self._batch_body(sink, source), lambda: self._stopping_run))
                      .start())
        log.info("query %s started (run %s)", self.query.id, self.query.runId)

    def _stream(self, source: SourceConfig) -> Any:
        """The streaming DataFrame each batch of which the sink gets (here the source's rows, decoded by
        :meth:`_batch_body`)."""
        return kafka_stream(self.spark, self.kafka, source, self._topic_partitions())

    def _batch_body(self, sink: Sink, source: SourceConfig) -> Callable[[Any, int], None]:
        return self._decoding(sink, source)

    def _topic_partitions(self) -> int | None:
        """The topic's partitions, read at each start, for the source's ``assign`` (None: it subscribes, see
        :func:`~streaming.decode.source.source_options`)."""
        topic = self.source.topic
        if self.partition_count is None:
            return None
        try:
            count = self.partition_count(topic)
        except Exception as exc:
            log.warning("could not read topic %s's partitions (%s); the source subscribes to it", topic, exc)
            return None
        if count is None:
            log.info("topic %s does not exist yet; the source subscribes and waits for it", topic)
        else:
            log.info("reading topic %s by assign (%d partitions; no consumer group)", topic, count)
        return count

    def _decoding(self, sink: Sink, source: SourceConfig) -> Callable[[Any, int], None]:
        """``sink`` fed each batch decoded, in as many tasks as :func:`coalesce_to` chooses from the offset
        ranges the batch reads."""
        cores = self.spark.sparkContext.defaultParallelism
        checkpoint = self.driver.checkpoint_dir / "spark"

        def batch(df: Any, batch_id: int) -> None:
            ranges = batch_ranges(checkpoint, batch_id)
            tasks = coalesce_to(ranges, cores)
            if tasks is None or tasks > cores:
                log.info("batch %d is decoded in %s: %s", batch_id,
                         "one task per source partition" if tasks is None else f"{tasks} tasks",
                         "the checkpoint does not say what it reads" if ranges is None else
                         f"{sum(ranges):,} records at most, {len(ranges)} topic partitions")
            sink(decode(df, source, tasks), batch_id)

        return batch

    def last_report(self) -> BatchReport:
        """What the sink made of the last batch it folded (the progress log line's details)."""
        return self.sink.last_report if self.sink is not None else BatchReport()

    def _last_batch_id(self) -> int | None:
        progress = self.query.lastProgress
        return None if progress is None else progress["batchId"]

    def stop(self) -> None:
        """Stop between micro-batches if the one in flight ends within --stop-drain-seconds, else cancel
        it (Spark runs it again on restart). The JVM may have gone first (it got the signal too)."""
        from py4j.protocol import Py4JError

        try:
            if self.query is not None:
                in_flight = self._last_batch_id()
                deadline = time.monotonic() + self.driver.stop_drain_seconds
                while (self.query.isActive and self.query.status["isTriggerActive"]
                       and self._last_batch_id() == in_flight and time.monotonic() < deadline):
                    time.sleep(0.1)
                self._stopping_run = str(self.query.runId)
                with cancelling(self.spark, self._stopping_run):
                    self.query.stop()
        except (Py4JError, ConnectionError) as exc:
            log.warning("Spark's JVM is gone, nothing left to stop there: %s", str(exc).splitlines()[0])
