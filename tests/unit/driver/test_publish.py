"""What the publisher shows once a group is published: names, labels, HELP, values, removal, limits,
serving, concurrency (the exporter stores and serves; the publisher renders into it)."""

from __future__ import annotations

import gzip
import threading
import time
import urllib.error
import urllib.request

import pytest

from decoders.records import Record, Struct
from streaming.driver.publish import AdviceLines, Publisher, build_publishing
from streaming.groups.fold import apply_record
from streaming.groups.summary import summarize
from streaming.lag.book import SCRAPE_BUDGET_S
from streaming.lag.tracker import LagTracker, RecordTime
from streaming.metrics.server import MetricsServer
from tests.support.publishing import (
    NOW,
    ORDERS_ASSIGNMENTS,
    ORDERS_OFFSETS,
    T0,
    Clock,
    make_exporter,
    member,
    orders_summary,
    parse,
    scrape,
    value,
    whole,
)

EXPOSED = {
    "kafka_consumergroup_generation", "kafka_consumergroup_rebalances_total",
    "kafka_consumergroup_last_rebalance_timestamp_seconds", "kafka_consumergroup_current_members",
    "kafka_consumergroup_info", "kafka_consumergroup_state", "kafka_consumergroup_assigned_partitions",
    "kafka_consumergroup_member_assigned_partitions", "kafka_consumergroup_assignment_imbalance_ratio",
    "kafka_consumergroup_partitions_moved_total", "kafka_consumergroup_committed_offset",
    "kafka_consumergroup_offset_commits_total", "kafka_consumergroup_partition_lag",
    "kafka_consumergroup_partition_lag_seconds",
    "kafka_consumergroup_topic_total_lag", "kafka_consumergroup_topic_max_lag",
    "kafka_consumergroup_topic_max_lag_seconds", "kafka_consumergroup_total_lag", "kafka_consumergroup_max_lag",
    "kafka_consumergroup_max_lag_seconds",
    "kafka_topic_partition_log_end_offset", "rebalance_monitor_records_total",
    "rebalance_monitor_decode_errors_total", "rebalance_monitor_skipped_offsets_total",
    "rebalance_monitor_query_restarts_total", "rebalance_monitor_state_rebuilds_total",
    "rebalance_monitor_batch_duration_seconds_bucket", "rebalance_monitor_batch_duration_seconds_count",
    "rebalance_monitor_batch_duration_seconds_sum", "rebalance_monitor_input_lag_records",
    "rebalance_monitor_input_lag_seconds", "rebalance_monitor_last_batch_timestamp_seconds",
    "rebalance_monitor_groups", "rebalance_monitor_series", "rebalance_monitor_series_dropped",
    "rebalance_monitor_log_end_poll_timestamp_seconds", "kafka_consumergroup_empty_transitions_total",
    "kafka_consumergroup_recreations_total", "kafka_consumergroup_generations_advanced_total",
    "kafka_consumergroup_rebalance_causes_total", "kafka_consumergroup_member_churn",
    "kafka_consumergroup_partition_lag_uncommitted", "kafka_consumergroup_member_lag",
    "kafka_consumergroup_member_lag_seconds",
    "kafka_consumergroup_rebalance_duration_seconds_bucket", "kafka_consumergroup_rebalance_duration_seconds_sum",
    "kafka_consumergroup_rebalance_duration_seconds_count",
    "kafka_consumergroup_state_since_timestamp_seconds", "kafka_consumergroup_rebalancing_since_timestamp_seconds",
    "kafka_consumergroup_rebalance_timeout_seconds", "kafka_consumergroup_retention_margin_records",
    "kafka_consumergroup_min_retention_margin_records", "kafka_consumergroup_records_lost_total",
    "kafka_consumergroup_health", "kafka_consumergroup_member_epoch_lag",
    "kafka_consumergroup_member_unreconciled_partitions", "kafka_consumergroup_activity",
    "kafka_consumergroup_topic_assigned", "rebalance_monitor_lag_poll_interval_seconds",
    "rebalance_monitor_lag_freshen_late_total",
}
@pytest.fixture
def exporter() -> Publisher:
    return make_exporter()[0]


