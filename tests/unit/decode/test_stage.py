"""The decode stage as Spark runs it (one task's Kafka batches in, typed stage rows out), and the group stage."""

from __future__ import annotations

import pyarrow as pa
import pytest

from decoders import decode
from decoders.folding import fold_record
from streaming.decode.stage import commit_segments, latest_commits, make_decoder
from streaming.groups.offsets import CommittedOffset
from streaming.groups.stage import GroupStage
from streaming.protocol import STAGE_SCHEMA, BatchInput, OutputKind
from tests.support.stage_records import commit, generation, kafka_batch


def run_task(*batches: pa.RecordBatch, dead_letter_max: int = 100) -> pa.Table:
    return pa.Table.from_batches(list(make_decoder(dead_letter_max)(iter(batches))), schema=STAGE_SCHEMA)


def rows(table: pa.Table, kind: OutputKind) -> list[dict]:
    return [r for r in table.to_pylist() if r["kind"] == kind]


def test_commits_are_reduced_to_the_latest_per_partition_within_the_task():
    first = kafka_batch([commit("g", "t", 0, i) for i in range(5)] + [commit("g", "t", 1, 9)])
    second = kafka_batch([commit("g", "t", 0, 42), commit("h", "t", 0, None)], first_offset=6)
    out = run_task(first, second)
    commits = {(r["group"], r["topic"], r["partition"]): (r["offset"], r["count"], r["kafka_offset"])
               for r in rows(out, OutputKind.COMMIT)}
    # the latest wins, count = commits it stands for; an offset tombstone is a null offset that counts nothing
    assert commits == {("g", "t", 0): (42, 6, 6), ("g", "t", 1): (9, 1, 5), ("h", "t", 0): (None, 0, 7)}
    counts = {r["record_type"]: r["count"] for r in rows(out, OutputKind.RECORD_COUNT)}
    assert counts == {1: 8}


def test_group_records_travel_decoded_and_bad_records_are_counted_and_kept():
    """Bad records, group values included, are settled in the task: the driver only folds valid ones,
    decoded there once (their raw bytes stay behind)."""
    records = [generation("g", 1, {"m1": {"t": [0, 1]}}), commit("g", "t", 0, 3),
               (b"\x00\x63garbage", b"x"),               # unknown record type
               (b"\x00\x01\x00", b"\x00\x03"),           # offset-commit key cut short
               (generation("g", 2, {})[0], b"\x00\x03\xff"),  # a group key with a value cut short
               (generation("g", 3, {})[0], b"\x00\x09"),      # a group value version nobody wrote
               (None, b"orphan")]                        # no key at all
    out = run_task(kafka_batch(records, partition=7, first_offset=100))
    group_rows = rows(out, OutputKind.GROUP_RECORD)
    assert [(r["group"], r["record_type"], r["kafka_partition"], r["kafka_offset"]) for r in group_rows] == [
        ("g", 2, 7, 100)]
    decoded = fold_record(group_rows[0]["decoded"])
    original = decode(*records[0])
    assert (decoded.record_type, decoded.group, decoded.version) == (2, "g", original.version)
    assert decoded.value["generation"] == 1 and decoded.value["members"][0]["memberId"] == "m1"
    assert decoded.value["members"][0]["decodedAssignment"]["assignedPartitions"] == [
        {"topic": "t", "partitions": [0, 1]}]
    assert group_rows[0]["raw_value"] is None and group_rows[0]["raw_key"] is None
    errors = {r["error"]: r["count"] for r in rows(out, OutputKind.ERROR_COUNT)}
    assert errors == {"unknown_record_type": 1, "truncated_key": 1, "null_key": 1, "truncated_value": 1,
                      "unknown_value_version": 1}
    assert {r["record_type"]: r["count"] for r in rows(out, OutputKind.RECORD_COUNT)} == {1: 1, 2: 1}
    letters = rows(out, OutputKind.DEAD_LETTER)
    assert sorted((r["kafka_offset"], r["error"]) for r in letters) == [
        (102, "unknown_record_type"), (103, "truncated_key"), (104, "truncated_value"),
        (105, "unknown_value_version"), (106, "null_key")]
    assert {r["kafka_offset"]: r["raw_value"] for r in letters}[104] == b"\x00\x03\xff"
    assert {r["kafka_offset"]: r["raw_key"] for r in letters}[102] == b"\x00\x63garbage"

    batch = BatchInput.from_arrow(out)
    stage = GroupStage()
    result = stage.apply(batch)
    assert not result.errors  # nothing left for the driver to find
    assert sorted(d.kafka_offset for d in result.dead_letters) == [102, 103, 104, 105, 106]
    assert stage.snapshots["g"].classic.generation == 1
    assert stage.offsets["g"].offsets == {("t", 0): CommittedOffset(3, 1_700_000_000_000)}


