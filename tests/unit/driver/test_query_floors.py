"""The query runner's restore and restart paths with the floors on disk: loaded once before anything is shown,
kept through a rebuild (in process or at a new start), from which the rebuilt fold's counters start again: no burst,
no reset, and the group's next rebalance shows at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.cluster.config import KafkaConfig
from streaming.cluster.metadata import TopicNames
from streaming.decode.config import SourceConfig
from streaming.driver.config import DriverConfig
from streaming.driver.floor_log import FloorLog
from streaming.driver.publish import Publisher, build_publishing
from streaming.driver.query import QueryRunner
from streaming.driver.rebuild import CheckpointCheck, RebuildLimit
from streaming.driver.sink import BatchSink
from streaming.groups.config import GroupsConfig
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.logs.dead_letters import DeadLetterLog
from streaming.logs.events import EventLog
from tests.support.exposition import parse, series
from tests.support.stage_records import generation
from tests.unit.driver.test_rebuild import NOW, committed_batch
from tests.unit.driver.test_sink import batch

REBALANCES = "kafka_consumergroup_rebalances_total"
LIMIT = RebuildLimit(3600, "delete.retention.ms of topic __consumer_offsets")


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streaming.driver.query.validate_group_patterns", lambda source, spark: None)
    monkeypatch.setattr("streaming.driver.query.excluded_groups", lambda spark, groups, source: set())
    monkeypatch.setattr(QueryRunner, "_start_query", lambda self: None)


def runner(checkpoint: Path, clock: float) -> QueryRunner:
    """A new process's query runner on ``checkpoint``, the checkpoint's age told at ``clock``."""
    publisher = build_publishing("c", LagTracker())
    event_log = EventLog(checkpoint / "events")

    def make_sink(stage: GroupStage, store: StateStore, dead_letters: DeadLetterLog, publish: bool,
                  floor_log: FloorLog) -> BatchSink:
        return BatchSink(GroupsConfig(), stage, store, publisher, event_log, dead_letters, TopicNames(dict),
                         publish_restored=publish, floor_log=floor_log)

    check = CheckpointCheck(checkpoint, lambda: LIMIT, publisher.instruments, clock=lambda: clock)
    return QueryRunner(None, DriverConfig(checkpoint_dir=checkpoint), SourceConfig(), KafkaConfig("b:9092"),
                       StageLimits(), make_sink, publisher, event_log, TopicNames(dict), checkpoint_check=check)


def run(query: QueryRunner, generations: range, first_batch: int, planned_s: float) -> None:
    """Spark's batches, each folding one generation of group ``g`` and then committed."""
    spark = query.driver.checkpoint_dir / "spark"
    spark.mkdir(parents=True, exist_ok=True)
    if not (spark / "metadata").exists():  # Spark writes it when the query starts
        (spark / "metadata").write_text(f'{{"id":"{int(planned_s)}-query"}}')
    for i, number in enumerate(generations):
        assert query.sink is not None
        query.sink.handle(batch([generation("g", number, {"m1": {"t": [0, number % 2]}}, ts=int(planned_s * 1000))],
                                number, time_ms=int(planned_s * 1000)), first_batch + i)
        committed_batch(query.driver.checkpoint_dir, first_batch + i, int(planned_s * 1000))


def shown(publisher: Publisher) -> float | None:
    found = series(parse(publisher.exporter.render().decode()), REBALANCES, group="g")
    return next(iter(found.values())) if found else None


def test_after_a_rebuild_in_process_the_counters_start_again_from_the_floors(tmp_path: Path) -> None:
    query = runner(tmp_path, NOW)
    query.start()
    run(query, range(1, 5), 0, NOW)  # generations 1-4: 3 rebalances
    assert shown(query.publisher) == 3
    query.checkpoint_check.clock = lambda: NOW + 7200  # type: ignore[union-attr]  # down past the limit
    query.restart()  # a failure, then the checkpoint found too old: set aside, the topic replayed
    assert not (tmp_path / "spark").exists() and shown(query.publisher) is None
    seen = []
    for number in range(10, 15):  # the compacted topic's replay: a baseline, then the group's own rebalances
        run(query, range(number, number + 1), number - 10, NOW + 7200)
        seen.append(shown(query.publisher))
    # The fold counts 0 (its baseline), 1, 2, 3, 4: shown from the floor on, with every rebalance of its own. Held
    # at the floor instead (no rebase), it read 3, 3, 3, 3, 4: the group's rebalances unseen until the fold passed it.
    assert seen == [3, 4, 5, 6, 7]

    again = runner(tmp_path, NOW + 7300)  # and a new process after it: the floors and the rebase come back from disk
    again.start()
    assert shown(again.publisher) == 7
    run(again, range(15, 16), 5, NOW + 7300)
    assert shown(again.publisher) == 8


def test_a_rebuild_at_a_new_start_keeps_the_floors(tmp_path: Path) -> None:
    query = runner(tmp_path, NOW)
    query.start()
    run(query, range(1, 5), 0, NOW)
    uncommitted = tmp_path / "spark" / "commits" / "3"
    uncommitted.unlink()  # killed before Spark committed batch 3, which published the third rebalance
    later = runner(tmp_path, NOW + 7200)
    later.start()  # set aside: too old
    assert not (tmp_path / "spark").exists() and shown(later.publisher) is None
    run(later, range(20, 21), 0, NOW + 7200)  # the rebuilt fold's baseline: the floor, not a reset
    assert shown(later.publisher) == 3
    run(later, range(21, 22), 1, NOW + 7200)  # its first rebalance: one more
    assert shown(later.publisher) == 4


def test_a_kill_before_a_new_checkpoints_first_commit_is_no_rebuild(tmp_path: Path) -> None:
    """Only a checkpoint set aside starts the counters again from the floors: a new checkpoint whose first batch was
    published and never committed runs a longer first batch after the restart, and shows what a clean run shows."""
    query = runner(tmp_path, NOW)
    query.start()
    assert query.sink is not None
    query.sink.handle(batch([generation("g", 1, {"m1": {"t": [0]}}), generation("g", 2, {"m1": {"t": [1]}})], 0), 0)
    assert shown(query.publisher) == 1  # killed here: nothing committed
    again = runner(tmp_path, NOW + 60)
    again.start()
    assert again.sink is not None
    again.sink.handle(batch([generation("g", n, {"m1": {"t": [n % 2]}}) for n in (1, 2, 3)], 0), 0)  # planned anew
    assert shown(again.publisher) == 2  # as a clean run's; rebased, it read 1 + (2 - 2) = 1
