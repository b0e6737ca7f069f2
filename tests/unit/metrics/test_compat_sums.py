"""kafka_exporter's per-topic sums (issue 31, item 6): what kafka_exporter.go does with its default
--offset.show-all, for the partitions this job knows (docs/metrics.md lists the differences)."""

from __future__ import annotations

from streaming.metrics import compat
from streaming.metrics.exposition import Lines
from tests.unit.metrics.test_compat import by_labels, publisher, scrape


def values(lines: Lines, family: compat.Family) -> dict[str, float]:
    """Label text (after the cluster) → value."""
    out = {}
    for line in lines.by_family.get(family.name, []):
        labels, value = line.rsplit(" ", 1)
        out[labels.split(",", 1)[1].rstrip("}")] = float(value)
    return out


def test_every_partition_below_the_highest_known_one_of_a_consumed_topic_shows_minus_one():
    # orders: 0 and 4 committed, 1 assigned and uncommitted, 2 and 3 neither (they exist: 4 does).
    rows = [("orders", 0, 100, 20), ("orders", 4, 50, 5), ("orders", 1, -1, -1)]
    lines = Lines("c")
    compat.lag_lines(lines, "g", rows, per_partition=True)
    offsets = values(lines, compat.CURRENT_OFFSET)
    assert offsets == {f'consumergroup="g",topic="orders",partition="{p}"': v
                       for p, v in ((0, 100), (1, -1), (2, -1), (3, -1), (4, 50))}
    lags = values(lines, compat.LAG)
    assert [lags[f'consumergroup="g",topic="orders",partition="{p}"'] for p in range(5)] == [20, -1, -1, -1, 5]
    assert values(lines, compat.CURRENT_OFFSET_SUM) == {'consumergroup="g",topic="orders"': 100 + 50 - 3}
    assert values(lines, compat.LAG_SUM) == {'consumergroup="g",topic="orders"': 25}  # the -1s are not added


def test_negative_lags_stay_in_the_sum_and_unknown_ones_stay_out():
    # 0: the log was truncated below the commit (a negative lag from a sample after it); 1: no sample yet.
    rows = [("orders", 0, 120, -20), ("orders", 1, 80, None), ("orders", 2, 10, 30)]
    lines = Lines("c")
    compat.lag_lines(lines, "g", rows, per_partition=True)
    assert values(lines, compat.LAG_SUM) == {'consumergroup="g",topic="orders"': -20 + 30}
    assert values(lines, compat.CURRENT_OFFSET_SUM) == {'consumergroup="g",topic="orders"': 210}
    assert 'consumergroup="g",topic="orders",partition="1"' not in values(lines, compat.LAG)


def test_a_topic_without_any_commit_is_left_out_and_sums_exist_at_topic_granularity():
    rows = [("assigned-only", 3, -1, -1), ("orders", 1, 7, 3)]
    lines = Lines("c")
    compat.lag_lines(lines, "g", rows, per_partition=False)
    assert compat.CURRENT_OFFSET.name not in lines.by_family and compat.LAG.name not in lines.by_family
    assert values(lines, compat.CURRENT_OFFSET_SUM) == {'consumergroup="g",topic="orders"': 7 - 1}  # partition 0
    assert values(lines, compat.LAG_SUM) == {'consumergroup="g",topic="orders"': 3}


def test_through_the_publisher_topic_t1_gets_no_invented_partitions():
    """orders commits t1:0 only: nothing below it is missing, and nothing past it is known."""
    samples, _, _ = scrape(publisher("kafka_exporter"))
    g = ("consumergroup", "orders")
    assert [k for k in by_labels(samples, "kafka_consumergroup_current_offset") if ("topic", "t1") in k] == [
        (g, ("partition", "0"), ("topic", "t1"))]
