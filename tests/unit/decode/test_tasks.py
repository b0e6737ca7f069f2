"""How many decode tasks a batch runs: sized from the offset ranges Spark's checkpoint says it reads."""

from __future__ import annotations

import json
from pathlib import Path

from streaming.decode.tasks import COALESCE_UP_TO_RECORDS, PIECE_RECORDS, batch_records, coalesce_to

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
    assert batch_records(tmp_path, 0) == (1730, 2)
    assert coalesce_to(batch_records(tmp_path, 0), 2) == 2


def test_a_later_batch_reads_from_the_previous_batchs_end(tmp_path: Path) -> None:
    initial(tmp_path, {"0": 0, "1": 0})
    planned(tmp_path, 6, {"0": 10, "1": 20})
    planned(tmp_path, 7, {"0": 10 + COALESCE_UP_TO_RECORDS, "1": 21})
    assert batch_records(tmp_path, 7) == (COALESCE_UP_TO_RECORDS + 1, 2)
    assert coalesce_to(batch_records(tmp_path, 7), 2) is None
    planned(tmp_path, 7, {"0": 10 + COALESCE_UP_TO_RECORDS - 1, "1": 21})
    assert coalesce_to(batch_records(tmp_path, 7), 2) == 2


def test_a_partition_new_since_the_start_is_read_from_its_beginning(tmp_path: Path) -> None:
    planned(tmp_path, 3, {"0": 10})
    planned(tmp_path, 4, {"0": 10, "1": 40})
    assert batch_records(tmp_path, 4) == (40, 2)


def test_a_batch_whose_partition_spark_cuts_into_pieces_is_not_coalesced(tmp_path: Path) -> None:
    # The source cuts a partition's range of more than PIECE_RECORDS (maxRecordsPerPartition) into pieces.
    assert COALESCE_UP_TO_RECORDS <= PIECE_RECORDS
    initial(tmp_path, {"0": 0, "1": 0})
    planned(tmp_path, 0, {"0": PIECE_RECORDS + 1, "1": 0})
    assert coalesce_to(batch_records(tmp_path, 0), 2) is None


def test_a_checkpoint_that_cannot_say_leaves_one_task_per_partition(tmp_path: Path) -> None:
    assert batch_records(tmp_path, 0) is None  # nothing written
    planned(tmp_path, 1, {"0": 10})
    assert batch_records(tmp_path, 1) is None  # the previous batch's entry is gone
    initial(tmp_path, {"0": -2})
    planned(tmp_path, 0, {"0": 10})
    assert batch_records(tmp_path, 0) is None  # an unresolved "earliest" is not a range
    (tmp_path / "offsets" / "2").write_text("v1\n{}\n")
    assert batch_records(tmp_path, 2) is None  # no source line
    (tmp_path / "offsets" / "2").write_bytes(b"v1\n{}\n{\"t\": {\"0\": \"x\"}}")
    assert batch_records(tmp_path, 2) is None
    (tmp_path / "offsets" / "2").write_bytes(b"\xff\xfe")
    assert batch_records(tmp_path, 2) is None
    assert coalesce_to(None, 2) is None