def test_every_series_is_named_labelled_and_documented(exporter):
    samples, helps, text = scrape(exporter)
    assert set(samples) == EXPOSED
    assert all(doc.strip() for doc in helps.values())
    assert text.count("# HELP ") == len(helps) == text.count("# TYPE ")
    for name, series in samples.items():
        assert all(labels.get("cluster") == "prod-eu" for labels, _ in series), name


def test_group_series(exporter):
    samples, _, _ = scrape(exporter)
    g = {"group": "orders"}
    assert value(samples, "kafka_consumergroup_generation", **g) == 2
    assert value(samples, "kafka_consumergroup_rebalances_total", **g) == 1
    assert value(samples, "kafka_consumergroup_last_rebalance_timestamp_seconds", **g) == (T0 + 60_000) / 1000
    assert value(samples, "kafka_consumergroup_current_members", **g) == 3
    assert value(samples, "kafka_consumergroup_info", group="orders", group_type="classic",
                 protocol_type="consumer", protocol="range", leader="C0") == 1
    assert value(samples, "kafka_consumergroup_state", group="orders", state="Stable") == 1
    assert value(samples, "kafka_consumergroup_assigned_partitions", **g) == 3
    assert value(samples, "kafka_consumergroup_member_assigned_partitions", group="orders", member="i-2",
                 client_id="client-C2", client_host="/10.0.0.7") == 1
    assert value(samples, "kafka_consumergroup_assignment_imbalance_ratio", **g) == 1.0
    assert value(samples, "kafka_consumergroup_partitions_moved_total", **g) == 1
    assert value(samples, "kafka_consumergroup_offset_commits_total", **g) == 5
    k = {"group": "kip"}
    assert value(samples, "kafka_consumergroup_generation", **k) == 4
    assert value(samples, "kafka_consumergroup_state", group="kip", state="Reconciling") == 1
    assert value(samples, "kafka_consumergroup_info", group="kip", group_type="consumer",
                 protocol_type="consumer", protocol="range", leader="") == 1
    assert value(samples, "kafka_consumergroup_assigned_partitions", **k) == 1
    # m1 is at epoch 3 of target 4 and owns t0:0 of its target t0:0-1; classic members have neither series.
    m1 = {"group": "kip", "member": "", "client_id": "cli", "client_host": "/h"}
    assert value(samples, "kafka_consumergroup_member_epoch_lag", **m1) == 1
    assert value(samples, "kafka_consumergroup_member_unreconciled_partitions", **m1) == 1
    assert {lab["group"] for lab, _ in samples["kafka_consumergroup_member_epoch_lag"]} == {"kip"}
    assert {lab["group"] for lab, _ in samples["kafka_consumergroup_member_unreconciled_partitions"]} == {"kip"}
    # Never rebalanced since first seen: no timestamp series rather than a fake one.
    assert not [lab for lab, _ in samples["kafka_consumergroup_last_rebalance_timestamp_seconds"]
                if lab["group"] == "kip"]
    assert len([lab for lab, _ in samples["kafka_consumergroup_state"] if lab["group"] == "orders"]) == 1


def test_rebalance_duration_histogram(exporter):
    """One measured rebalance (orders' sync phase took 0 ms): a per-group histogram; kip had none, so no series."""
    samples, helps, text = scrape(exporter)
    name = "kafka_consumergroup_rebalance_duration_seconds"
    assert f"# TYPE {name} histogram" in text and "sync phase" in helps[name] and "KIP-848" in helps[name]
    buckets = {lab["le"]: v for lab, v in samples[f"{name}_bucket"] if lab["group"] == "orders"}
    assert buckets["0.01"] == buckets["300.0"] == buckets["+Inf"] == 1 and len(buckets) == 15
    assert value(samples, f"{name}_count", group="orders") == 1
    assert value(samples, f"{name}_sum", group="orders") == 0
    assert {lab["group"] for lab, _ in samples[f"{name}_count"]} == {"orders"}


