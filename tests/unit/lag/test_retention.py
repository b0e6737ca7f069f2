"""Records lost to retention, counted from recorded sequences of committed offsets and log starts."""

from __future__ import annotations

from streaming.driver.publish import build_publishing
from streaming.groups.offsets import CommittedOffset, PartitionOffsets
from streaming.groups.stage import GroupOffsets
from streaming.lag.retention import LostRecords
from streaming.lag.tracker import LagTracker, RecordTime, TopicConfig
from tests.support.publishing import Clock, orders_summary, scrape, whole

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


def test_a_new_incarnation_counts_afresh_and_state_round_trips():
    lost = LostRecords()
    assert lost.observe("g", TP, 100, 5000, 6000) == 4900
    assert lost.sample("g", TP, 0, 800, 1000) == 800  # log end below the last seen: re-created
    assert lost.observe("g", TP, 0, 800, 1000) == 800
    assert lost.sample("g", TP, 0, 800, 1000) == 0
    restored = LostRecords()
    restored.restore(lost.state())
    assert restored.totals("g") == {"t": 5700} and restored.sample("g", TP, 0, 800, 1200) == 0


def test_lost_records_and_margins_reach_metrics():
    clock = Clock(1_700_000_100.0)
    tracker = LagTracker(interval_s=10, clock=clock)
    publisher = build_publishing("c", tracker)
    summary = orders_summary()
    def commit(offset: int) -> None:
        publisher.apply(whole(summary, GroupOffsets(PartitionOffsets({("t0", 0): CommittedOffset(offset, None)}), 1)))

    def sample(start: int, end: int) -> dict:
        tracker.record_offsets({("t0", 0): (start, end)}, clock())
        tracker.record_round(clock(), {})
        publisher.book.refresh(clock())
        return scrape(publisher)[0]

    commit(100)
    publisher.book.folded_through(int((clock() + 60) * 1000))  # the job folded every commit until after the samples
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


def test_the_retention_deadline_is_the_oldest_unread_record_plus_its_topics_retention():
    clock = Clock(1_700_000_100.0)
    tracker = LagTracker(interval_s=10, clock=clock)
    publisher = build_publishing("c", tracker)
    publisher.apply(whole(orders_summary(), GroupOffsets(PartitionOffsets({("t0", 0): CommittedOffset(100, None),
                                                       ("t0", 1): CommittedOffset(50, None),
                                                       ("t1", 0): CommittedOffset(9, None)}), 3)))
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 50), ("t1", 0): (0, 10)}, clock())
    # t0:0's next record was written 600 s ago; t0:1 is caught up (nothing unread); t1 keeps its records forever.
    tracker.record_times({(("t0", 0), 100): RecordTime(int((clock() - 600) * 1000), 200),
                          (("t1", 0), 9): RecordTime(int((clock() - 9000) * 1000), 10)}, (), clock())
    tracker.record_round(clock(), {})

    def deadline(configs: dict[str, TopicConfig]) -> list[float]:
        tracker.record_topic_configs(configs, clock())
        publisher.book.refresh(clock())
        return [v for lab, v in scrape(publisher)[0].get("kafka_consumergroup_retention_deadline_timestamp_seconds", ())
                if lab["group"] == "orders"]

    assert deadline({}) == []  # retention not read yet: no deadline rather than a guessed one
    assert deadline({"t0": TopicConfig("CreateTime", 3_600_000), "t1": TopicConfig("CreateTime", -1)}) == [
        clock() - 600 + 3600]
    assert deadline({"t1": TopicConfig("CreateTime", 7_200_000)}) == [clock() - 9000 + 7200]  # already past


def test_a_compact_only_topic_has_no_retention_deadline() -> None:
    clock = Clock(1_700_000_100.0)
    tracker = LagTracker(interval_s=10, clock=clock)
    tracker.set_wanted([("t0", 0, 100), ("t1", 0, 5), ("t2", 0, 5)])
    tracker.record_topic_configs({"t0": TopicConfig("CreateTime", 3_600_000, "compact"),
                                  "t1": TopicConfig("CreateTime", 3_600_000, "compact,delete"),
                                  "t2": TopicConfig("CreateTime", 3_600_000, "delete")}, clock())
    # compact alone: retention.ms (its broker default is still described) deletes nothing there
    assert tracker.retention_seconds() == {"t1": 3600.0, "t2": 3600.0}
    assert TopicConfig().deletes_by_time  # not read yet: as the policy's default, delete
