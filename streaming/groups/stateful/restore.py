"""Every group of the last committed batch, read back from the checkpoint's state store at start.

Spark's state data source (``format("statestore")``) reads the fold's map state as of a batch id; the
executors rebuild each group's change from its saved value (:meth:`GroupStage.change`, whole), so the driver
shows every group before the first batch, as the driver fold does from its own store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from streaming.groups.stage import GroupStage
from streaming.groups.stateful.processor import FoldSettings
from streaming.groups.stateful.rows import ARROW_SCHEMA, COLUMNS, SCHEMA, change_row
from streaming.groups.stateful.saved import STATE_NAME, load, loads
from streaming.pylists import pylists

# A restore of at most this many groups runs one Python task per core rather than one per state partition (50
# by default): reading 2 groups back in local[2] took 7.2 s warm and 19.8 s in a fresh process, 3.9 s and 17.2 s
# coalesced (docs/benchmarks.md). More groups keep a task per partition: each task's result reaches the driver's
# JVM whole, and two results of a large state would not fit Spark's default heap (streaming/decode/tasks.py).
COALESCE_UP_TO_GROUPS = 10_000
# Groups loaded into one stage at a time: a task's Python memory is bounded by this, not by the Arrow batch
# (up to spark.sql.execution.arrow.maxRecordsPerBatch rows, with the state's partitions coalesced to the cores).
GROUPS_AT_ONCE = 10_000


def changes_from(settings: FoldSettings, now_ms: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` body: state rows (group, saved value) to change rows."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for whole in batches:
            for start in range(0, whole.num_rows, GROUPS_AT_ONCE):
                batch = whole.slice(start, GROUPS_AT_ONCE)
                stage = GroupStage(settings.limits)
                groups, saved = pylists(batch, ("group", "saved"))
                for group, value in zip(groups, saved, strict=True):
                    load(stage, group, loads(value))
                rows = [change_row(stage.change(group, now_ms), []) for group in sorted(groups)]
                yield pa.RecordBatch.from_pylist([dict(zip(COLUMNS, row, strict=True)) for row in rows],
                                                 schema=ARROW_SCHEMA)

    return run


def restore(spark: Any, spark_checkpoint: Path, batch_id: int | None, settings: FoldSettings, where: Any,
            groups_known: int, clock: Callable[[], float] = time.time) -> pa.Table:
    """The change rows of every group the state held after ``batch_id`` that the Spark column ``where`` keeps
    (the group filters as they are now), in group order; none before a committed batch. Rows, not changes:
    the driver unpickles them a slice at a time. ``groups_known``: how many groups the job last showed (its
    counter floors), which sizes the tasks."""
    if batch_id is None:
        return ARROW_SCHEMA.empty_table()
    rows = saved_groups(spark, spark_checkpoint, batch_id).where(where)
    if groups_known <= COALESCE_UP_TO_GROUPS:
        rows = rows.coalesce(spark.sparkContext.defaultParallelism)
    return rows.mapInArrow(changes_from(settings, int(clock() * 1000)), SCHEMA).toArrow().sort_by("group")


def saved_groups(spark: Any, spark_checkpoint: Path, batch_id: int) -> Any:
    """The state's rows (``group``, ``saved``) as of ``batch_id``: a DataFrame of every group the fold holds
    (the soak counts them against the groups the cluster lists)."""
    # The state store's provider reports to the driver's StateStoreCoordinator, which Spark creates with the
    # session's streaming query manager: in a new process no query has made it yet.
    spark.streams  # noqa: B018
    state = (spark.read.format("statestore").option("stateVarName", STATE_NAME).option("batchId", batch_id)
             .load(str(spark_checkpoint)))
    return state.selectExpr("user_map_key.group AS group", "user_map_value.saved AS saved")
