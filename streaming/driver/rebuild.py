"""A checkpoint too old to resume from: told at each start of the query, and set aside.

Kafka's coordinator ends a KIP-848 member, a deleted group and an expired or deleted offset
only by writing a tombstone to ``__consumer_offsets``, and the topic's cleaner drops a
tombstone ``delete.retention.ms`` after it cleaned it (24 h by default). A job resumed from a
checkpoint older than that may never read them: the member stays (the group reads
``Reconciling`` for good), the group never expires, stale offsets keep their lag. Kafka's own
coordinator never has the problem because it loads the whole compacted partition; so does the
job then: Spark's checkpoint and the group state are removed and the query reads the topic from
its beginning. The event log keeps its history (a new run: see :mod:`streaming.logs.events`).

The checkpoint's age is measured from its data position: the newest record time folded up to
the last batch Spark committed (:func:`~streaming.driver.floor_log.data_position_ms`, written
with each batch before Spark commits it), so it is the job's input lag when it stopped plus the
time it was down. A job that stopped 20 h behind and stayed down 6 h resumes at records 26 h old,
whose tombstones may be gone: with a 24 h ``delete.retention.ms`` it is rebuilt. Never later than
when the last committed batch was planned (:func:`~streaming.groups.store.last_batch_time_ms`):
a record's time comes from the broker's clock, and a checkpoint written before the data position
was has only that (the rule before, right only for a job that kept up). On a topic that sees no
write for a long time either errs towards a rebuild, never against one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streaming.cluster.client import DeleteRetention
from streaming.driver.floor_log import data_position_ms
from streaming.groups.store import discard, discard_pending, last_batch_time_ms
from streaming.metrics.instruments import JobMetrics

log = logging.getLogger("rebalance_monitor")

# Kafka's default delete.retention.ms, assumed when the cluster will not say (a warning says so).
KAFKA_DEFAULT_DELETE_RETENTION_MS = 86_400_000
REASON = "checkpoint_age"


@dataclass(frozen=True)
class RebuildLimit:
    """How old a checkpoint may be and still be resumed."""

    seconds: float | None  # None: never rebuild (--rebuild-after-seconds 0)
    source: str
    assumed: bool = False  # the cluster did not say: asked again at the next start


def rebuild_limit(configured: float | None, describe: Callable[[], DeleteRetention], topic: str) -> RebuildLimit:
    """``--rebuild-after-seconds`` when given, else the offsets topic's ``delete.retention.ms`` as the
    cluster says (``describe``); when it will not say, Kafka's default, with a warning naming the
    ACL that would let the job read it."""
    if configured is not None:
        return RebuildLimit(configured or None, "--rebuild-after-seconds")
    found = describe()
    if found.ms is not None:
        return RebuildLimit(found.ms / 1000, f"delete.retention.ms of {found.source}")
    log.warning("could not read delete.retention.ms of %s (%s); assuming Kafka's default of %.0fs. Grant the job's "
                "principal DescribeConfigs on topic %s, or set --rebuild-after-seconds to the topic's "
                "delete.retention.ms in seconds", topic, found.source, KAFKA_DEFAULT_DELETE_RETENTION_MS / 1000, topic)
    return RebuildLimit(KAFKA_DEFAULT_DELETE_RETENTION_MS / 1000, "Kafka's default delete.retention.ms (assumed)",
                        assumed=True)


class CheckpointCheck:
    """Run before each start of the streaming query (:meth:`run`): exports the checkpoint's age and,
    when the checkpoint is older than the limit, discards it."""

    def __init__(self, checkpoint_dir: Path, limit: Callable[[], RebuildLimit], instruments: JobMetrics,
                 clock: Callable[[], float] = time.time, before_set_aside: Callable[[], None] | None = None) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.limit = limit
        self.instruments = instruments
        self.clock = clock
        # Told before the checkpoint goes (the counters' floors mark the rebuild, see streaming.driver.floors): a
        # kill in between sets the checkpoint aside again at the next start, and tells it again.
        self.before_set_aside = before_set_aside
        self._known: RebuildLimit | None = None  # read once: a restart while the cluster is away still has it

    def run(self) -> bool:
        """True when the checkpoint was set aside: the query must then start from the topic's beginning."""
        metrics = self.instruments
        last_ms = last_batch_time_ms(self.checkpoint_dir / "spark")
        position_ms = None if last_ms is None else data_position_ms(self.checkpoint_dir)
        since_ms = last_ms if position_ms is None or last_ms is None else min(last_ms, position_ms)
        age = 0.0 if since_ms is None else max(0.0, self.clock() - since_ms / 1000)
        if last_ms is not None and position_ms is not None and position_ms < last_ms:
            log.info("the last committed batch folded records up to %.0fs before it was planned (the job's input lag "
                     "when it stopped), %.0fs ago: the checkpoint's age counts from its newest record",
                     (last_ms - position_ms) / 1000, max(0.0, self.clock() - last_ms / 1000))
        metrics.checkpoint_age.labels(metrics.cluster).set(age)
        if discard_pending(self.checkpoint_dir):
            log.warning("the checkpoint was being set aside when the job stopped; group state is rebuilt from the "
                        "beginning of the offsets topic")
            self._set_aside()
            return True
        if last_ms is None:
            return False
        limit = self._known or self.limit()
        if not limit.assumed:
            self._known = limit
        if limit.seconds is None or age < limit.seconds:
            log.info("checkpoint is %.0fs old; resuming from it (rebuilt after %s)", age,
                     "never" if limit.seconds is None else f"{limit.seconds:.0f}s, {limit.source}")
            return False
        log.warning("checkpoint is %.0fs old, older than %.0fs (%s): tombstones written since may be gone from the "
                    "offsets topic, so group state is rebuilt from its beginning (the event log keeps its history)",
                    age, limit.seconds, limit.source)
        self._set_aside()
        metrics.state_rebuilds.labels(metrics.cluster, REASON).inc()
        return True

    def _set_aside(self) -> None:
        if self.before_set_aside is not None:
            self.before_set_aside()
        # The event log's run is the Spark checkpoint's query id: the rebuilt query gets a new one.
        discard(self.checkpoint_dir)
