"""--metrics-compat kafka_exporter: kafka_exporter's documented names and labels; none of them by default."""

from __future__ import annotations

import pytest

from streaming.driver.publish import build_publishing
from streaming.lag.tracker import LagTracker
from tests.support.publishing import (
    NOW,
    ORDERS_ASSIGNMENTS,
    ORDERS_OFFSETS,
    Clock,
    kip848_summary,
    orders_summary,
    scrape,
    whole,
)

# kafka_exporter's README, "Metrics": every family it exports about consumer groups and topic
# offsets, with its labels.
KAFKA_EXPORTER = {
    "kafka_consumergroup_current_offset": {"consumergroup", "topic", "partition"},
    "kafka_consumergroup_current_offset_sum": {"consumergroup", "topic"},
    "kafka_consumergroup_lag": {"consumergroup", "topic", "partition"},
    "kafka_consumergroup_lag_sum": {"consumergroup", "topic"},
    "kafka_consumergroup_members": {"consumergroup"},
    "kafka_topic_partition_current_offset": {"topic", "partition"},
    "kafka_topic_partition_oldest_offset": {"topic", "partition"},
    # not produced by this job: cluster topology, which kafka_exporter reads from metadata
    "kafka_brokers": set(), "kafka_broker_info": {"id", "address"}, "kafka_topic_partitions": {"topic"},
    "kafka_topic_partition_leader": {"topic", "partition"}, "kafka_topic_partition_replicas": {"topic", "partition"},
    "kafka_topic_partition_in_sync_replica": {"topic", "partition"},
    "kafka_topic_partition_leader_is_preferred": {"topic", "partition"},
    "kafka_topic_partition_under_replicated_partition": {"topic", "partition"},
    "kafka_consumergroupzookeeper_lag_zookeeper": {"consumergroup", "topic", "partition"},
}
COMPAT = ("kafka_consumergroup_current_offset", "kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag",
          "kafka_consumergroup_lag_sum", "kafka_consumergroup_members", "kafka_topic_partition_current_offset",
          "kafka_topic_partition_oldest_offset")


def publisher(compat: str, granularity: str = "partition"):
    clock = Clock(NOW)
    tracker = LagTracker(interval_s=10, clock=clock)
    pub = build_publishing("prod-eu", tracker, granularity, compat_mode=compat)
    pub.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))
    pub.apply(whole(kip848_summary(), None))
    pub.book.refresh(NOW)
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 210), ("t0", 2): (10, 40)}, NOW + 1)
    pub.book.refresh(NOW + 1)
    return pub


def by_labels(samples, name: str) -> dict[tuple, float]:
    return {tuple(sorted((k, v) for k, v in labels.items() if k != "cluster")): v for labels, v in samples[name]}


def test_no_family_shares_a_name_with_kafka_exporters_by_default() -> None:
    samples, helps, _ = scrape(publisher("none"))
    assert not set(helps) & {name.removesuffix("_total") for name in KAFKA_EXPORTER}
    assert not set(samples) & set(KAFKA_EXPORTER)


def test_compat_mode_speaks_kafka_exporters_names_labels_and_meanings() -> None:
    samples, _, _ = scrape(publisher("kafka_exporter"))
    for name in COMPAT:
        assert samples[name], name
        assert all(set(labels) == KAFKA_EXPORTER[name] | {"cluster"} for labels, _ in samples[name]), name
    g = ("consumergroup", "orders")
    assert by_labels(samples, "kafka_consumergroup_members") == {(g,): 3, (("consumergroup", "kip"),): 1}
    offsets = by_labels(samples, "kafka_consumergroup_current_offset")
    # committed t0:0 150 and t0:1 200; t0:2 assigned, never committed: -1 as kafka_exporter shows it
    assert {k: v for k, v in offsets.items() if ("topic", "t0") in k} == {
        (g, ("partition", "0"), ("topic", "t0")): 150, (g, ("partition", "1"), ("topic", "t0")): 200,
        (g, ("partition", "2"), ("topic", "t0")): -1}
    assert by_labels(samples, "kafka_consumergroup_lag") == {
        (g, ("partition", "0"), ("topic", "t0")): 50, (g, ("partition", "1"), ("topic", "t0")): 10,
        (g, ("partition", "2"), ("topic", "t0")): -1}  # t1 was never polled: no lag series for it
    assert by_labels(samples, "kafka_consumergroup_lag_sum") == {(g, ("topic", "t0")): 60, (g, ("topic", "t1")): 0}
    assert by_labels(samples, "kafka_consumergroup_current_offset_sum")[(g, ("topic", "t0"))] == 150 + 200 - 1
    assert by_labels(samples, "kafka_topic_partition_current_offset")[(("partition", "2"), ("topic", "t0"))] == 40
    assert by_labels(samples, "kafka_topic_partition_oldest_offset")[(("partition", "2"), ("topic", "t0"))] == 10
    # our own families are still there, under their own names
    assert samples["kafka_consumergroup_partition_lag"] and samples["kafka_consumergroup_current_members"]


@pytest.mark.parametrize("granularity", ["topic"])
def test_topic_granularity_keeps_kafka_exporters_sums_only(granularity: str) -> None:
    samples, _, _ = scrape(publisher("kafka_exporter", granularity))
    assert not samples["kafka_consumergroup_lag"] and not samples["kafka_consumergroup_current_offset"]
    assert samples["kafka_consumergroup_lag_sum"] and samples["kafka_consumergroup_members"]
