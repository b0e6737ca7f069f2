"""Issue 30's real-fold processor (benchmarks/state_store_fold.py) hands the driver what the driver fold would.

PySpark's in-memory tester runs the processor one offsets-topic partition at a time, its state carried
from batch to batch as the state store would carry it; the project's GroupStage folds the same
batches on one interpreter. A prototype measured against the driver fold must be doing its work.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from benchmarks.driver_memory import decoded_records
from benchmarks.state_store_fold import processor
from benchmarks.synthetic import Workload, backlog
from decoders import coordinator_partition
from streaming.groups.stage import GroupStage
from streaming.protocol import GroupChange, RebalanceEvent
from tests.support.decoder_encoder import encode_key

T0 = 1_700_000_000_000
WORKLOAD = Workload(groups=30, partitions=4, records=600, generation_every=5)


def deleted(group: int) -> list[tuple[int, bytes, bytes | None]]:
    """The tombstones of the group's offsets and metadata, on its coordinator's partition (as its other records)."""
    name = WORKLOAD.group(group)
    home = coordinator_partition(name, WORKLOAD.topic_partitions)
    offsets = [(home, encode_key(1, {"group": name, "topic": WORKLOAD.topic(group), "partition": p}), None)
               for p in range(WORKLOAD.partitions)]
    return [*offsets, (home, encode_key(2, {"group": name}), None)]


def batches() -> list[list]:
    records = list(backlog(WORKLOAD, T0))
    return [records[:200], records[200:400], [*records[400:], *deleted(3)]]


def through_processor(tester: TwsTester, batch) -> tuple[dict[str, GroupChange], list[RebalanceEvent], set[str]]:
    """One batch through the processor, key by key; its changes, events and removed groups."""
    table = pa.concat_tables([batch.commits, batch.group_records])
    changes, events, removed = {}, [], set()
    for key in pc.unique(table.column("kafka_partition")).to_pylist():
        out = tester.testInPandas(key, table.filter(pc.equal(table.column("kafka_partition"), key)).to_pandas())
        for group, change, logged, gone in zip(out["group"], out["change"], out["events"], out["removed"],
                                               strict=True):
            events.extend(pickle.loads(logged) if logged is not None else [])
            if gone:
                removed.add(group)
            else:
                changes[group] = pickle.loads(change)
    return changes, events, removed


@pytest.mark.parametrize("buckets", [0, 7])
def test_the_state_store_fold_hands_over_the_driver_folds_changes_events_and_removals_batch_after_batch(
        buckets: int) -> None:
    stage = GroupStage()
    now_ms = T0
    tester = TwsTester(processor(buckets, clock=lambda: now_ms / 1000), outputMode="Update")
    seen_events = 0
    for n, records in enumerate(batches()):
        batch = decoded_records(records)
        now_ms = T0 + 60_000 * (n + 1)
        result = stage.apply(batch)
        want = {change.group: change for change in stage.changes(result, now_ms)}
        changes, events, removed = through_processor(tester, decoded_records(records))
        assert changes == want
        assert sorted(events, key=repr) == sorted(result.events, key=repr)
        assert removed == result.removed
        seen_events += len(events)
    assert removed == {WORKLOAD.group(3)}
    assert seen_events > WORKLOAD.groups  # generations after the first: rebalances, not only first joins