def test_assignor_advice_published_by_the_advisor_pass(exporter):
    name = "kafka_consumergroup_assignor_imbalance_ratio"
    advice = AdviceLines(exporter.cluster, exporter.exporter)  # what the advisor pass calls back
    advice("orders", {"range": 4 / 3, "roundrobin": 1.0})
    advice("unknown-group", {"range": 2.0})  # removed or never exported: ignored
    samples, helps, _ = scrape(exporter)
    assert value(samples, name, group="orders", assignor="range") == pytest.approx(4 / 3)
    assert value(samples, name, group="orders", assignor="roundrobin") == 1.0
    assert {lab["group"] for lab, _ in samples[name]} == {"orders"} and "background" in helps[name]
    exporter.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))  # the batch's render keeps it
    assert len(scrape(exporter)[0][name]) == 2
    advice("orders", None)
    assert not scrape(exporter)[0][name]
    advice("orders", {"range": 1.5})
    exporter.remove("orders")
    assert not scrape(exporter)[0][name]


def test_offset_and_lag_series(exporter):
    samples, _, _ = scrape(exporter)
    p0 = {"group": "orders", "topic": "t0", "partition": 0}
    p1 = {"group": "orders", "topic": "t0", "partition": 1}
    assert value(samples, "kafka_consumergroup_committed_offset", **p0) == 150
    assert value(samples, "kafka_consumergroup_partition_lag", **p0) == 50
    # committed 200 ahead of a log end (190) sampled before the commit was seen: the consumer moved on
    # since that sample, so its lag is not known yet (never a false 0) ...
    assert not [lab for lab, _ in samples["kafka_consumergroup_partition_lag"] if lab["partition"] == "1"]
    assert exporter.book.overtaken > 0
    assert value(samples, "kafka_topic_partition_log_end_offset", topic="t0", partition=0) == 200
    # t1 was never polled: no lag series at all, and it is in no aggregate
    assert not [lab for lab, _ in samples["kafka_consumergroup_partition_lag"] if lab["topic"] == "t1"]
    assert value(samples, "kafka_consumergroup_topic_total_lag", group="orders", topic="t0") == 50
    assert value(samples, "kafka_consumergroup_topic_max_lag", group="orders", topic="t0") == 50
    assert value(samples, "kafka_consumergroup_total_lag", group="orders") == 50
    assert value(samples, "kafka_consumergroup_max_lag", group="orders") == 50
    assert {lab["group"] for lab, _ in samples["kafka_consumergroup_partition_lag"]} == {"orders"}
    # assigned but never committed: from the log start, in its own series and in the member's lag
    assert value(samples, "kafka_consumergroup_partition_lag_uncommitted", group="orders", topic="t0",
                 partition=2) == 30
    assert not [lab for lab, _ in samples["kafka_consumergroup_partition_lag"] if lab["partition"] == "2"]
    # ... until a sample taken after the commit was seen says where the log ends now
    exporter.book.tracker.record_offsets({("t0", 1): (0, 205)}, NOW + 1)
    exporter.book.refresh(NOW + 1)
    assert value(scrape(exporter)[0], "kafka_consumergroup_partition_lag", **p1) == 5


def test_lag_seconds_grow_between_polls_as_the_record_ages():
    """An idle group parked on a record: its age is computed at scrape time, not when last polled."""
    publisher = build_publishing("c", LagTracker(interval_s=10))
    tracker = publisher.book.tracker
    written = time.time() - 100
    publisher.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))
    publisher.book.refresh()
    tracker.record_offsets({("t0", 0): (0, 200)}, time.time())
    tracker.record_times({(("t0", 0), 150): RecordTime(int(written * 1000), 200)}, [], time.time())
    publisher.book.refresh()
    first = scrape(publisher)[0]
    time.sleep(1.2)
    later = scrape(publisher)[0]  # no poll, no refresh in between
    for name, labels in (("kafka_consumergroup_partition_lag_seconds", {"partition": 0}),
                         ("kafka_consumergroup_max_lag_seconds", {}), ("kafka_consumergroup_topic_max_lag_seconds", {}),
                         ("kafka_consumergroup_member_lag_seconds", {"client_id": "client-C0"})):
        before, after = value(first, name, group="orders", **labels), value(later, name, group="orders", **labels)
        assert before == pytest.approx(100, abs=1) and after - before == pytest.approx(1.2, abs=0.3), name


