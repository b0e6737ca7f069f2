"""Record timestamps at committed offsets, read from a real broker by the lookup consumer itself."""

from __future__ import annotations

import contextlib
import time

import pytest
from kafka import KafkaProducer

from streaming.lag.timestamps import RecordTimestamps
from streaming.lag.tracker import RecordTime
from testbed.workload import wait_until
from tests.support.lag_helpers import produce, record_timestamp


@pytest.mark.broker
def test_the_first_record_at_or_after_each_committed_offset(kafka_broker, admin, unique) -> None:
    topic = f"ts-{unique}"
    admin.create_topic(topic, 2)
    now_ms = int(time.time() * 1000)
    produce(kafka_broker.bootstrap, topic, 0, [now_ms - 3_600_000, now_ms - 1_800_000, now_ms - 60_000])
    produce(kafka_broker.bootstrap, topic, 1, [now_ms - 120_000])
    lookups = RecordTimestamps({"bootstrap_servers": kafka_broker.bootstrap})
    try:
        found = lookups.lookup({(topic, 0): (1, 3), (topic, 1): (0, 1)})
        # the same partitions again, at other offsets: the one consumer seeks anew
        again = lookups.lookup({(topic, 0): (2, 3)})
    finally:
        lookups.close()
    assert found == {(topic, 0): RecordTime(record_timestamp(kafka_broker.bootstrap, topic, 0, 1), 3),
                     (topic, 1): RecordTime(now_ms - 120_000, 1)}
    assert found[(topic, 0)].timestamp_ms == now_ms - 1_800_000
    assert again == {(topic, 0): RecordTime(now_ms - 60_000, 3)}


@pytest.mark.broker
def test_only_transaction_markers_before_the_log_end_is_nothing_to_read(kafka_broker, admin, unique) -> None:
    topic = f"ts-txn-{unique}"
    admin.create_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"ts-txn-{unique}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"v", partition=0)
        producer.commit_transaction()  # the record at 0, the commit marker at 1
    finally:
        producer.close()
    lookups = RecordTimestamps({"bootstrap_servers": kafka_broker.bootstrap})
    try:
        assert lookups.lookup({(topic, 0): (1, 2)}) == {(topic, 0): RecordTime(None, 2)}
        assert lookups.lookup({}) == {}
    finally:
        lookups.close()


@pytest.mark.broker
def test_a_deleted_topic_is_not_created_again_by_lookups(kafka_broker, admin, unique) -> None:
    """The test broker creates topics on demand (auto.create.topics.enable, Kafka's default): the
    lookup consumer's metadata requests for a topic deleted under it must not bring it back."""
    topic = f"ts-gone-{unique}"
    admin.create_topic(topic, 1)
    produce(kafka_broker.bootstrap, topic, 0, [int(time.time() * 1000)])
    lookups = RecordTimestamps({"bootstrap_servers": kafka_broker.bootstrap}, max_wait_s=1.0)
    try:
        assert lookups.lookup({(topic, 0): (0, 1)}).keys() == {(topic, 0)}
        admin.client.delete_topics([topic])
        wait_until(lambda: topic not in admin.client.list_topics(), 30, f"{topic} deleted")
        for _ in range(3):
            with contextlib.suppress(Exception):  # unknown topic: what the poller counts as an error
                lookups.lookup({(topic, 0): (0, 1)})
    finally:
        lookups.close()
    time.sleep(1)  # an auto-creation is asynchronous (the controller's)
    assert topic not in admin.client.list_topics()
