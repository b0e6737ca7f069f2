"""A kill between publishing a batch and Spark committing it: the next process loads the floors the batch wrote
before it published, and no counter it shows is ever below what the killed one showed."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.cluster.metadata import TopicNames
from streaming.driver.floor_log import FloorLog
from streaming.driver.floors import CounterFloors
from streaming.driver.publish import build_publishing
from streaming.driver.sink import BatchSink
from streaming.groups.config import GroupsConfig
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from streaming.protocol import SUMMARY_COUNTERS
from tests.support.stage_records import commit, generation
from tests.unit.driver.test_sink import batch, value

REBALANCES = [name for name, _ in SUMMARY_COUNTERS].index("rebalances_total")
COUNTERS = ("kafka_consumergroup_rebalances_total", "kafka_consumergroup_partitions_moved_total",
            "kafka_consumergroup_offset_commits_total")


def process(checkpoint: Path, committed: int | None, publish_restored: bool = True) -> BatchSink:
    """What a new process builds: floors loaded from disk, then the state of the committed batch, published."""
    publisher = build_publishing("c", LagTracker())
    floor_log = FloorLog(checkpoint)
    floor_log.load(publisher.floors)
    floor_log.restored(committed)
    store = StateStore(checkpoint / "monitor" / "state")
    return BatchSink(GroupsConfig(), store.load(committed), store, publisher, EventLog(checkpoint / "events"),
                     DeadLetterLog(checkpoint / "monitor" / "dead-letters", "__consumer_offsets", 10),
                     TopicNames(dict), publish_restored=publish_restored, floor_log=floor_log)


def shown(sink: BatchSink, group: str = "g") -> dict[str, float | None]:
    return {name: value(sink, name, group=group) for name in COUNTERS}


BATCHES = [
    [generation("g", 1, {"m1": {"t": [0, 1]}}), commit("g", "t", 0, 1)],
    [generation("g", 2, {"m1": {"t": [0]}, "m2": {"t": [1]}}), commit("g", "t", 0, 5), commit("g", "t", 1, 6)],
    [generation("g", 3, {"m1": {"t": [0, 1]}}), commit("g", "t", 0, 7)],
]


@pytest.mark.parametrize("killed_at", [1, 2])
def test_a_kill_between_publish_and_commit_never_steps_a_counter_back(tmp_path: Path, killed_at: int) -> None:
    first = process(tmp_path, None)
    offset = 0
    for batch_id, rows in enumerate(BATCHES[:killed_at + 1]):
        first.handle(batch(rows, offset), batch_id)
        offset += len(rows)
    published = shown(first)
    assert published["kafka_consumergroup_rebalances_total"] == killed_at
    # Killed: Spark committed the batch before (killed_at - 1), not the one published last.
    second = process(tmp_path, killed_at - 1)
    assert StateStore(tmp_path / "monitor" / "state").load(killed_at - 1).summary("g", 0).rebalances_total == (
        killed_at - 1)
    assert shown(second) == published  # the reloaded, older state shows the floors
    # Spark runs the batch again over a range the cleaner compacted meanwhile: fewer records, held all the same.
    second.handle(batch([commit("g", "t", 0, 9)], 100), killed_at)
    for name, before in published.items():
        assert (value(second, name, group="g") or 0) >= (before or 0), name


def test_the_restored_publish_of_an_old_checkpoint_without_floors_is_written_down(tmp_path: Path) -> None:
    first = process(tmp_path, None)
    first.floor_log = None  # a version that wrote no floors
    first.handle(batch(BATCHES[0] + BATCHES[1], 0), 0)
    assert not (tmp_path / "monitor" / "floors").exists()
    second = process(tmp_path, 0)
    assert second.floor_log is not None
    assert second.floor_log.write(None, None, second.publisher.floors)  # what the query runner does after a restore
    third = process(tmp_path, None)  # the checkpoint set aside (a rebuild): nothing restored, the floors remain
    third.handle(batch([generation("g", 7, {"m1": {"t": [0, 1]}})], 0), 0)  # the rebuilt fold: a baseline
    assert third.stage.summary("g", 0).rebalances_total == 0
    assert value(third, "kafka_consumergroup_rebalances_total", group="g") == 1


def test_the_floors_are_on_disk_before_the_exporter_shows_anything_of_a_batch(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    sink = process(tmp_path, None)
    sink.handle(batch(BATCHES[0], 0), 0)
    on_disk: list[int] = []
    put = sink.publisher.exporter.put

    def checking_put(group: str, *args: object, **kwargs: object) -> None:
        floors = CounterFloors()
        FloorLog(tmp_path).load(floors)
        on_disk.append(floors.everything().shown["g"][REBALANCES])
        put(group, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sink.publisher.exporter, "put", checking_put)
    sink.handle(batch(BATCHES[1], 2), 1)
    assert on_disk and set(on_disk) == {1}  # batch 1's rebalance was written before its first series was