def test_member_lag_points_at_the_member_behind(exporter):
    samples, _, _ = scrape(exporter)
    lag = {(lab["client_id"], lab["member"]): v for lab, v in samples["kafka_consumergroup_member_lag"]}
    # i-2's only partition is overtaken (see test_offset_and_lag_series): no lag known for it yet
    assert lag == {("client-C0", ""): 50, ("client-C1", ""): 30}
    assert {lab["client_host"] for lab, _ in samples["kafka_consumergroup_member_lag"]} == {"/10.0.0.7"}


def test_member_labels_member_mode_names_each_member():
    clock = Clock(NOW)
    tracker = LagTracker(interval_s=10, clock=clock)
    publisher = build_publishing("prod-eu", tracker, member_mode="member")
    publisher.apply(whole(orders_summary(), ORDERS_OFFSETS, ORDERS_ASSIGNMENTS))
    publisher.book.refresh(NOW)
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 190), ("t0", 2): (10, 40)}, NOW - 1)
    publisher.book.refresh(NOW)
    samples = scrape(publisher)[0]
    assert {lab["member"]: v for lab, v in samples["kafka_consumergroup_member_lag"]} == {"C0": 50, "C1": 30}


@pytest.mark.parametrize(("mode", "bounded"), [("client", True), ("member", False)])
def test_a_rejoin_storm_mints_member_series_only_when_asked_to(mode, bounded):
    """A dynamic member leaving and rejoining under a new member id 30 times: every label set any
    scrape showed (what Prometheus keeps as series) stays at two under the default."""
    publisher = build_publishing("c", LagTracker(interval_s=10, clock=Clock(NOW)), member_mode=mode)
    snap, seen = None, set()
    for generation in range(1, 31):
        # the same client (client.id and host are its configuration) under a new member id each time
        flappy = Struct({**member(f"flappy-{generation}", {"t0": [1]}), "clientId": "client-flappy"})
        members = [member("steady", {"t0": [0]}), flappy]
        value = Struct(protocolType="consumer", generation=generation, protocol="range", leader="steady",
                       currentStateTimestamp=T0, members=tuple(members))
        snap, _ = apply_record(snap, Record(2, Struct(group="storm"), 3, value), T0 + generation)
        publisher.apply(whole(summarize(snap, T0 + generation), None, {"steady": [("t0", 0)],
                                                                    f"flappy-{generation}": [("t0", 1)]}))
        series = scrape(publisher)[0]["kafka_consumergroup_member_assigned_partitions"]
        seen |= {frozenset(lab.items()) for lab, _ in series}
    assert len(seen) == (2 if bounded else 31), sorted(seen)


def test_counters_of_the_rebalance_definition(exporter):
    samples, _, _ = scrape(exporter)
    assert value(samples, "kafka_consumergroup_rebalance_causes_total", group="orders", cause="members_joined") == 1
    assert value(samples, "kafka_consumergroup_empty_transitions_total", group="orders") == 0
    assert value(samples, "kafka_consumergroup_generations_advanced_total", group="orders") == 1


def test_topic_granularity_keeps_only_aggregates():
    exporter, _ = make_exporter("topic")
    samples, _, _ = scrape(exporter)
    for name in ("kafka_consumergroup_committed_offset", "kafka_consumergroup_partition_lag",
                 "kafka_consumergroup_partition_lag_seconds"):
        assert not samples[name], name
    assert value(samples, "kafka_consumergroup_topic_total_lag", group="orders", topic="t0") == 50
    assert value(samples, "kafka_consumergroup_max_lag", group="orders") == 50


def test_stale_log_ends_withdraw_lag_instead_of_showing_it(exporter):
    clock = exporter.book.tracker._clock
    clock.now = NOW + 3600  # the poller stopped an hour ago
    exporter.book.refresh(clock.now)
    samples, _, _ = scrape(exporter)
    assert not samples["kafka_consumergroup_partition_lag"] and not samples["kafka_consumergroup_total_lag"]
    assert value(samples, "kafka_consumergroup_committed_offset", group="orders", topic="t0", partition=0) == 150
    assert value(samples, "rebalance_monitor_log_end_poll_timestamp_seconds") == NOW - 1


