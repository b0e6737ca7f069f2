"""Kafka-shaped Arrow batches of ``__consumer_offsets`` records, as Spark's Kafka source hands them over."""

from __future__ import annotations

import pyarrow as pa

from tests.support.decoder_encoder import encode_assignment, encode_key, encode_subscription, encode_value

Row = tuple[bytes | None, bytes | None]


def commit(group: str, topic: str, partition: int, offset: int | None, ts: int = 1_700_000_000_000) -> Row:
    key = encode_key(1, {"group": group, "topic": topic, "partition": partition})
    if offset is None:
        return key, None
    return key, encode_value(1, 3, {"offset": offset, "leaderEpoch": -1, "metadata": "", "commitTimestamp": ts})


def generation(group: str, number: int, members: dict[str, dict[str, list[int]]], ts: int = 1_700_000_000_000) -> Row:
    """A classic GroupMetadata v3 record: ``members`` maps member id to its assignment."""
    encoded = [{
        "memberId": member, "groupInstanceId": None, "clientId": f"client-{member}", "clientHost": "/10.0.0.1",
        "rebalanceTimeout": 300000, "sessionTimeout": 45000,
        "subscription": encode_subscription(1, {"topics": tuple(owned), "userData": None, "ownedPartitions": ()}),
        "assignment": encode_assignment(1, {"assignedPartitions": tuple(
            {"topic": t, "partitions": tuple(p)} for t, p in owned.items()), "userData": None}),
    } for member, owned in members.items()]
    value = encode_value(2, 3, {"protocolType": "consumer", "generation": number, "protocol": "range",
                                "leader": next(iter(members), None), "currentStateTimestamp": ts,
                                "members": tuple(encoded)})
    return encode_key(2, {"group": group}), value


def kafka_batch(rows: list[Row], partition: int = 0, first_offset: int = 0, time_ms: int = 1_700_000_000_000
                ) -> pa.RecordBatch:
    n = len(rows)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([k for k, _ in rows], pa.binary()),
        "value": pa.array([v for _, v in rows], pa.binary()),
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
        "timestamp": pa.array([(time_ms + i) * 1000 for i in range(n)], pa.timestamp("us")),
    })
