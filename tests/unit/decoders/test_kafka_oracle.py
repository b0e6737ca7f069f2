"""The decoder against Apache Kafka's own code (tests/jvm/KafkaOracle.java via tests/support/kafka_oracle.py).

* Kafka's generated message classes write records at every version we read, including the ones
  no current broker writes (offset v0-v2, group v0-v2 and v4, consumer-protocol v0-v2, KIP-848,
  share and streams records with tagged fields); we decode those bytes back to what was written.
* Kafka's formatters (OffsetsMessageFormatter, GroupMetadataMessageFormatter, the generic
  coordinator-record JSON converters, DumpLogSegments' offsets decoder) print a corpus written by
  our schema-driven test encoder, plus truncated and mutated copies; our JSON must match theirs.
* Kafka 3.9's formatters print the same offset and group records the 3.9 way.

One JVM per Kafka version serves the whole module (all requests batched).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from decoders import DecodeError, Record, decode
from decoders.consumer_protocol import decode_subscription
from decoders.json_format import b64, jsonable, to_json
from decoders.schemas import KEY_LAYOUTS, STICKY_USER_DATA_LAYOUTS, SUBSCRIPTION_LAYOUTS, VALUE_LAYOUTS
from testbed.jvm import oracle_kafka_versions
from tests.support.decoder_encoder import (
    UNKNOWN_TAGS,
    encode_assignment,
    encode_key,
    encode_layout,
    encode_subscription,
    encode_value,
    random_fields,
)
from tests.support.kafka_oracle import encode_with_kafka, format_with_kafka, kafka_jar_dir, sticky_user_data_with_kafka

KAFKA_4, KAFKA_3 = (kafka_jar_dir(version) for version in oracle_kafka_versions())

# Kafka 4.3's message class names per record type (the types it still knows).
MESSAGES_4 = {
    0: "LegacyOffsetCommit", 1: "OffsetCommit", 2: "GroupMetadata", 3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment", 10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata", 13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment", 15: "ShareGroupStatePartitionMetadata",
    16: "ConsumerGroupRegularExpression", 17: "StreamsGroupMetadata", 19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata", 21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment", 23: "StreamsGroupTopology",
}
# Types whose values Kafka reads leniently (trailing bytes ignored), as we do.
LENIENT_TYPES = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 8, 16})


def _jars(path: Any) -> Any:
    if not any(path.glob("kafka-clients-*.jar")):
        pytest.skip(f"Kafka jars missing in {path} (the Makefile fetches them)")
    return path


@pytest.fixture(scope="module")
def kafka4() -> Any:
    return _jars(KAFKA_4)


@pytest.fixture(scope="module")
def kafka3() -> Any:
    return _jars(KAFKA_3)


def kafka_json(value: Any) -> Any:
    """Our representation of field values as Kafka's JSON converters read them."""
    if isinstance(value, Mapping):
        return {name: kafka_json(field) for name, field in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [kafka_json(item) for item in value]
    if isinstance(value, bytes):
        return b64(value)
    return value


def _record(result: Record | DecodeError) -> Record:
    assert isinstance(result, Record), result
    return result


def _versions(record_type: int) -> list[int]:
    """Value versions Kafka 4.3 reads for a type (type 0 became LegacyOffsetCommitValue v0 only)."""
    return [0] if record_type == 0 else sorted(VALUE_LAYOUTS[record_type])


# --- Kafka writes, we read ---------------------------------------------------------------------


def _member_struct(version: int) -> Any:
    """The classic group-metadata member struct of a value version (element of ``members``)."""
    members = VALUE_LAYOUTS[2][version][0].struct.fields[-1]
    assert members.name == "members"
    return members.type.element


def _consumer_group(rng: random.Random, version: int, subscriptions: list[bytes],
                    assignments: list[bytes]) -> dict[str, Any]:
    fields = random_fields(rng, VALUE_LAYOUTS[2][version][0].struct, False)
    fields["protocolType"] = "consumer"
    fields["members"] = tuple(
        {**random_fields(rng, _member_struct(version), False), "subscription": sub, "assignment": assign}
        for sub, assign in zip(subscriptions, assignments, strict=True))
    return fields


def test_kafka_written_records_decode_to_what_was_written(kafka4: Any) -> None:
    rng = random.Random(848)
    specs, expected = [], []
    for record_type, name in MESSAGES_4.items():
        for version in _versions(record_type):
            layout = VALUE_LAYOUTS[record_type][version][0]
            for _ in range(6):
                key = random_fields(rng, KEY_LAYOUTS[record_type].struct, False)
                value = random_fields(rng, layout.struct, layout.flexible)
                specs += [{"message": f"{name}Key", "version": 0, "prefix": record_type, "data": kafka_json(key)},
                          {"message": f"{name}Value", "version": version, "prefix": version,
                           "data": kafka_json(value)}]
                expected.append((record_type, version, key, value))
    encoded = encode_with_kafka(kafka4, specs)
    for (record_type, version, key, value), key_bytes, value_bytes in zip(
            expected, encoded[0::2], encoded[1::2], strict=True):
        result = _record(decode(key_bytes, value_bytes))
        assert (result.record_type, result.version, result.key) == (record_type, version, key)
        decoded = dict(result.value)
        if record_type == 2:  # compare the members' stored fields only
            stored = {field.name for field in _member_struct(version).fields}
            decoded["members"] = tuple({k: v for k, v in m.items() if k in stored} for m in result.value.members)
        assert decoded == value, (record_type, version)


def test_kafka_written_consumer_protocol_payloads(kafka4: Any) -> None:
    """Subscription/assignment v0-v3 from Kafka's ConsumerProtocol classes inside group values v0-v4."""
    rng = random.Random(429)
    specs, written = [], []
    for version in range(4):
        for _ in range(5):
            sub = random_fields(rng, SUBSCRIPTION_LAYOUTS[version].struct, False)
            assign = {"assignedPartitions": sub.get("ownedPartitions", ()), "userData": sub["userData"]}
            specs += [{"message": "ConsumerProtocolSubscription", "version": version, "prefix": version,
                       "data": kafka_json(sub)},
                      {"message": "ConsumerProtocolAssignment", "version": version, "prefix": version,
                       "data": kafka_json(assign)}]
            written.append((version, sub, assign))
    payloads = encode_with_kafka(kafka4, specs)
    for group_version in range(5):
        value = _consumer_group(rng, group_version, payloads[0::2], payloads[1::2])
        result = _record(decode(encode_key(2, {"group": "g"}), encode_value(2, group_version, value)))
        for member, (version, sub, assign) in zip(result.value.members, written, strict=True):
            assert member.payloadError is None
            assert dict(member.decodedSubscription) == {"version": version, **sub}
            assert dict(member.decodedAssignment) == {"version": version, **assign}


def test_sticky_user_data_read_as_the_assignor_does(kafka4: Any) -> None:
    """Our v1-then-v0 reading of ``sticky`` user data against StickyAssignor's own, on good and bad bytes."""
    rng = random.Random(341)
    samples = []
    for layout in STICKY_USER_DATA_LAYOUTS:
        for _ in range(40):
            data = encode_layout(layout, random_fields(rng, layout.struct, False))
            samples += [data, data + rng.randbytes(rng.randrange(1, 4)), data[:rng.randrange(len(data))]]
    samples += [rng.randbytes(rng.randrange(12)) for _ in range(100)]
    for data, kafka in zip(samples, sticky_user_data_with_kafka(kafka4, samples), strict=True):
        subscription = decode_subscription(encode_subscription(0, {"topics": (), "userData": data}), "sticky")
        sticky = subscription.get("stickyUserData")
        if sticky is None:  # unreadable: the assignor falls back to no previous assignment
            assert kafka == {"partitions": [], "generation": -1}, data
            continue
        flat = [{"topic": entry.topic, "partition": partition}
                for entry in sticky.previousAssignment for partition in entry.partitions]
        assert kafka == {"partitions": flat, "generation": sticky.generation}, data


# --- we write, Kafka prints, the JSON must match ------------------------------------------------


def _corpus(rng: random.Random) -> list[tuple[bytes, bytes | None]]:
    """Records of every type and version Kafka 4.3 reads, from our encoder; some carry unknown tags."""
    records: list[tuple[bytes, bytes | None]] = []
    for record_type in MESSAGES_4:
        for version in _versions(record_type):
            layout = VALUE_LAYOUTS[record_type][version][0]
            for index in range(8):
                key = encode_key(record_type, random_fields(rng, KEY_LAYOUTS[record_type].struct, False))
                value = random_fields(rng, layout.struct, layout.flexible)
                if layout.flexible and index % 2:
                    value[UNKNOWN_TAGS] = {rng.randrange(20, 200): rng.randbytes(rng.randrange(4))}
                records.append((key, encode_value(record_type, version, value)))
            records.append((key, None))
    for version in range(5):  # consumer groups with real payloads, for DumpLogSegments' decoder
        for protocol in ("range", "sticky", "cooperative-sticky"):
            subs, assigns = [], []
            for payload_version in range(6):
                sub = random_fields(rng, SUBSCRIPTION_LAYOUTS[min(payload_version, 3)].struct, False)
                subs.append(encode_subscription(payload_version, sub) + rng.randbytes(rng.randrange(3)))
                assigns.append(encode_assignment(payload_version, {
                    "assignedPartitions": sub.get("ownedPartitions", ()), "userData": None}))
            subs[-1], assigns[-2] = rng.randbytes(3), b""  # unparseable payload, empty assignment
            value = _consumer_group(rng, version, subs, assigns)
            value["protocol"] = protocol
            records.append((encode_key(2, {"group": "cg"}), encode_value(2, version, value)))
    return records


def _members_raw(data: dict[str, Any], result: Record) -> dict[str, Any]:
    """Our JSON with members' payloads as stored bytes (what the plain formatters print)."""
    members = [{**member, "subscription": b64(raw.subscription), "assignment": b64(raw.assignment)}
               for member, raw in zip(data["members"], result.value.members, strict=True)]
    return {**data, "members": members}


def _dump_as_formatter(dump: dict[str, Any]) -> dict[str, Any]:
    """DumpLogSegments prints type and version as strings; the formatters print numbers."""
    key = {"type": int(dump["key"]["type"]), "data": dump["key"]["data"]}
    payload = dump["value"]
    value = None if payload == "<DELETE>" else {"version": int(payload["version"]), "data": payload["data"]}
    return {"key": key, "value": value}


def _as_dump_prints(ours: dict[str, Any], dump: dict[str, Any], result: Record) -> dict[str, Any]:
    """Our group JSON adjusted for one DumpLogSegments quirk.

    The dump tool reads a payload at its own version, and Kafka's nested-struct readers reject
    versions above 3, so a newer payload with list entries stays base64 there; we (like the
    consumer client's ConsumerProtocol) read it with the v3 layout.
    """
    members = []
    for member, printed, raw in zip(ours["value"]["data"]["members"], dump["value"]["data"]["members"],
                                    result.value.members, strict=True):
        member = dict(member)
        for name in ("subscription", "assignment"):
            if isinstance(printed[name], str) and not isinstance(member[name], str):
                assert int.from_bytes(raw[name][:2], "big") > 3, (member, printed)
                member[name] = b64(raw[name])
        members.append(member)
    return {**ours, "value": {**ours["value"], "data": {**ours["value"]["data"], "members": members}}}


def _compare_with_kafka_4(key: bytes, value: bytes | None, kafka: dict[str, Any]) -> None:
    ours = to_json(decode(key, value))
    record_type = int.from_bytes(key[:2], "big", signed=True)
    reference = kafka["coordinator"]
    if "error" in ours or "error" in reference:
        assert "error" in ours and "error" in reference, (ours, reference)
        return
    assert ours == reference or record_type == 2, (ours, reference)
    if record_type in (0, 1):
        assert ours == kafka["offsets"]
    if record_type == 2:
        dump = _dump_as_formatter(kafka["dump"])
        if ours["value"] is None:
            assert ours == dump == kafka["group"] == reference
            return
        result = _record(decode(key, value))
        assert _as_dump_prints(ours, dump, result) == dump
        plain = {**ours, "value": {**ours["value"], "data": _members_raw(ours["value"]["data"], result)}}
        assert plain == kafka["group"] == reference


def test_json_matches_kafka_formatters(kafka4: Any) -> None:
    records = _corpus(random.Random(2024))
    for (key, value), kafka in zip(records, format_with_kafka(kafka4, records), strict=True):
        _compare_with_kafka_4(key, value, kafka)


def _stricter_than_kafka(record_type: int, ours: dict[str, Any]) -> bool:
    """The two places we reject bytes Kafka 4.3 accepts (see decoders/NOTES.md).

    Kafka reads a known tagged field without checking it against the tag's declared size, and
    ignores bytes left over after a share/streams value; we reject both inconsistencies.
    """
    detail = ours["error"]["detail"]
    return re.search(r"\btag \d+", detail) is not None or record_type not in LENIENT_TYPES


def test_truncated_and_mutated_records_agree_with_kafka(kafka4: Any) -> None:
    """Cut and byte-mutated copies: where Kafka fails we fail, and when both read, we print the same."""
    rng = random.Random(7)
    damaged = []
    for key, value in _corpus(rng):
        if value is None:
            continue
        damaged.append((key, value[:rng.randrange(2, len(value))]))
        damaged.append((key[:rng.randrange(0, len(key))], value))
        for _ in range(2):
            mutated = bytearray(value)
            mutated[rng.randrange(2, len(value))] ^= rng.randrange(1, 256)
            damaged.append((key, bytes(mutated)))
    disagreements = []
    for (key, value), kafka in zip(damaged, format_with_kafka(kafka4, damaged), strict=True):
        ours, reference = to_json(decode(key, value)), kafka["coordinator"]
        record_type = int.from_bytes(key[:2], "big", signed=True) if len(key) >= 2 else None
        if "error" in reference:  # share/streams: we also know the layouts of older releases
            agrees = "error" in ours or record_type not in LENIENT_TYPES
        elif "error" in ours:
            agrees = record_type is not None and _stricter_than_kafka(record_type, ours)
        else:
            agrees = ours == reference or record_type == 2  # classic groups: compared in detail above
        if not agrees:
            disagreements.append((key.hex(), value.hex(), ours, reference))
    assert len(damaged) > 1000
    assert not disagreements, disagreements[:3]


def test_invalid_utf8_replaced_as_java_does(kafka4: Any) -> None:
    """Group names with malformed UTF-8 (never written by Kafka) read exactly as Kafka reads them."""
    rng = random.Random(8)
    alphabet = [0x00, 0x41, 0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0,
                0xF1, 0xF4, 0xF5, 0xF8, 0xFF]
    names = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 9))) for _ in range(2000)]
    records = [(b"\x00\x01" + len(name).to_bytes(2, "big") + name + b"\x00\x01t\x00\x00\x00\x00", None)
               for name in names]
    for (key, value), kafka in zip(records, format_with_kafka(kafka4, records), strict=True):
        assert to_json(decode(key, value)) == kafka["offsets"], key