def test_job_series(exporter):
    samples, _, _ = scrape(exporter)
    assert value(samples, "rebalance_monitor_records_total", record_type="OffsetCommit") == 6
    assert value(samples, "rebalance_monitor_records_total", record_type="GroupMetadata") == 2
    assert value(samples, "rebalance_monitor_records_total", record_type="ConsumerGroupMetadata") == 1
    assert value(samples, "rebalance_monitor_decode_errors_total", reason="truncated_value") == 2
    assert value(samples, "rebalance_monitor_skipped_offsets_total") == 3
    assert value(samples, "rebalance_monitor_batch_duration_seconds_count") == 2
    assert value(samples, "rebalance_monitor_batch_duration_seconds_sum") == pytest.approx(7.3)
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="0.5") == 1
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="10.0") == 2
    assert value(samples, "rebalance_monitor_batch_duration_seconds_bucket", le="+Inf") == 2
    assert value(samples, "rebalance_monitor_input_lag_records") == 40  # log end 1100 - processed 1060
    assert value(samples, "rebalance_monitor_input_lag_seconds") == pytest.approx(30, abs=1)
    assert value(samples, "rebalance_monitor_last_batch_timestamp_seconds") == 1_700_000_010.5
    assert value(samples, "rebalance_monitor_groups") == 2
    assert value(samples, "rebalance_monitor_series_dropped") == 0


def test_removed_groups_vanish(exporter):
    exporter.remove("orders")
    exporter.remove("never-seen")
    exporter.book.refresh(NOW)
    samples, _, text = scrape(exporter)
    assert "orders" not in text
    assert not samples["kafka_topic_partition_log_end_offset"]  # nobody commits to t0 any more
    assert value(samples, "kafka_consumergroup_generation", group="kip") == 4


def test_updates_replace_a_groups_series(exporter):
    updated = orders_summary()
    exporter.apply(whole(type(updated)(**{**updated.__dict__, "rebalances_total": 9}), ORDERS_OFFSETS,
                          ORDERS_ASSIGNMENTS))
    samples, _, _ = scrape(exporter)
    assert value(samples, "kafka_consumergroup_rebalances_total", group="orders") == 9
    assert value(samples, "kafka_consumergroup_partition_lag", group="orders", topic="t0", partition=0) == 50


def test_series_limit_drops_whole_groups_and_says_so():
    full, _ = make_exporter()
    group_series = int(value(scrape(full)[0], "rebalance_monitor_series"))
    limited, _ = make_exporter(max_series=group_series - 1)
    samples, _, text = scrape(limited)
    assert 'group="kip"' not in text  # kip came second: left out whole, never half a group
    assert value(samples, "kafka_consumergroup_generation", group="orders") == 2
    dropped = value(samples, "rebalance_monitor_series_dropped")
    assert dropped > 0 and value(samples, "rebalance_monitor_series") + dropped == group_series


def test_label_values_are_escaped():
    exporter, _ = make_exporter()
    summary = orders_summary()
    exporter.apply(whole(type(summary)(**{**summary.__dict__, "group": 'we"ird\\name\n'}), None))
    samples, _, _ = scrape(exporter)
    assert value(samples, "kafka_consumergroup_generation", group='we"ird\\name\n') == 2


def test_empty_exporter_still_documents_its_families():
    exporter = build_publishing("c", LagTracker())
    samples, helps, _ = scrape(exporter)
    assert "kafka_consumergroup_rebalances" in helps and "rebalance_monitor_batch_duration_seconds" in helps
    assert not samples["kafka_consumergroup_generation"]


def test_serve_on_any_port_read_only(exporter):
    server = MetricsServer(exporter.scrape, "127.0.0.1", 0)
    server.start()
    port = server.port
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
        assert 'kafka_consumergroup_rebalances_total{cluster="prod-eu",group="orders"} 1\n' in body
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            zipped = gzip.decompress(response.read()).decode()
        # the same series (lag in seconds is computed per scrape, so values may differ by the time between)
        assert parse(zipped)[0].keys() == parse(body)[0].keys()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x"), timeout=10)
        assert refused.value.code == 405
    finally:
        server.stop()


