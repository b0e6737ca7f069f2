"""Record timestamps at committed offsets, read from a real broker by the lookup consumer itself."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from streaming.lag.timestamps import RecordTimestamps
from streaming.lag.tracker import RecordTime
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
