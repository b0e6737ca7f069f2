"""Bounded resources in the group stage: --max-groups, --max-members-per-group, dead letters per batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streaming.driver.publish import build_publishing
from streaming.groups.stage import GroupStage, StageLimits
from streaming.groups.store import StateStore
from streaming.lag.tracker import LagTracker
from streaming.options import parse_args
from streaming.protocol import BatchInput
from tests.support.stage_records import commit, generation, kafka_batch
from tests.unit.decode.test_stage import run_task

NOW_MS = 1_700_000_100_000


def batch(rows: list, first_offset: int = 0) -> BatchInput:
    return BatchInput.from_arrow(run_task(kafka_batch(rows, first_offset=first_offset)))


def test_new_groups_beyond_max_groups_are_not_tracked_and_are_counted():
    stage = GroupStage(StageLimits(max_groups=2))
    result = stage.apply(batch([generation(g, 1, {"m": {"t": [0]}}) for g in ("c", "a", "b")]
                               + [commit(g, "t", 0, 5) for g in ("c", "a", "b")]))
    assert stage.groups == {"a", "b"} and result.changed == {"a", "b"}  # room goes in name order
    assert stage.groups_dropped == 1 and stage.take_limit_hits() == {"max_groups": 1}
    assert stage.take_limit_hits() == {}

    stage.apply(batch([commit("a", "t", 0, 6), commit("c", "t", 0, 7)], first_offset=10))
    assert stage.groups == {"a", "b"} and stage.offsets["a"].offsets[("t", 0)].offset == 6
    assert stage.groups_dropped == 1 and stage.take_limit_hits() == {"max_groups": 1}

    stage.apply(batch([commit("a", "t", 0, 8)], first_offset=20))  # nothing turned away now
    assert stage.groups_dropped == 0 and stage.take_limit_hits() == {}

    # deleting b (Kafka's tombstones) frees its place for c from the next batch on
    stage.apply(batch([(generation("b", 1, {})[0], None), commit("b", "t", 0, None)], first_offset=30))
    assert stage.groups == {"a"}
    stage.apply(batch([commit("c", "t", 0, 9)], first_offset=40))
    assert stage.groups == {"a", "c"} and stage.groups_dropped == 0


def test_a_restart_replays_the_same_admissions(tmp_path: Path):
    limits = StageLimits(max_groups=3)
    store, stage = StateStore(tmp_path / "state"), GroupStage(limits)
    inputs = [batch([commit(f"g{i}", "t", 0, i) for i in range(b, b + 3)], first_offset=10 * b) for b in range(3)]
    commits = tmp_path / "commits"
    commits.mkdir()
    for batch_id, item in enumerate(inputs):
        stage.apply(item)
        store.write_delta(batch_id, item, ())
    assert stage.groups == {"g0", "g1", "g2"}
    restored = StateStore(tmp_path / "state").load(len(inputs) - 1, limits=limits)
    assert restored.groups == stage.groups
    assert {g: o.offsets for g, o in restored.offsets.items()} == {g: o.offsets for g, o in stage.offsets.items()}


def test_members_beyond_the_limit_leave_the_member_series_but_are_still_counted():
    stage = GroupStage(StageLimits(max_members_per_group=2))
    members = {f"m{i}": {"t": [i]} for i in (3, 1, 4, 2)}
    stage.apply(batch([generation("big", 1, members), generation("small", 1, {"m1": {"t": [0]}})]))
    summary = stage.summary("big", NOW_MS)
    assert [m.member for m in summary.members] == ["m1", "m2"] and summary.member_count == 4
    assert stage.members_dropped == {"big": 2}
    assert stage.summary("small", NOW_MS).member_count == 1
    assert stage.take_limit_hits() == {"max_members_per_group": 1}

    publisher = build_publishing("test", LagTracker(interval_s=10))
    for group in ("big", "small"):
        publisher.apply(stage.change(group, NOW_MS))
    publisher.instruments.count_limits(stage.take_limit_hits(), stage.groups_dropped,
                                       sum(stage.members_dropped.values()))
    samples = scrape(publisher.exporter)
    assert {labels["client_id"] for labels, _ in samples["kafka_consumergroup_member_assigned_partitions"]
            if labels["group"] == "big"} == {"client-m1", "client-m2"}
    assert ({"cluster": "test", "group": "big"}, 4.0) in samples["kafka_consumergroup_current_members"]
    assert samples["rebalance_monitor_members_dropped"] == [({"cluster": "test"}, 2.0)]
    assert samples["rebalance_monitor_groups_dropped"] == [({"cluster": "test"}, 0.0)]
    assert sorted(samples["rebalance_monitor_limit_hits_total"], key=lambda s: s[0]["limit"]) == [
        ({"cluster": "test", "limit": "max_groups"}, 0.0),
        ({"cluster": "test", "limit": "max_members_per_group"}, 1.0)]

    stage.apply(batch([generation("big", 2, {"m1": {"t": [0, 1]}, "m2": {"t": [2, 3]}})], first_offset=10))
    assert len(stage.summary("big", NOW_MS).members) == 2 and stage.members_dropped == {}


def test_undecodable_group_records_are_errors_not_records_and_never_reach_the_fold():
    key = generation("g", 1, {})[0]
    item = BatchInput.from_arrow(run_task(kafka_batch([(key, b"\x00\x03\xff") for _ in range(10)]
                                                      + [generation("g", 1, {"m": {"t": [0]}})]), dead_letter_max=3))
    # The decode stage checks group values too: the bad ones are errors there, their dead
    # letters bounded by the task's limit, and only the valid record is handed to the fold.
    assert item.records == {2: 1} and item.errors == {"truncated_value": 10}
    assert item.dead_letters.num_rows == 3 and item.group_records.num_rows == 1
    result = GroupStage(StageLimits(dead_letters=3)).apply(item)
    assert not result.errors and result.changed == {"g"}


def test_the_options():
    options = parse_args(["--bootstrap-server", "b:9092", "--max-groups", "10", "--max-members-per-group", "5"])
    assert StageLimits.from_config(options.groups, options.source.dead_letter_max) == StageLimits(10, 5, 1000)
    defaults = parse_args(["--bootstrap-server", "b:9092"])
    assert StageLimits.from_config(defaults.groups, defaults.source.dead_letter_max) == StageLimits(None, None, 1000)
    for flag in ("--max-groups", "--max-members-per-group"):
        with pytest.raises(SystemExit):
            parse_args(["--bootstrap-server", "b:9092", flag, "0"])


def scrape(exporter: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = exporter.render().decode()
    for name in ("rebalance_monitor_groups_dropped", "rebalance_monitor_members_dropped",
                 "rebalance_monitor_limit_hits_total"):
        assert f"# HELP {name} " in text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples
