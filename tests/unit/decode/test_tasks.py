"""How many decode tasks a batch runs: one per source partition unless the last progress says the batch is small."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from streaming.decode.tasks import COALESCE_UP_TO_RECORDS, PIECE_RECORDS, coalesce_to, expected_records


@dataclass
class Source:  # the fields of pyspark's SourceProgress the choice reads
    endOffset: str
    latestOffset: str
    numInputRows: int


@dataclass
class Progress:
    sources: list[Source] = field(default_factory=list)


def progress(end: dict[str, int], latest: dict[str, int], rows: int) -> Progress:
    return Progress([Source(json.dumps({"__consumer_offsets": end}), json.dumps({"__consumer_offsets": latest}),
                            rows)])


def test_a_query_runs_first_batch_is_never_coalesced() -> None:
    assert coalesce_to(None, 3, 2) is None


def test_a_small_batch_after_a_caught_up_one_is_coalesced_to_the_cores() -> None:
    caught_up = progress({"0": 10, "1": 20}, {"0": 10, "1": 20}, 500)
    assert expected_records(caught_up) == (500, 2)
    assert coalesce_to(expected_records(caught_up), 2, 2) == 2


def test_records_waiting_when_the_last_batch_was_planned_count() -> None:
    behind = progress({"0": 10, "1": 20}, {"0": 10 + COALESCE_UP_TO_RECORDS, "1": 21}, 0)
    assert expected_records(behind) == (COALESCE_UP_TO_RECORDS + 1, 2)
    assert coalesce_to(expected_records(behind), 2, 2) is None


def test_a_batch_whose_partitions_were_split_is_not_coalesced() -> None:
    # More Spark partitions than the topic has: one held more than PIECE_RECORDS and was cut into pieces,
    # so the batch is large whatever the last progress said.
    small = progress({"0": 10, "1": 20}, {"0": 10, "1": 20}, PIECE_RECORDS // 10)
    assert coalesce_to(expected_records(small), 3, 2) is None


def test_a_progress_without_offsets_is_no_evidence() -> None:
    assert expected_records(Progress()) is None
    assert coalesce_to(expected_records(Progress([Source("null", "null", 0)])), 1, 2) is None
    assert coalesce_to(expected_records(Progress([Source("{}", "not json", 0)])), 1, 2) is None
