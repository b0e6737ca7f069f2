"""The state-store fold (streaming/groups/stateful, and the prototype's bucketed variant in
benchmarks/state_store_fold.py) hands the driver what the driver fold would.

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

from benchmarks import state_store_fold
from benchmarks.driver_memory import decoded_records, decoded_table
from benchmarks.synthetic import Workload, backlog
from decoders import coordinator_partition
from streaming.groups.stage import GroupStage
from streaming.groups.stateful.processor import FoldSettings, processor
from streaming.groups.stateful.rows import KeyCounts
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


def through_processor(tester: TwsTester, table: pa.Table) -> tuple[dict[str, GroupChange], list[RebalanceEvent],
                                                                   set[str], KeyCounts]:
    """One batch's decoded rows through the processor, key by key as the job keys them (the rows without an
    offsets-topic partition under -1); its changes, events, removed groups and summed counts."""
    keys = pc.fill_null(table.column("kafka_partition"), -1)
    changes, events, removed, counts = {}, [], set(), KeyCounts()
    for key in pc.unique(keys).to_pylist():
        out = tester.testInPandas(key, table.filter(pc.equal(keys, key)).to_pandas())
        for row in out.to_dict("records"):
            if row.get("counts") is not None:
                counts.add(pickle.loads(row["counts"]))
                continue
            events.extend(pickle.loads(row["events"]) if row["events"] is not None else [])
            if row["removed"]:
                removed.add(row["group"])
            else:
                changes[row["group"]] = pickle.loads(row["change"])
    return changes, events, removed, counts


@pytest.mark.parametrize("fold", ["job", "prototype-buckets"])
def test_the_state_store_fold_hands_over_the_driver_folds_changes_events_and_removals_batch_after_batch(
        fold: str) -> None:
    stage = GroupStage()
    now_ms = T0

    def clock() -> float:
        return now_ms / 1000

    made = processor(FoldSettings(), clock) if fold == "job" else state_store_fold.processor(7, clock)
    tester = TwsTester(made, outputMode="Update")
    seen_events = 0
    for n, records in enumerate(batches()):
        batch = decoded_records(records)
        now_ms = T0 + 60_000 * (n + 1)
        result = stage.apply(batch)
        want = {change.group: change for change in stage.changes(result, now_ms)}
        table = decoded_table(records)
        if fold != "job":  # the prototype's query hands its processor the fold's rows only
            batch_rows = decoded_records(records)
            table = pa.concat_tables([batch_rows.commits, batch_rows.group_records])
        changes, events, removed, counts = through_processor(tester, table)
        assert changes == want
        if fold == "job":  # the counts the driver fold makes of the whole batch, added up over the keys
            assert counts.records == batch.records and sum(counts.records.values()) > 0
            assert counts.folded_through_ms == batch.folded_through_ms is not None
        assert sorted(events, key=repr) == sorted(result.events, key=repr)
        assert removed == result.removed
        seen_events += len(events)
    assert removed == {WORKLOAD.group(3)}
    assert seen_events > WORKLOAD.groups  # generations after the first: rebalances, not only first joins


def test_a_change_travels_as_its_field_values_without_their_names() -> None:
    """Each changed group's change crosses from the executors pickled: as field values alone it is about half the
    bytes of the default pickle (a dict of field names and values), and reads back equal."""
    stage = GroupStage()
    changes = stage.changes(stage.apply(decoded_records(list(backlog(WORKLOAD, T0)))), T0 + 60_000)
    assert changes and any(change.summary is not None and change.summary.members for change in changes)
    for change in changes:
        value = pickle.dumps(change, pickle.HIGHEST_PROTOCOL)
        assert pickle.loads(value) == change
        assert b"rebalances_total" not in value and b"client_host" not in value and b"assignments" not in value
    change = next(c for c in changes if c.summary is not None and c.summary.members)
    named = pickle.dumps(_as_dicts(change), pickle.HIGHEST_PROTOCOL)
    assert len(pickle.dumps(change, pickle.HIGHEST_PROTOCOL)) * 1.6 < len(named)


def _as_dicts(change: GroupChange) -> dict[str, object]:
    """The change with every dataclass as a dict of field names and values: what the default pickle holds."""
    summary = change.summary
    return {**vars(change), "summary": None if summary is None else {
        **vars(summary), "members": tuple(vars(m) for m in summary.members)}}


def test_the_processor_travels_to_the_executors_with_oauthbearer_settings() -> None:
    """Spark pickles the processor with its settings: the --kafka.* text goes, and each Python worker builds its
    own client config (an OAUTHBEARER token provider holds a lock, which does not pickle)."""
    from pyspark import cloudpickle

    from streaming.cluster.client import client_config_from_kafka_options
    from streaming.cluster.metadata import TopicNames
    from streaming.groups.stateful.processor import cluster_facts
    from tests.unit.cluster.test_oauth import unsecured_options

    options = tuple(sorted(unsecured_options().items()))
    with pytest.raises(TypeError):
        cloudpickle.dumps(client_config_from_kafka_options(dict(options)))
    settings = FoldSettings(bootstrap_servers="127.0.0.1:9", kafka_options=options)
    travelled = pickle.loads(cloudpickle.dumps(processor(settings)))
    assert type(travelled).__name__ == "GroupFold"
    # Built in the worker from the text, not connected until asked.
    assert isinstance(cluster_facts(settings.bootstrap_servers, settings.kafka_options), TopicNames)


def test_a_restore_loads_a_large_arrow_batch_a_slice_of_groups_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Coalesced to the cores, one Arrow batch of the state can hold every group of a partition's share; the restore
    loads them :data:`GROUPS_AT_ONCE` at a time and hands over each group's whole change as the fold holds it."""
    from streaming.groups.stateful import restore
    from streaming.groups.stateful.saved import dumps, save

    stage = GroupStage()
    stage.apply(decoded_records(list(backlog(WORKLOAD, T0))))
    groups = sorted(stage.snapshots)
    state = pa.RecordBatch.from_pydict({"group": groups, "saved": [dumps(save(stage, g)) for g in groups]})
    monkeypatch.setattr(restore, "GROUPS_AT_ONCE", 7)
    out = list(restore.changes_from(FoldSettings(), T0 + 60_000)(iter([state])))
    assert [batch.num_rows for batch in out] == [7, 7, 7, 7, 2]
    handed = [pickle.loads(value) for batch in out for value in batch.column("change").to_pylist()]
    assert handed == [stage.change(group, T0 + 60_000) for group in groups]