def test_concurrent_writers_and_scrapes():
    exporter, _ = make_exporter()
    summary = orders_summary()
    errors: list[BaseException] = []

    def run(fn):
        try:
            for i in range(200):
                fn(i)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writers = [
        lambda i: exporter.apply(whole(summary, ORDERS_OFFSETS)),
        lambda i: exporter.remove("orders") if i % 3 == 0 else None,
        lambda i: exporter.book.refresh(NOW + i / 100),
        lambda i: exporter.instruments.observe_batch(0.01, i, {("offsets", 0): i}, float(i)),
        lambda i: parse(exporter.exporter.render().decode()),
    ]
    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors


def test_scrapes_stop_fetching_while_the_cluster_is_unreachable():
    """A scrape whose log-end fetch found the cluster down (None) does not make the next scrapes wait out
    the quick timeout again: they render the poller's samples until one of its rounds reaches the cluster."""
    calls: list[float] = []
    answers = [None, True]

    def fetch() -> bool | None:
        calls.append(time.time())
        return answers[len(calls) - 1]

    publisher, _ = make_exporter(fetch_log_ends=fetch, max_age_s=0.05)
    publisher.book.freshen()  # the samples are from 2023: stale, so it fetches and finds the cluster down
    publisher.book.freshen()
    publisher.book.freshen()
    assert len(calls) == 1
    publisher.book.tracker.record_round(time.time(), {})  # the poller's round reached the cluster
    time.sleep(0.1)  # and its sample is older than max_age_s again
    publisher.book.freshen()
    assert len(calls) == 2


def test_a_scrape_right_after_a_poll_round_shows_that_rounds_log_ends():
    """A poll round that ended just before a scrape is fresh enough not to fetch again, but the lag text
    must be rendered from it, not from the samples the background refresh last rendered."""
    fetches: list[float] = []
    publisher, _ = make_exporter(fetch_log_ends=lambda: bool(fetches.append(time.time())) or True, max_age_s=5.0)
    tracker = publisher.book.tracker
    now = time.time()
    tracker.record_offsets({("t0", 0): (0, 200), ("t0", 1): (0, 205)}, now)  # nothing overtaken: no reason to fetch
    tracker.record_round(now, {})
    publisher.book.refresh(now)
    p0 = {"group": "orders", "topic": "t0", "partition": 0}
    assert value(parse(publisher.scrape().decode())[0], "kafka_consumergroup_partition_lag", **p0) == 50
    fetches.clear()  # that scrape fetched once: make_exporter's sample had left t0/1 overtaken
    tracker.record_offsets({("t0", 0): (0, 470)}, now + 0.01)  # the poller's next round, not rendered yet
    tracker.record_round(now + 0.01, {})
    assert value(parse(publisher.scrape().decode())[0], "kafka_consumergroup_partition_lag", **p0) == 320
    assert not fetches  # fresh enough: rendered, not fetched again


def test_scrapes_during_a_long_batch_serve_what_is_rendered_without_fetching():
    """A scrape while a catch-up batch has been folding for longer than the scrape budget does not fetch
    log ends and re-render every group (it would take the driver's interpreter from the fold); one while
    a short batch runs, or after a short batch, still does."""
    fetches: list[float] = []
    publisher, _ = make_exporter(fetch_log_ends=lambda: bool(fetches.append(time.time())) or True, max_age_s=0.05)
    with publisher.batch():
        publisher.book.freshen()  # the batch has just started: scrapes still get fresh log ends
        assert len(fetches) == 1
        time.sleep(0.1)  # the samples are older than max_age_s again
    publisher.book.freshen()  # after a short batch, at once
    assert len(fetches) == 2
    with publisher.batch():
        publisher.book._batch_started -= 10  # the same batch, 10 s later
        time.sleep(0.1)
        publisher.book.freshen()
        assert len(fetches) == 2


