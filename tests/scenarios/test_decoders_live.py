"""Differential on live data: records a real broker wrote for real groups, decoded by us and by Kafka.

Kafka 4.3's own formatters are the oracle for every record the broker under test (4.x, or 3.9
with KAFKA_VERSION) wrote: offset commits, classic group metadata for every assignor and a
static member, and the KIP-848 records of a confluent-kafka group.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from decoders import Record, decode
from decoders.batch import decode_batch
from testbed.workload import Member, start_members, wait_balanced, wait_until
from tests.support.kafka_oracle import format_with_kafka
from tests.unit.decoders.test_kafka_oracle import KAFKA_4, _compare_with_kafka_4

pytestmark = pytest.mark.slow


def test_live_records_match_kafka(kafka_broker, admin, members, unique, kip848_clients_supported):
    topic = f"live-{unique}"
    admin.create_topic(topic, 4)
    for partition in range(4):
        admin.produce(topic, 5, partition=partition)
    parts = [(topic, p) for p in range(4)]
    groups = {}
    for assignor in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        group = f"live-{assignor}-{unique}"
        groups[group] = [Member(kafka_broker.bootstrap, group, [topic], f"{assignor}-{i}", assignor=assignor)
                         for i in range(2)]
    groups[f"live-static-{unique}"] = [Member(kafka_broker.bootstrap, f"live-static-{unique}", [topic], f"s{i}",
                                              instance_id=f"static-{i}") for i in range(2)]
    if kip848_clients_supported:  # see the kip848 fixture: not on Kafka 3.9
        groups[f"live-kip848-{unique}"] = [Member(kafka_broker.bootstrap, f"live-kip848-{unique}", [topic], f"k{i}",
                                                  protocol="consumer") for i in range(2)]
    for crew in groups.values():
        members.extend(crew)
        start_members(crew)
    for crew in groups.values():
        wait_balanced(crew, parts)
    for group in groups:
        wait_until(lambda g=group: admin.group_offsets(g) == dict.fromkeys(parts, 5), 60, f"{group} commits")

    records = [(r.key, r.value) for r in admin.read_all("__consumer_offsets")]
    ours = [(key, value, decode(key, value)) for key, value in records]
    mine = [(k, v, r) for k, v, r in ours if isinstance(r, Record) and r.group in groups]
    types = {r.record_type for _, _, r in mine}
    assert ({1, 2, 3, 5, 6, 7, 8} if kip848_clients_supported else {1, 2}) <= types, types
    offset_versions = {r.version for _, _, r in mine if r.record_type == 1 and r.value is not None}
    assert offset_versions == ({3} if kafka_broker.version.startswith("3.") else {4})

    for (key, value), kafka in zip(records, format_with_kafka(KAFKA_4, records), strict=True):
        _compare_with_kafka_4(key, value, kafka)

    table = decode_batch(pa.array([k for k, _ in records], pa.binary()), pa.array([v for _, v in records], pa.binary()))
    for row, (_, _, record) in zip(table.to_pylist(), ours, strict=True):
        if isinstance(record, Record):
            assert (row["record_type"], row["group"], row["error"]) == (record.record_type, record.group, None)
            if record.record_type == 1 and record.value is not None:
                assert (row["offset"], row["commit_timestamp"]) == (record.value.offset,
                                                                   record.value.commitTimestamp)
        else:
            assert row["error"] == record.reason
