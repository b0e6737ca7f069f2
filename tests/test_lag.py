"""Lag math, the log-end history ring, and the log-end poller (fake admin; real broker when marked)."""

from __future__ import annotations

import math
import threading
import time
import uuid
from types import SimpleNamespace
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.lag import LogEndHistory, LogEndPoller, kafka_uuid_text, lag_seconds, offset_lag


def test_offset_lag_is_never_negative():
    assert offset_lag(100, 40) == 60
    assert offset_lag(100, 100) == 0
    assert offset_lag(100, 120) == 0  # committed ahead of a stale log-end sample


SAMPLES = [(0.0, 100), (10.0, 200), (20.0, 200), (30.0, 500)]


def test_caught_up_is_zero():
    assert lag_seconds(SAMPLES, 500) == 0.0
    assert lag_seconds(SAMPLES, 650) == 0.0


def test_interpolates_between_the_samples_around_the_committed_offset():
    assert lag_seconds(SAMPLES, 150) == pytest.approx(25.0)  # log end was at 150 at t=5
    assert lag_seconds(SAMPLES, 350) == pytest.approx(5.0)  # ... at 350 at t=25
    assert lag_seconds(SAMPLES, 100) == pytest.approx(30.0)
    # The log end sat at 200 from t=10 to t=20: the latest time it was there counts.
    assert lag_seconds(SAMPLES, 200) == pytest.approx(10.0)


def test_older_than_the_window_extrapolates_at_the_mean_rate():
    # 400 records in 30 s; offset 20 is 80 records before the oldest sample: 6 s earlier.
    assert lag_seconds(SAMPLES, 20) == pytest.approx(36.0)


def test_without_a_rate_the_oldest_sample_age_is_returned():
    assert lag_seconds([(5.0, 100)], 50) == 0.0  # a single sample is its own age
    assert lag_seconds([(0.0, 100), (10.0, 100)], 50) == pytest.approx(10.0)


def test_no_samples_means_unknown():
    assert lag_seconds([], 10) is None
    assert LogEndHistory().lag_seconds(("t", 0), 10) is None


def test_only_samples_since_the_log_end_last_dropped_count():
    # Topic re-created at t=20: the first two samples describe another log.
    samples = [(0.0, 1000), (10.0, 2000), (20.0, 10), (30.0, 110)]
    assert lag_seconds(samples, 60) == pytest.approx(5.0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(0, 10**12)), min_size=1, max_size=20),
    st.integers(-10, 10**12),
)
def test_never_negative_never_nan(raw, committed):
    samples = sorted(dict(raw).items())
    result = lag_seconds(samples, committed)
    assert result is not None and math.isfinite(result) and result >= 0.0


def test_history_ring_is_bounded_and_time_ordered():
    history = LogEndHistory(max_samples=3)
    for i in range(5):
        history.record({("t", 0): 10 * i, ("t", 1): i}, float(i))
    history.record({("t", 0): 999}, 4.0)  # same time again: ignored
    assert history.samples(("t", 0)) == [(2.0, 20), (3.0, 30), (4.0, 40)]
    assert history.latest(("t", 0)) == 40 and history.latest(("x", 0)) is None
    assert history.lag_seconds(("t", 0), 30) == pytest.approx(1.0)
    history.retain([("t", 1)])
    assert history.partitions() == [("t", 1)]


def test_kafka_uuid_text():
    assert kafka_uuid_text(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid_text(uuid.UUID("abb6053c-6b7d-437f-bb54-0e246e7e05bb")) == "q7YFPGt9Q3-7VA4kbn4Fuw"


class FakeAdmin:
    """Stands in for kafka-python's KafkaAdminClient: topic ``t`` has 2 partitions."""

    instances: ClassVar[list[FakeAdmin]] = []

    def __init__(self, **config):
        self.config = config
        self.closed = False
        self.fail_next = 0
        self.log_end = 0
        FakeAdmin.instances.append(self)

    def describe_topics(self, topics=None):
        known = {
            "t": {"error_code": 0, "name": "t", "topic_id": "abb6053c-6b7d-437f-bb54-0e246e7e05bb",
                  "partitions": [{"error_code": 0, "partition_index": 0},
                                 {"error_code": 0, "partition_index": 1}]},
        }
        wanted = known if topics is None else topics
        unknown = {"error_code": 3, "topic_id": None, "partitions": []}
        return [known.get(t, {**unknown, "name": t}) for t in wanted]

    def list_partition_offsets(self, specs):
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("broker went away")
        self.log_end += 10
        return {tp: SimpleNamespace(offset=self.log_end + tp.partition, timestamp=-1) for tp in specs}

    def close(self):
        self.closed = True


def test_poll_once_skips_unknown_partitions_and_reports_log_ends():
    got = []
    poller = LogEndPoller(
        "localhost:1",
        partitions=lambda: [("t", 0), ("t", 1), ("t", 7), ("gone", 0)],
        on_log_ends=lambda ends, at: got.append((ends, at)),
        client_config={"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
        admin_factory=FakeAdmin,
    )
    before = time.time()
    assert poller.poll_once() == {("t", 0): 10, ("t", 1): 11}
    [(ends, at)] = got
    assert ends == {("t", 0): 10, ("t", 1): 11} and at >= before
    admin = FakeAdmin.instances[-1]
    assert admin.config["bootstrap_servers"] == "localhost:1"
    assert admin.config["security_protocol"] == "SASL_SSL" and admin.config["sasl_mechanism"] == "PLAIN"
    assert poller.topic_names() == {"q7YFPGt9Q3-7VA4kbn4Fuw": "t"}
    poller.stop()
    assert admin.closed


def test_nothing_tracked_means_no_request():
    poller = LogEndPoller("localhost:1", list, lambda *_: pytest.fail("called"), admin_factory=FakeAdmin)
    count = len(FakeAdmin.instances)
    assert poller.poll_once() == {}
    assert len(FakeAdmin.instances) == count


def test_thread_survives_errors_and_stops_cleanly():
    calls = []
    admins: list[FakeAdmin] = []
    two_rounds = threading.Event()

    def callback(ends, _at):
        calls.append(ends)
        if len(calls) == 2:
            two_rounds.set()

    def factory(**config):
        admins.append(FakeAdmin(**config))
        admins[-1].fail_next = 1 if len(admins) == 1 else 0  # the first client's first request fails
        return admins[-1]

    poller = LogEndPoller("localhost:1", lambda: [("t", 0)], callback, interval_s=0.01, admin_factory=factory)
    poller.start()
    assert two_rounds.wait(10)
    poller.stop()
    assert not poller._thread.is_alive()
    assert len(admins) == 2 and all(a.closed for a in admins)  # the failed client was replaced
    assert calls[:2] == [{("t", 0): 10}, {("t", 0): 20}]


@pytest.mark.broker
def test_poller_reports_exact_log_end_from_a_real_broker(kafka_broker):
    from kafka import KafkaAdminClient, KafkaProducer

    topic = f"lag-poller-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(7):
        producer.send(topic, value=b"x", partition=i % 2)
    producer.flush()
    producer.close()

    got = []
    poller = LogEndPoller(kafka_broker.bootstrap, lambda: [(topic, 0), (topic, 1), (topic, 5)],
                          lambda ends, _at: got.append(ends))
    try:
        assert poller.poll_once() == {(topic, 0): 4, (topic, 1): 3}
        assert got == [{(topic, 0): 4, (topic, 1): 3}]
        assert topic in poller.topic_names([topic]).values()
    finally:
        poller.stop()