def test_after_a_long_batch_scrapes_fetch_again_only_once_a_refresh_has_measured_its_cost():
    """A long batch may have brought most of the groups: a scrape right after it would run a whole
    re-render beside the refresh thread's. It waits for that refresh; if the refresh was cheap, the next
    scrape fetches again, and if it was over the scrape budget, scrapes keep to the rendered lag."""
    fetches: list[float] = []
    publisher, _ = make_exporter(fetch_log_ends=lambda: bool(fetches.append(time.time())) or True, max_age_s=0.05)
    book = publisher.book
    with publisher.batch():
        book._batch_started -= 10  # a batch that has run 10 s
    time.sleep(0.1)  # the samples are older than max_age_s
    book.freshen()
    assert not fetches  # the refresh thread has not measured a pass since the batch
    book.refresh()  # the refresh thread's pass, as cheap as one group's
    book.freshen()
    assert len(fetches) == 1
    with publisher.batch():
        book._batch_started -= 10
    book.refresh()
    book._refresh_seconds = SCRAPE_BUDGET_S + 1  # as a pass over 100,000 groups measures
    time.sleep(0.1)
    book.freshen()
    assert len(fetches) == 1


def test_build_publishing_wires_readiness_the_loss_file_and_the_health_window(tmp_path):
    from streaming.groups.offsets import CommittedOffset, PartitionOffsets
    from streaming.groups.stage import GroupOffsets
    from tests.support.publishing import Clock, orders_summary, whole

    clock = Clock(1_700_000_100.0)
    tracker = LagTracker(interval_s=10, clock=clock)
    ready = [False]
    path = tmp_path / "monitor" / "lost-records.json"
    publisher = build_publishing("c", tracker, ready=lambda: ready[0], loss_file=path, health_window_s=1200.0)
    assert (publisher.book.health.window_s, publisher.book.health.max_gap_s) == (1200.0, tracker.stale_after_s)
    publisher.apply(whole(orders_summary(), GroupOffsets(PartitionOffsets({("t0", 0): CommittedOffset(10, None)}), 1)))
    publisher.book.folded_through(int((clock() + 60) * 1000))
    tracker.record_offsets({("t0", 0): (40, 100)}, clock())
    tracker.record_round(clock(), {})

    def lost() -> list[float]:
        publisher.book.refresh(clock())
        return [v for lab, v in scrape(publisher)[0]["kafka_consumergroup_records_lost_total"]
                if lab["group"] == "orders"]

    assert lost() == [0]  # the job not ready (a catch-up): nothing counted
    ready[0] = True
    assert lost() == [30]
    publisher.book.close()
    restarted = build_publishing("c", tracker, loss_file=path)
    restarted.apply(whole(orders_summary(), GroupOffsets(PartitionOffsets({("t0", 0): CommittedOffset(10, None)}), 1)))
    restarted.book.refresh(clock())
    assert [v for lab, v in scrape(restarted)[0]["kafka_consumergroup_records_lost_total"]
            if lab["group"] == "orders"] == [30]  # kept across the restart, not counted again


def test_a_scrape_outlasting_its_share_of_the_timeout_serves_the_lag_last_rendered():
    """A cluster slow to answer a scrape's fetch: the scrape ends within its timeout with the lag as last
    rendered and counts itself late; the round goes on, and a later scrape shows what it found."""
    answer = threading.Event()

    def fetch_log_ends() -> bool:
        answer.wait(10)
        publisher.book.tracker.record_offsets({("t0", 0): (0, 470)}, time.time())
        return True

    publisher, _ = make_exporter(fetch_log_ends=fetch_log_ends, max_age_s=0.05)
    p0 = {"group": "orders", "topic": "t0", "partition": 0}
    late = {"cluster": "prod-eu"}
    started = time.monotonic()
    samples = parse(publisher.scrape(0.4).decode())[0]
    assert time.monotonic() - started < 5  # not the 10 s the cluster would have taken
    assert value(samples, "kafka_consumergroup_partition_lag", **p0) == 50  # as the last refresh rendered it
    assert value(samples, "rebalance_monitor_lag_freshen_late_total", **late) == 1
    answer.set()
    samples = parse(publisher.scrape().decode())[0]
    assert value(samples, "kafka_consumergroup_partition_lag", **p0) == 320
    assert value(samples, "rebalance_monitor_lag_freshen_late_total", **late) == 1
