"""Kafka's own view of lag, for tests to compare the monitor against.

``describe_group`` runs Kafka's ``kafka-consumer-groups --describe``; ``record_timestamp`` reads
the record at an offset the plain way; ``produce`` writes records with explicit CreateTime
timestamps (to make a consumer look hours behind without waiting hours).
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from testbed.broker import run_kafka_tool

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"

Row = tuple[str, str, str]


def describe_groups(bootstrap: str, groups: list[str]) -> dict[str, dict[tuple[str, int], Row]]:
    """Kafka's own ``kafka-consumer-groups --describe`` of several groups in one run:
    group -> (topic, partition) -> (current offset, log end, lag) as the tool prints them
    ("-" where it has no value)."""
    args = ["--bootstrap-server", bootstrap, "--describe"]
    for group in groups:
        args += ["--group", group]
    result = run_kafka_tool(GROUP_COMMAND, args)
    assert result.returncode == 0, result.stderr
    rows: dict[str, dict[tuple[str, int], Row]] = {group: {} for group in groups}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] in rows and fields[2].isdigit():
            rows[fields[0]][(fields[1], int(fields[2]))] = (fields[3], fields[4], fields[5])
    return rows


def describe_group(bootstrap: str, group: str) -> dict[tuple[str, int], Row]:
    return describe_groups(bootstrap, [group])[group]


def describe_members(bootstrap: str, group: str) -> dict[str, dict[str, str]]:
    """Kafka's own ``kafka-consumer-groups --describe --members --verbose``: client id -> the tool's
    columns (for KIP-848 groups CURRENT-EPOCH, TARGET-EPOCH and both assignments) as it prints them."""
    result = run_kafka_tool(GROUP_COMMAND, ["--bootstrap-server", bootstrap, "--describe", "--group", group,
                                            "--members", "--verbose"])
    assert result.returncode == 0, result.stderr
    header: list[str] = []
    rows: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["GROUP"]:
            header = fields
        elif header and len(fields) == len(header) and fields[0] == group:
            row = dict(zip(header, fields, strict=True))
            rows[row["CLIENT-ID"]] = row
    return rows


def produce(bootstrap: str, topic: str, partition: int, timestamps_ms: list[int]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        for ts in timestamps_ms:
            producer.send(topic, value=b"v", partition=partition, timestamp_ms=ts)
        producer.flush()
    finally:
        producer.close()


def record_timestamp(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """The timestamp of the record at ``offset``, read the plain way."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500).get(tp, []):
                if record.offset >= offset:
                    return record.timestamp
        raise TimeoutError(f"no record at {topic}:{partition}@{offset}")
    finally:
        consumer.close()