def test_dead_letters_are_bounded_per_task():
    out = run_task(kafka_batch([(b"\x00\x63" + bytes([i]), b"") for i in range(50)]), dead_letter_max=10)
    assert len(rows(out, OutputKind.DEAD_LETTER)) == 10
    assert {r["error"]: r["count"] for r in rows(out, OutputKind.ERROR_COUNT)} == {"unknown_record_type": 50}


def test_latest_commits_matches_a_plain_python_reduction():
    table = pa.table({"group": ["a", "b", "a", "a", "b"], "topic": ["t"] * 5, "partition": [0, 0, 1, 0, 0],
                      "offset": [1, 2, 3, 4, None], "count": [1, 1, 1, 1, 0],
                      "kafka_partition": [3] * 5, "kafka_offset": [10, 11, 12, 13, 14]})
    reduced = {(r["group"], r["partition"]): (r["offset"], r["count"]) for r in latest_commits(table).to_pylist()}
    assert reduced == {("a", 0): (4, 2), ("a", 1): (3, 1), ("b", 0): (None, 1)}


def test_a_task_given_pieces_of_a_partition_out_of_order_reduces_as_in_log_order():
    """A coalesce may hand a task the second piece of a source partition before the first: the latest
    commit is the one at the highest offset, and the group's records still split the stretches."""
    start = 1_700_000_000_000
    records = [generation("g", 1, {"m1": {"t": [0]}, "m2": {"t": [1]}}, ts=start),
               commit("g", "t", 1, 5, ts=start + 2000), commit("g", "t", 1, 6, ts=start + 9000),
               generation("g", 2, {"m1": {"t": [0, 1]}}, ts=start + 10_000),
               commit("g", "t", 1, 9, ts=start + 70_000), commit("g", "t", 0, 4, ts=start + 71_000)]
    first, second = kafka_batch(records[:3]), kafka_batch(records[3:], first_offset=3)
    in_order, reversed_pieces = run_task(first, second), run_task(second, first)
    assert rows(reversed_pieces, OutputKind.COMMIT) == rows(in_order, OutputKind.COMMIT)
    assert [(r["partition"], r["offset"], r["count"]) for r in rows(in_order, OutputKind.COMMIT)] == [
        (1, 6, 2), (1, 9, 1), (0, 4, 1)]


def test_a_record_sees_only_the_commits_before_it_in_the_log():
    """Departures are inferred from commit times: the fold must not see a commit written after the record."""
    early, late = 1_700_000_000_000, 1_700_000_900_000
    records = [generation("g", 1, {"m1": {"t": [0]}, "m2": {"t": [1]}}),
               commit("g", "t", 0, 5, ts=early), commit("g", "t", 1, 5, ts=early),
               generation("g", 2, {"m1": {"t": [0, 1]}}),  # m2 left
               commit("g", "t", 1, 9, ts=late)]
    stage = GroupStage()
    result = stage.apply(BatchInput.from_arrow(run_task(kafka_batch(records))))
    (event,) = result.events
    assert event.members_left == ("m2",)
    assert stage.offsets["g"].offsets[("t", 1)] == CommittedOffset(9, late)


def test_a_record_sees_the_leavers_last_commit_though_the_partition_is_committed_again_later():
    """One task holds the leaver's last commit, the rebalance and the new owner's commit on the
    same partition: the reduction keeps one commit per stretch between the group's records,
    so the fold still sees the leaver commit a second before it left (a clean leave), as a
    live job seeing them in separate batches does."""
    start = 1_700_000_000_000
    records = [generation("g", 1, {"m1": {"t": [0]}, "m2": {"t": [1]}}, ts=start),
               commit("g", "t", 0, 3, ts=start + 1000),
               commit("g", "t", 1, 5, ts=start + 2000), commit("g", "t", 1, 6, ts=start + 9000),  # m2, then it closes
               generation("g", 2, {"m1": {"t": [0, 1]}}, ts=start + 10_000),
               commit("g", "t", 1, 9, ts=start + 70_000)]  # m1, the new owner, a minute later
    out = run_task(kafka_batch(records))
    assert [(r["partition"], r["offset"], r["count"]) for r in rows(out, OutputKind.COMMIT)] == [
        (0, 3, 1), (1, 6, 2), (1, 9, 1)]
    stage = GroupStage()
    (event,) = stage.apply(BatchInput.from_arrow(out)).events
    assert event.members_left == ("m2",) and event.departures == ("left_cleanly",)
    assert stage.offsets["g"].offsets[("t", 1)] == CommittedOffset(9, start + 70_000)
    assert stage.offsets["g"].commits_total == 4


def test_commit_segments_count_the_groups_records_before_each_commit():
    commits = pa.table({"group": ["a", "b", "a", "a"], "kafka_offset": [1, 2, 5, 9]})
    marks = pa.table({"group": ["a", "a", "c"], "kafka_offset": [3, 7, 4]})
    assert commit_segments(commits, marks).tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("tombstone_first", [True, False])
def test_a_group_with_neither_metadata_nor_offsets_is_forgotten(tombstone_first):
    stage = GroupStage()
    stage.apply(BatchInput.from_arrow(run_task(kafka_batch([generation("g", 1, {"m": {"t": [0]}}),
                                                           commit("g", "t", 0, 1)]))))
    deletes = [(generation("g", 1, {})[0], None), commit("g", "t", 0, None)]
    result = stage.apply(BatchInput.from_arrow(run_task(kafka_batch(deletes if tombstone_first else deletes[::-1],
                                                                    first_offset=2))))
    assert result.removed == {"g"} and "g" not in stage.groups


def test_each_offsets_topic_partition_says_how_far_it_was_read_bad_records_included() -> None:
    out = run_task(kafka_batch([commit("g", "t", 0, 1), commit("g", "t", 0, 2)], partition=3, time_ms=5_000),
                   kafka_batch([commit("h", "t", 0, 1), (b"\x00\x63garbage", b"x")], partition=8, time_ms=9_000))
    assert {r["kafka_partition"]: r["record_time_ms"] for r in rows(out, OutputKind.PARTITION_READ)} == {
        3: 5_001, 8: 9_001}


def test_a_batch_capped_behind_on_one_partition_is_folded_through_that_partition_only() -> None:
    """--max-offsets-per-trigger: one task read partition 3 up to a minute ago (capped), another partition 8
    up to now. Commits written on partition 3 in that minute are not folded: the batch is folded through
    partition 3's newest record, not the batch's newest (which decides loss certainty and the rebuild age)."""
    behind = run_task(kafka_batch([commit("g", "t", 0, 1)], partition=3, time_ms=1_000_000))
    current = run_task(kafka_batch([commit("h", "t", 0, 1), commit("h", "t", 0, 2)], partition=8,
                                   time_ms=1_060_000))
    batch = BatchInput.from_arrow(pa.concat_tables([behind, current]))
    assert batch.newest_record_ms == 1_060_001
    assert batch.folded_through_ms == 1_000_000
    alone = BatchInput.from_arrow(current)
    assert alone.folded_through_ms == alone.newest_record_ms == 1_060_001
    assert BatchInput.empty().folded_through_ms is None
