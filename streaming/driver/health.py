"""Is the job alive, and has it caught up? What ``/-/healthy`` and ``/-/ready`` answer.

Healthy: the driver answers (this code runs), the HTTP server answers (the probe reached it),
and the streaming query is active in Spark's JVM or a restart after a failure is pending (the
job retries for ``--query-retry-seconds`` before it exits; killing the pod meanwhile would only
replay the checkpoint again), and it is not stalled: records are waiting (input lag > 0) and no
batch has completed, nor a trigger found nothing new, for longer than ``--stall-seconds`` since
the query (re)started (``stall_seconds``). A query with no new data to read runs no
batch and is not stalled; one whose batch never ends (a driver out of memory, a task that hangs)
is, and a liveness probe restarts the process.

Ready: since the query last started (or restarted), the job has caught up with the offsets topic
once: a trigger found no new data, or a batch ended at most ``max_behind`` records short of
log ends sampled after that start. Until then ``/metrics`` serves the state restored from the
checkpoint, which can be hours old. Once ready the job stays ready until the query fails: a
job falling behind under load is slow, not unready, and readiness that flaps under load would
take the pod out of its Service exactly when its numbers matter.

Spark's JVM gone (:func:`query_verdict`): the supervisor exits non-zero with why (an
OutOfMemoryError, a kill), rather than serving frozen numbers with no query behind them.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from streaming.lag.tracker import LagTracker
from streaming.protocol import TopicPartition

# A batch ending this many records short of the source's log ends still counts as caught up:
# records keep arriving while a batch runs.
DEFAULT_MAX_BEHIND = 10_000

log = logging.getLogger("rebalance_monitor")
# HotSpot's exit status after -XX:+ExitOnOutOfMemoryError (see streaming.driver.config.driver_java_options).
OOM_EXIT_STATUS = 3
# How long the supervisor waits for the launched JVM's exit status once it stops answering.
JVM_EXIT_WAIT_S = 2.0


def jvm_gone(status: int | None, error: BaseException | None = None) -> str:
    """Why the job exits when Spark's JVM is gone: its exit status as this process saw it (None: not known,
    the JVM was not launched here or has not been reaped yet) and the error asking it gave."""
    if status == OOM_EXIT_STATUS:
        return ("Spark's JVM ran out of memory and exited (status 3, -XX:+ExitOnOutOfMemoryError; its "
                "'Terminating due to java.lang.OutOfMemoryError' line above names the memory): give the driver "
                "a larger heap (--spark-conf spark.driver.memory=4g; the chart's driverMemory) or read less per "
                "batch (--max-offsets-per-trigger)")
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        why = " (the kernel's OOM killer at the container's memory limit, or kill -9)" if -status == 9 else ""
        return f"Spark's JVM was killed by {name}{why}"
    if status is not None:
        return f"Spark's JVM exited with status {status}"
    first = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
    detail = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return f"Spark's JVM does not answer ({detail})"


def query_verdict(query_active: Callable[[], bool],
                  jvm_exit_status: Callable[[float], int | None]) -> tuple[bool, str | None]:
    """What the supervisor makes of the query: whether it runs and, when Spark's JVM is gone, the message
    the job exits with (None while the JVM lives).

    ``query_active`` asks the JVM (raises when it does not answer); ``jvm_exit_status(wait_s)`` is the
    launched JVM's exit status, waiting up to ``wait_s`` for it (None while it runs, or not known). A JVM
    that does not answer is gone whether or not its status is known (under spark-submit it is not)."""
    try:
        active, error = bool(query_active()), None
    except Exception as exc:  # py4j's errors once the JVM is gone
        active, error = False, exc
    if active:
        return True, None
    status = jvm_exit_status(JVM_EXIT_WAIT_S if error is not None else 0.0)
    if status is None and error is None:
        return False, None  # the query stopped or failed; the JVM runs
    return False, jvm_gone(status, error)


def launched_jvm_status(spark: Any, wait_s: float = 0.0) -> int | None:
    """The exit status of Spark's JVM when this process launched it (pyspark keeps the launcher's process)
    and it has exited, waiting up to ``wait_s``; None otherwise."""
    import subprocess

    process = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if process is None:
        return None
    try:
        return process.wait(wait_s) if wait_s > 0 else process.poll()
    except subprocess.TimeoutExpired:
        return None


class Health:
    """The two probes' answers (see the module docstring); fed by the query runner, the supervisor
    and the progress watcher, read by the HTTP server's threads."""

    def __init__(self, tracker: LagTracker, query_active: Callable[[], bool],
                 max_behind: int = DEFAULT_MAX_BEHIND, clock: Callable[[], float] = time.time,
                 stall_seconds: float | None = None,
                 records_behind: Callable[[], int | None] = lambda: None) -> None:
        """Stalls are watched when ``stall_seconds`` is set (not 0): unhealthy once that long passes without a
        batch or an idle trigger while ``records_behind()`` (the job's input lag, as far as the lag poller
        knows) is above 0."""
        self._tracker = tracker
        self._query_active = query_active
        self._max_behind = max_behind
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._ready = False
        self._reason = "restoring state from the checkpoint"
        self._restart_in: float | None = None  # seconds until a pending restart, as the supervisor said
        self._processed: dict[TopicPartition, int] = {}
        self._progress_at: float | None = None  # the query's start or last progress, whichever is later
        self._stall_seconds = stall_seconds or None  # None or 0: stalls are not watched
        self._records_behind = records_behind
        self._stall_logged = False

    # -- what happens to the query (runner, supervisor) ------------------------------------

    def query_started(self) -> None:
        with self._lock:
            self._started, self._ready, self._restart_in = self._clock(), False, None
            self._progress_at = self._started
            self._processed = {}
            self._reason = "waiting for the first batch since the query started"

    def query_failed(self, restart_in: float | None) -> None:
        """The query failed; ``restart_in`` seconds until it is started again (None: the job gives up)."""
        with self._lock:
            self._ready, self._restart_in = False, restart_in
            self._reason = ("streaming query failed; restarting it from the checkpoint" if restart_in is not None
                            else "streaming query failed; the job is exiting")

    # -- progress (the progress watcher, the lag refresh) -----------------------------------

    def observe_idle(self) -> None:
        """A trigger found no new data: caught up with everything the source saw."""
        with self._lock:
            self._progress_at = self._clock()
            if self._started is not None and self._restart_in is None:
                self._ready, self._reason = True, "caught up"

    def observe_batch(self, processed: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            self._processed.update(processed)
            self._progress_at = self._clock()
        self.refresh()

    def refresh(self, now: float | None = None) -> None:
        """Re-check catch-up against the newest log-end samples (after batches and poll rounds)."""
        with self._lock:
            if self._ready or self._started is None or not self._processed or self._restart_in is not None:
                return
            behind, unknown = 0, 0
            sampled_at = self._tracker.sampled_at()
            for (topic, partition), offset in self._processed.items():
                found = self._tracker.lag_uncommitted(topic, partition)
                sampled = sampled_at.get((topic, partition))
                if found is None or sampled is None or sampled < self._started:
                    unknown += 1
                else:
                    behind += max(0, found.log_end - offset)
            if unknown:
                self._reason = (f"catching up: {unknown} offsets-topic partition(s) without a log-end sample "
                                "since the query started")
            elif behind > self._max_behind:
                self._reason = f"catching up: {behind} records behind the offsets topic"
            else:
                self._ready, self._reason = True, "caught up"

    # -- the probes ---------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        with self._lock:
            restart_in = self._restart_in
        if restart_in is not None:
            return True, f"streaming query restarting in {restart_in:.0f}s"
        try:
            active = self._query_active()
        except Exception as exc:  # the JVM is gone or does not answer
            return False, f"Spark's JVM does not answer: {type(exc).__name__}"
        if not active:
            return False, "streaming query is not running"
        stalled = self.stalled()
        return (False, stalled) if stalled else (True, "ok")

    def stalled(self) -> str | None:
        """Why the query counts as stalled (see the module docstring), None when it does not."""
        with self._lock:
            since, limit = self._progress_at, self._stall_seconds
        if since is None or limit is None or (quiet := self._clock() - since) <= limit:
            self._stall_logged = False
            return None
        waiting = self._records_behind()
        if not waiting:
            self._stall_logged = False
            return None
        reason = (f"streaming query stalled: no batch completed for {quiet:.0f}s with {waiting} records waiting "
                  f"(--stall-seconds {limit:.0f})")
        if not self._stall_logged:
            self._stall_logged = True
            log.error("%s; /-/healthy answers 503 until a batch completes", reason)
        return reason

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            return self._ready, self._reason
