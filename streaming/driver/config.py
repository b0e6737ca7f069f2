"""The running job itself: checkpoint, event log, trigger, restarts, Spark master and connector jars."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from streaming.settings import Config, flag, not_negative, positive, setting

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
# The stop ends within STOP_SECONDS whatever hangs (a kill at any point leaves the checkpoint valid).
STOP_SECONDS = 30
# Spark's driver JVM exits at its first OutOfMemoryError (see driver_java_options).
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"
# Flags by which an operator has already chosen what the JVM does on OutOfMemoryError.
OOM_CHOICES = ("ExitOnOutOfMemoryError", "CrashOnOutOfMemoryError")
# The event log's retention: Kafka's own default (log.retention.hours=168).
EVENT_LOG_RETENTION_SECONDS = 7 * 24 * 3600.0


def driver_java_options(configured: str | None) -> str:
    """``spark.driver.extraJavaOptions`` with the job's exit on the first OutOfMemoryError, merged with the
    operator's own options (``--spark-conf``), never replacing them.

    A driver JVM out of heap does not die by itself: the thread that hit the error dies (Spark's
    task-result getters, collecting a first batch too large for the heap), the query waits for it for
    ever, neither completing a batch nor failing, and the process looks alive. With
    ``-XX:+ExitOnOutOfMemoryError`` the JVM prints ``Terminating due to java.lang.OutOfMemoryError`` and
    exits with status 3; the job's supervisor then exits non-zero, saying so
    (:func:`streaming.driver.health.query_verdict`). An operator who set ExitOnOutOfMemoryError or
    CrashOnOutOfMemoryError either way keeps that choice; ours goes first otherwise, so any later flag
    of theirs still wins. Only where this process starts the JVM (``rebalance-monitor run``); under
    spark-submit the JVM already runs and takes ``--driver-java-options`` instead."""
    configured = (configured or "").strip()
    if any(choice in configured for choice in OOM_CHOICES):
        return configured
    return f"{EXIT_ON_OOM} {configured}".strip()


@dataclass(frozen=True)
class DriverConfig(Config):
    checkpoint_dir: Path = field(default=Path(".local/checkpoint"), metadata=setting(
        "Spark checkpoint (offsets + per-group state); restart resumes from it", type=Path))
    event_log: Path | None = field(default=None, metadata=setting(
        "Parquet rebalance event log (default: CHECKPOINT_DIR/events)", type=Path))
    event_log_retention_seconds: float = field(default=EVENT_LOG_RETENTION_SECONDS, metadata=setting(
        "the event log keeps rebalances this long by their record time: about hourly, files all of whose "
        "events are older are deleted, and each run's batch files are merged into hourly segments (default 7 "
        "days, Kafka's own log.retention.hours; 0: keep every event)", type=float))
    trigger_seconds: float = field(default=5.0, metadata=setting("micro-batch interval", type=float))
    query_retry_seconds: float = field(default=3600.0, metadata=setting(
        "after the streaming query fails (a batch's read outlasting the source's poll timeout, a failing "
        "checkpoint or event-log volume), start it again from the checkpoint, with backoff, for up to this "
        "long without a batch; then exit non-zero (0: exit at the first failure)", type=float))
    rebuild_after_seconds: float | None = field(default=None, metadata=setting(
        "at each start of the streaming query, a checkpoint whose last batch is older than this is not resumed: "
        "group state is rebuilt from the beginning of the offsets topic, whose cleaner may have dropped the "
        "tombstones written meanwhile (default: the offsets topic's delete.retention.ms; 0: never rebuild)",
        type=float))
    stop_drain_seconds: float = field(default=10.0, metadata=setting(
        f"on SIGTERM or SIGINT, the micro-batch in flight gets this long to finish before it is cancelled (Spark "
        f"runs it again on restart); below {STOP_SECONDS}, the whole stop's limit, and well inside the pod's "
        f"terminationGracePeriodSeconds", type=float))
    ready_max_behind_records: int = field(default=10_000, metadata=setting(
        "/-/ready answers 200 once a batch since the query started ends at most this many records short of the "
        "offsets topic's log ends (or a trigger finds nothing new)", type=int))
    stall_seconds: float = field(default=900.0, metadata=setting(
        "/-/healthy answers 503 (a liveness probe restarts the job) once the streaming query has completed no "
        "batch for this long while records of the offsets topic wait (input lag above 0); a query with nothing "
        "new to read is never stalled. 15 minutes is ~8x the longest first batch measured (docs/benchmarks.md: "
        "100,000 groups, 111 s; a 5 M-record drain 14.7 s): raise it for a larger first batch, or cap batches "
        "with --max-offsets-per-trigger (0: never)", type=float))
    master: str | None = field(default=None, metadata=setting(
        "Spark master when started outside spark-submit (default local[*])"))
    jars_dir: Path | None = field(default=None, metadata=setting(
        "directory with Spark's Kafka connector jars (default: $REBALANCE_MONITOR_JARS, else build/jars of a "
        "source checkout)", type=Path))

    spark_conf: tuple[str, ...] = field(default=(), metadata=setting(
        "a Spark setting for the job's SparkSession, KEY=VALUE (repeatable), for example spark.local.dir=/tmp/spark "
        "or spark.driver.memory=3g outside spark-submit; applied over the job's own settings",
        action="append"))
    log_level: str = field(default="INFO", metadata=setting(
        "the job's log level; Kafka clients' INFO chatter is shown at DEBUG only", choices=LOG_LEVELS))
    log_format: str = field(default="text", metadata=setting(
        "the job's log lines: text, or json (one object per line: time, level, logger, message)",
        choices=LOG_FORMATS))

    def problems(self) -> list[str]:
        problems = [*positive(self, "trigger_seconds"),
                    *not_negative(self, "event_log_retention_seconds", "query_retry_seconds",
                                 "ready_max_behind_records", "stall_seconds")]
        if self.rebuild_after_seconds is not None and not self.rebuild_after_seconds >= 0:
            problems.append(f"{flag(self, 'rebuild_after_seconds')} must not be negative")
        if not 0 <= self.stop_drain_seconds < STOP_SECONDS:
            problems.append(f"{flag(self, 'stop_drain_seconds')} must be at least 0 and below {STOP_SECONDS}")
        problems += [f"{flag(self, 'spark_conf')} {item.partition('=')[0]!r}: expected KEY=VALUE"
                     for item in self.spark_conf if not item.partition("=")[0].strip() or "=" not in item]
        if self.log_level not in LOG_LEVELS:
            problems.append(f"{flag(self, 'log_level')} must be one of {', '.join(LOG_LEVELS)}")
        if self.log_format not in LOG_FORMATS:
            problems.append(f"{flag(self, 'log_format')} must be one of {', '.join(LOG_FORMATS)}")
        return problems

    @property
    def spark_settings(self) -> dict[str, str]:
        """--spark-conf as a mapping; a later KEY=VALUE wins."""
        return {key.strip(): value for key, _, value in (item.partition("=") for item in self.spark_conf)}

    @property
    def event_log_path(self) -> Path:
        return self.event_log or self.checkpoint_dir / "events"

    @property
    def monitor_dir(self) -> Path:
        """The group stage's part of the checkpoint (state, dead letters), beside Spark's own."""
        return self.checkpoint_dir / "monitor"