def test_types_kafka_4_3_dropped_still_decode(kafka4: Any) -> None:
    """Types 9 and 18 (removed in 4.1) are unknown to Kafka 4.3; we keep their best-known layouts."""
    rng = random.Random(9)
    records = []
    for record_type in (9, 18):
        layout = VALUE_LAYOUTS[record_type][0][0]
        records.append((encode_key(record_type, {"groupId": "g"}),
                        encode_value(record_type, 0, random_fields(rng, layout.struct, True))))
    for (key, value), kafka in zip(records, format_with_kafka(kafka4, records), strict=True):
        assert "UnknownRecordTypeException" in kafka["coordinator"]["error"]
        assert _record(decode(key, value)).group == "g"


# --- Kafka 3.9 --------------------------------------------------------------------------------


def test_kafka_3_9_formatters_and_classes(kafka3: Any) -> None:
    """3.9 wrote keys at version = record type and read type-0 keys with the full offset value."""
    rng = random.Random(39)
    specs, expected = [], []
    for record_type, key_name, value_name in ((0, "OffsetCommitKey", "OffsetCommitValue"),
                                              (1, "OffsetCommitKey", "OffsetCommitValue"),
                                              (2, "GroupMetadataKey", "GroupMetadataValue")):
        for version in range(5):
            layout = VALUE_LAYOUTS[record_type][version][0]
            key = {"group": "g"} if record_type == 2 else {"group": "g", "topic": "t", "partition": 3}
            value = random_fields(rng, layout.struct, layout.flexible)
            specs += [{"message": key_name, "version": record_type, "prefix": record_type, "data": key},
                      {"message": value_name, "version": version, "prefix": version, "data": kafka_json(value)}]
            expected.append((record_type, version, value))
    encoded = encode_with_kafka(kafka3, specs)
    records = list(zip(encoded[0::2], encoded[1::2], strict=True))
    for (record_type, version, value), (key, raw), kafka in zip(
            expected, records, format_with_kafka(kafka3, records), strict=True):
        result = _record(decode(key, raw))
        printed = kafka["group" if record_type == 2 else "offsets"]
        assert printed["key"] == {"version": record_type, "data": jsonable(result.key)}
        data = to_json(result)["value"]["data"]
        if record_type == 2:
            data = _members_raw(data, result)
            assert [m["subscription"] for m in data["members"]] == [b64(m["subscription"]) for m in value["members"]]
        assert printed["value"] == {"version": version, "data": data}
