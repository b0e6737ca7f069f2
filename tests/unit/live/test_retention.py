"""Records lost to retention, counted from recorded sequences of committed offsets and log starts."""

from __future__ import annotations

from streaming.driver.publish import build_publishing
from streaming.groups.stage import CommittedOffset, GroupOffsets
from streaming.lag.tracker import LagTracker
from streaming.live.retention import LostRecords
from tests.unit.metrics.test_exporter import Clock, orders_summary, scrape

TP = ("t", 0)


def test_each_deleted_record_is_counted_once_however_the_log_start_and_the_commit_move():
    lost = LostRecords()
    assert lost.observe("g", TP, 10, 10) == 0  # at the log start: nothing lost
    assert lost.observe("g", TP, 5, 10) == 5
    assert lost.observe("g", TP, 5, 10) == 0  # the same sample again
    assert lost.observe("g", TP, 5, 30) == 20  # retention went on past the stuck commit
    assert lost.observe("g", TP, 35, 30) == 0  # the group moved on
    assert lost.observe("g", TP, 0, 30) == 0  # rewound below what was counted: not again
    assert lost.observe("g", TP, 0, 40) == 10
    assert lost.observe("g", TP, -1, 50) == 0  # no commit: nothing the group could have lost
    assert lost.totals("g") == {"t": 35}
    assert lost.observe("g", ("u", 1), 0, 3) == 3 and lost.totals("g") == {"t": 35, "u": 3}
    lost.forget("g")
    assert lost.totals("g") == {}


def test_lost_records_and_margins_reach_metrics():
    clock = Clock(1_700_000_100.0)
    tracker = LagTracker(interval_s=10, clock=clock)
    publisher = build_publishing("c", tracker)
    summary = orders_summary()
    def commit(offset: int) -> None:
        publisher.publish(summary, GroupOffsets({("t0", 0): CommittedOffset(offset, None)}, 1))

    def sample(start: int, end: int) -> dict:
        tracker.record_offsets({("t0", 0): (start, end)}, clock())
        tracker.record_round(clock(), {})
        publisher.lag.refresh(clock())
        return scrape(publisher)[0]

    commit(100)
    samples = sample(40, 200)
    margins = {lab["partition"]: v for lab, v in samples["kafka_consumergroup_retention_margin_records"]
               if lab["group"] == "orders"}
    assert margins == {"0": 60}
    assert [v for lab, v in samples["kafka_consumergroup_records_lost_total"] if lab["group"] == "orders"] == [0]
    samples = sample(130, 200)
    assert [v for lab, v in samples["kafka_consumergroup_records_lost_total"]
            if lab["group"] == "orders" and lab["topic"] == "t0"] == [30]
    assert [v for lab, v in samples["kafka_consumergroup_min_retention_margin_records"]
            if lab["group"] == "orders"] == [-30]
    samples = sample(130, 200)
    assert [v for lab, v in samples["kafka_consumergroup_records_lost_total"] if lab["group"] == "orders"] == [30]
