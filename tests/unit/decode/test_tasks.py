"""How many decode tasks a batch runs: sized from the offset ranges Spark's checkpoint says it reads."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from streaming.decode.tasks import PIECE_RECORDS, SHARE_RECORDS, batch_ranges, coalesce_to, pieces

TOPIC = "__consumer_offsets"


def initial(checkpoint: Path, offsets: dict[str, int]) -> None:
    """The source's initial offsets as Spark's Kafka source writes them (a NUL byte first)."""
    (checkpoint / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (checkpoint / "sources" / "0" / "0").write_text("\x00v1\n" + json.dumps({TOPIC: offsets}))


def planned(checkpoint: Path, batch: int, offsets: dict[str, int]) -> None:
    """An offset-log entry: version, the batch's metadata, the source's end offsets."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1795840297284, "conf": {}}
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(metadata)}\n{json.dumps({TOPIC: offsets})}")


def test_a_checkpoints_first_batch_reads_from_the_initial_offsets(tmp_path: Path) -> None:
    initial(tmp_path, {"0": 5, "1": 0})
    planned(tmp_path, 0, {"0": 905, "1": 830})
    assert batch_ranges(tmp_path, 0) == [900, 830]
    assert coalesce_to(batch_ranges(tmp_path, 0), 2) == 2


def test_a_later_batch_reads_from_the_previous_batchs_end(tmp_path: Path) -> None:
    initial(tmp_path, {"0": 0, "1": 0})
    planned(tmp_path, 6, {"0": 10, "1": 20})
    planned(tmp_path, 7, {"0": 11 + PIECE_RECORDS, "1": 21})
    assert batch_ranges(tmp_path, 7) == [PIECE_RECORDS + 1, 1]
    assert coalesce_to(batch_ranges(tmp_path, 7), 2) is None  # two pieces and the one record: one task each
    planned(tmp_path, 7, {"0": 10 + PIECE_RECORDS - 1, "1": 21})
    assert coalesce_to(batch_ranges(tmp_path, 7), 2) == 2


def test_a_partition_new_since_the_start_is_read_from_its_beginning(tmp_path: Path) -> None:
    planned(tmp_path, 3, {"0": 10})
    planned(tmp_path, 4, {"0": 10, "1": 40})
    assert batch_ranges(tmp_path, 4) == [0, 40]


def test_the_source_cuts_a_range_into_equal_pieces_and_drops_empty_ones() -> None:
    """As Spark's KafkaOffsetRangeCalculator: ceil(range / maxRecordsPerPartition) pieces, equal but for one record."""
    assert pieces([0, 5, PIECE_RECORDS, PIECE_RECORDS + 1, 2 * PIECE_RECORDS + 2]) == [
        5, PIECE_RECORDS, PIECE_RECORDS // 2 + 1, PIECE_RECORDS // 2, 66_668, 66_667, 66_667]


def test_a_large_batch_spread_over_the_partitions_is_coalesced_as_far_as_a_share_allows() -> None:
    """Under steady load a batch over a piece in all is still read in few tasks: 150,000 records over the 50
    partitions of the offsets topic in 7 (at most 24,000 each), not 50; W2's backlog (22,000 records a
    partition) keeps one task per partition."""
    assert coalesce_to([3_000] * 50, 2) == 7
    assert coalesce_to([2_000] * 50, 2) == 2  # a piece in all: the cores
    assert coalesce_to([2_100] * 50, 2) == 5
    assert coalesce_to([22_000] * 50, 2) is None
    assert coalesce_to([3_000] * 50, 8) == 8  # never fewer tasks than cores


def test_a_hot_partition_is_read_one_piece_a_task() -> None:
    """One partition holding most of the batch (a busy coordinator): its pieces could fall into one task."""
    assert coalesce_to([350_000, 10, 10], 2) is None
    assert coalesce_to([90_000, 5_000, 4_000], 2) == 2  # a piece in all


@pytest.mark.parametrize("seed", range(40))
def test_no_task_of_sparks_coalesce_reads_more_than_a_share(seed: int) -> None:
    """Spark's coalesce of partitions with no preferred location (CoalescedRDD, DefaultPartitionCoalescer's
    throwBalls): task i takes partitions [i * P // k, (i + 1) * P // k) in the source's order. Whatever that
    order, the count chosen keeps each task within a share (within a piece for a batch of a piece at most),
    and one task fewer would not always."""
    rng = random.Random(seed)
    scale = [500, 5_000, 8_000, 300_000][seed % 4]  # a small batch, steady load, a backlog, a hot partition
    ranges = [rng.randrange(scale) if rng.random() < 0.9 else 0 for _ in range(rng.randrange(1, 60))]
    cut, cores = pieces(ranges), rng.choice([1, 2, 4])
    tasks = coalesce_to(ranges, cores)
    if tasks is None:  # one task a partition: a piece each
        assert all(size <= PIECE_RECORDS for size in cut)
        return
    bound = PIECE_RECORDS if sum(cut) <= PIECE_RECORDS else SHARE_RECORDS
    for _ in range(50):
        rng.shuffle(cut)
        chunks = [cut[i * len(cut) // tasks:(i + 1) * len(cut) // tasks] for i in range(tasks)]
        assert max((sum(chunk) for chunk in chunks), default=0) <= bound
    if tasks > cores:
        fewer = tasks - 1
        worst = sorted(cut, reverse=True)[:-(-len(cut) // fewer)]  # those in one task, in some order
        assert sum(worst) > bound


def test_a_checkpoint_that_cannot_say_leaves_one_task_per_partition(tmp_path: Path) -> None:
    assert batch_ranges(tmp_path, 0) is None  # nothing written
    planned(tmp_path, 1, {"0": 10})
    assert batch_ranges(tmp_path, 1) is None  # the previous batch's entry is gone
    initial(tmp_path, {"0": -2})
    planned(tmp_path, 0, {"0": 10})
    assert batch_ranges(tmp_path, 0) is None  # an unresolved "earliest" is not a range
    (tmp_path / "offsets" / "2").write_text("v1\n{}\n")
    assert batch_ranges(tmp_path, 2) is None  # no source line
    (tmp_path / "offsets" / "2").write_bytes(b"v1\n{}\n{\"t\": {\"0\": \"x\"}}")
    assert batch_ranges(tmp_path, 2) is None
    (tmp_path / "offsets" / "2").write_bytes(b"\xff\xfe")
    assert batch_ranges(tmp_path, 2) is None
    assert coalesce_to(None, 2) is None
