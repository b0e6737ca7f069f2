"""The decoder against the worked byte examples of docs/consumer-offsets-format.md (section 8),
its partition table (section 14), and the error and payload rules around them."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from decoders import DecodeError, Record, Struct, coordinator_partition, decode
from decoders.__main__ import format_line
from decoders.json_format import to_json
from decoders.partition import java_string_hash
from tests.support.kafka_oracle import REPO


def h(text: str) -> bytes:
    """Hex as the doc writes it (spaces, newlines and a leading ``0000``-style column allowed)."""
    lines = [line.split("  ", 1)[1] if line[:4].isalnum() and line[4:6] == "  " else line
             for line in text.strip().splitlines()]
    return bytes.fromhex("".join(lines).replace(" ", ""))


TS = 1700000000000
TOPIC_ID = "ABEiM0RVZneImaq7zN3u_w"  # 00112233-4455-6677-8899-aabbccddeeff
OFFSET_KEY = h("00 01 00 01 67 00 01 74 00 00 00 00")
SUB_V3 = h("00 03 00 00 00 01 00 01 74 ff ff ff ff 00 00 00 00 ff ff ff ff ff ff")
ASSIGN_V3 = h("00 03 00 00 00 01 00 01 74 00 00 00 01 00 00 00 00 ff ff ff ff")
STICKY_V1 = h("00 00 00 01 00 01 74 00 00 00 02 00 00 00 00 00 00 00 01 00 00 00 03")
GROUP_V3 = h("""
0000  00 03 00 08 63 6f 6e 73 75 6d 65 72 00 00 00 01
0010  00 05 72 61 6e 67 65 00 03 6d 2d 31 00 00 01 8b
0020  cf e5 68 00 00 00 00 01 00 03 6d 2d 31 ff ff 00
0030  01 63 00 09 2f 31 30 2e 30 2e 30 2e 31 00 04 93
0040  e0 00 00 af c8 00 00 00 17 00 03 00 00 00 01 00
0050  01 74 ff ff ff ff 00 00 00 00 ff ff ff ff ff ff
0060  00 00 00 15 00 03 00 00 00 01 00 01 74 00 00 00
0070  01 00 00 00 00 ff ff ff ff
""")
GROUP_V4 = (h("""
0000  00 04 09 63 6f 6e 73 75 6d 65 72 00 00 00 01 06
0010  72 61 6e 67 65 04 6d 2d 31 00 00 01 8b cf e5 68
0020  00 02 04 6d 2d 31 00 02 63 0a 2f 31 30 2e 30 2e
0030  30 2e 31 00 04 93 e0 00 00 af c8 18""") + SUB_V3 + b"\x16" + ASSIGN_V3 + b"\x00\x00")


def record(key: bytes, value: bytes | None) -> Record:
    result = decode(key, value)
    assert isinstance(result, Record), result
    return result


# --- section 8.1-8.2: offset commits ----------------------------------------------------------


def test_offset_commit_keys_both_types() -> None:
    for key, record_type in ((OFFSET_KEY, 1), (h("00 00 00 01 67 00 01 74 00 00 00 00"), 0)):
        result = record(key, None)
        assert result.record_type == record_type
        assert result.key == {"group": "g", "topic": "t", "partition": 0}
        assert result.is_tombstone and result.version is None and result.group == "g"


@pytest.mark.parametrize(("hex_value", "version", "expected"), [
    ("00 03 00 00 00 00 00 00 00 2a 00 00 00 07 00 00 00 00 01 8b cf e5 68 00", 3,
     {"offset": 42, "leaderEpoch": 7, "metadata": "", "commitTimestamp": TS}),
    ("00 01 00 00 00 00 00 00 00 2a 00 01 6d 00 00 01 8b cf e5 68 00 00 00 01 8b d5 0b c4 00", 1,
     {"offset": 42, "metadata": "m", "commitTimestamp": TS, "expireTimestamp": 1700086400000}),
    ("00 00 00 00 00 00 00 00 00 2a 00 01 6d 00 00 01 8b cf e5 68 00", 0,
     {"offset": 42, "metadata": "m", "commitTimestamp": TS}),
    ("00 02 00 00 00 00 00 00 00 2a 00 01 6d 00 00 01 8b cf e5 68 00", 2,
     {"offset": 42, "metadata": "m", "commitTimestamp": TS}),
    ("00 04 00 00 00 00 00 00 00 2a 00 00 00 07 01 00 00 01 8b cf e5 68 00 00", 4,
     {"offset": 42, "leaderEpoch": 7, "metadata": "", "commitTimestamp": TS}),
    ("00 04 00 00 00 00 00 00 00 2a 00 00 00 07 01 00 00 01 8b cf e5 68 00 01 00 10"
     " 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff", 4,
     {"offset": 42, "leaderEpoch": 7, "metadata": "", "commitTimestamp": TS, "topicId": TOPIC_ID}),
    ("00 04 00 00 00 00 00 21 d4 a8 ff ff ff ff 01 00 00 01 99 64 f2 d8 36 00", 4,  # real 4.1.0 record
     {"offset": 2217128, "leaderEpoch": -1, "metadata": "", "commitTimestamp": 1758335260726}),
])
def test_offset_commit_values(hex_value: str, version: int, expected: dict) -> None:
    result = record(OFFSET_KEY, h(hex_value))
    assert result.version == version
    assert dict(result.value) == expected  # fields absent in a version are absent here


# --- section 8.3-8.5: classic group metadata and consumer-protocol payloads -------------------


def test_group_metadata_v3_example() -> None:
    assert len(GROUP_V3) == 121
    result = record(h("00 02 00 01 67"), GROUP_V3)
    value = result.value
    assert (result.record_type, result.group, result.version) == (2, "g", 3)
    assert (value.protocolType, value.generation, value.protocol, value.leader) == ("consumer", 1, "range", "m-1")
    assert value.currentStateTimestamp == TS
    (member,) = value.members
    assert member.memberId == "m-1" and member.groupInstanceId is None
    assert (member.clientId, member.clientHost) == ("c", "/10.0.0.1")
    assert (member.rebalanceTimeout, member.sessionTimeout) == (300000, 45000)
    assert (member.subscription, member.assignment) == (SUB_V3, ASSIGN_V3)  # raw bytes kept
    assert member.decodedSubscription == {"version": 3, "topics": ("t",), "userData": None,
                                          "ownedPartitions": (), "generationId": -1, "rackId": None}
    assert member.decodedAssignment == {"version": 3, "assignedPartitions": ({"topic": "t", "partitions": (0,)},),
                                        "userData": None}
    assert member.payloadError is None


def test_group_metadata_v4_is_the_same_group() -> None:
    assert len(GROUP_V4) == 107
    v3, v4 = record(h("00 02 00 01 67"), GROUP_V3), record(h("00 02 00 01 67"), GROUP_V4)
    assert v4.version == 4 and v4.value == v3.value


def test_empty_groups() -> None:
    v3 = record(h("00 02 00 01 67"), h("00 03 00 00 00 00 00 00 ff ff ff ff 00 00 01 8b cf e5 68 00 00 00 00 00"))
    v4 = record(h("00 02 00 01 67"), h("00 04 01 00 00 00 00 00 00 00 00 01 8b cf e5 68 00 01 00"))
    for result in (v3, v4):
        assert dict(result.value) == {"protocolType": "", "generation": 0, "protocol": None, "leader": None,
                                      "currentStateTimestamp": TS, "members": ()}


def _group_with_member(subscription: bytes, assignment: bytes, protocol: str = "range",
                       protocol_type: str = "consumer") -> Record:
    """A v3 group value around one member, as a classic coordinator writes it."""
    def string(text: str) -> bytes:
        return len(text).to_bytes(2, "big") + text.encode()

    member = (string("m-1") + b"\xff\xff" + string("c") + string("/h") + (300000).to_bytes(4, "big")
              + (45000).to_bytes(4, "big") + len(subscription).to_bytes(4, "big") + subscription
              + len(assignment).to_bytes(4, "big") + assignment)
    value = (b"\x00\x03" + string(protocol_type) + (1).to_bytes(4, "big") + string(protocol) + string("m-1")
             + TS.to_bytes(8, "big") + (1).to_bytes(4, "big") + member)
    return record(h("00 02 00 01 67"), value)


def test_subscription_v0_and_zero_length_assignment() -> None:
    (member,) = _group_with_member(h("00 00 00 00 00 01 00 01 74 ff ff ff ff"), b"").value.members
    assert member.decodedSubscription == {"version": 0, "topics": ("t",), "userData": None}
    assert member.decodedAssignment is None and member.payloadError is None


def test_sticky_user_data_v1_then_v0() -> None:
    owned = h("00 00 00 01 00 01 74 00 00 00 02 00 00 00 00 00 00 00 01")
    sub_v1 = h("00 01 00 00 00 01 00 01 74 00 00 00 17") + STICKY_V1 + owned
    assert len(sub_v1) == 55
    (member,) = _group_with_member(sub_v1, ASSIGN_V3, protocol="sticky").value.members
    previous = ({"topic": "t", "partitions": (0, 1)},)
    assert member.decodedSubscription.ownedPartitions == previous
    assert member.decodedSubscription.stickyUserData == {"previousAssignment": previous, "generation": 3}
    sticky_v0 = STICKY_V1[:-4]
    sub_v0 = h("00 00 00 00 00 01 00 01 74 00 00 00 13") + sticky_v0
    (member,) = _group_with_member(sub_v0, b"", protocol="sticky").value.members
    assert member.decodedSubscription.stickyUserData == {"previousAssignment": previous, "generation": None}


def test_cooperative_sticky_generation() -> None:
    sub = h("00 01 00 00 00 01 00 01 74 00 00 00 04 00 00 00 03 00 00 00 00")
    (member,) = _group_with_member(sub, b"", protocol="cooperative-sticky").value.members
    assert member.decodedSubscription.cooperativeStickyGeneration == 3
    assert "stickyUserData" not in member.decodedSubscription


def test_future_payload_versions_parse_as_v3_and_ignore_trailing_bytes() -> None:
    sub = b"\x00\x07" + SUB_V3[2:] + b"future fields"
    assign = b"\x00\x05" + ASSIGN_V3[2:] + b"\x01\x02"
    (member,) = _group_with_member(sub, assign).value.members
    assert member.decodedSubscription.version == 7 and member.decodedSubscription.rackId is None
    assert member.decodedAssignment.version == 5
    assert member.decodedAssignment.assignedPartitions == ({"topic": "t", "partitions": (0,)},)


def test_unparseable_payload_keeps_bytes_and_notes_error() -> None:
    result = _group_with_member(b"\x00\x03\x00\x00\x00\x05", b"\xff\xfe")
    (member,) = result.value.members
    assert member.subscription == b"\x00\x03\x00\x00\x00\x05" and member.assignment == b"\xff\xfe"
    assert member.decodedSubscription is None and member.decodedAssignment is None
    assert "subscription: truncated" in member.payloadError
    assert "assignment: malformed: negative version" in member.payloadError
    printed = to_json(result)["value"]["data"]["members"][0]
    assert printed["subscription"] == "AAMAAAAF" and printed["assignment"] == "//4="


def test_other_protocol_types_keep_bytes_undecoded() -> None:
    (member,) = _group_with_member(SUB_V3, ASSIGN_V3, protocol="default", protocol_type="connect").value.members
    assert member.decodedSubscription is None and member.decodedAssignment is None
    assert member.payloadError is None and member.subscription == SUB_V3


# --- section 8.6-8.7: KIP-848 records and tombstones ------------------------------------------


def test_consumer_group_metadata() -> None:
    assert record(h("00 03 00 01 67"), h("00 00 00 00 00 05 00")).value == {"epoch": 5}
    with_hash = record(h("00 03 00 01 67"), h("00 00 00 00 00 05 01 00 08 01 23 45 67 89 ab cd ef"))
    assert with_hash.value == {"epoch": 5, "metadataHash": 0x0123456789ABCDEF}
    assert with_hash.key == {"groupId": "g"} and with_hash.group == "g"


def test_current_and_target_assignment() -> None:
    entry = h("00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff 03 00 00 00 00 00 00 00 01 00")
    current = h("00 00 00 00 00 05 00 00 00 04 00 02") + entry + h("01 00")
    assert len(current) == 40
    result = record(h("00 08 00 01 67 00 01 6d"), current)
    assert result.key == {"groupId": "g", "memberId": "m"}
    assert dict(result.value) == {
        "memberEpoch": 5, "previousMemberEpoch": 4, "state": 0,
        "assignedPartitions": ({"topicId": TOPIC_ID, "partitions": (0, 1)},), "partitionsPendingRevocation": (),
    }
    target = h("00 00 02") + entry + h("00")
    assert len(target) == 30
    assert record(h("00 07 00 01 67 00 01 6d"), target).value == {
        "topicPartitions": ({"topicId": TOPIC_ID, "partitions": (0, 1)},)}


def test_member_metadata_consumer_and_classic() -> None:
    key = h("00 05 00 01 67 00 01 6d")
    consumer = h("00 00 00 07 72 61 63 6b 2d 61 02 63 03 2f 68 02 02 74 00 00 04 93 e0"
                 " 08 75 6e 69 66 6f 72 6d 00")
    assert len(consumer) == 32
    assert dict(record(key, consumer).value) == {
        "instanceId": None, "rackId": "rack-a", "clientId": "c", "clientHost": "/h",
        "subscribedTopicNames": ("t",), "subscribedTopicRegex": None, "rebalanceTimeoutMs": 300000,
        "serverAssignor": "uniform",
    }
    classic = h("00 00 00 00 02 63 03 2f 68 02 02 74 00 00 04 93 e0 00 01 00 1c 01 00 00 af c8 02"
                " 06 72 61 6e 67 65 0e 00 00 00 00 00 01 00 01 74 ff ff ff ff 00 00")
    assert len(classic) == 49
    value = record(key, classic).value
    assert value.serverAssignor is None
    assert value.classicMemberMetadata == {
        "sessionTimeoutMs": 45000,
        "supportedProtocols": ({"name": "range", "metadata": h("00 00 00 00 00 01 00 01 74 ff ff ff ff")},),
    }


def test_regular_expression_record() -> None:
    result = record(h("00 10 00 01 67 00 03 74 2e 2a"),
                    h("00 00 03 03 74 31 03 74 32 00 00 00 00 00 00 00 64 00 00 01 8b cf e5 68 00 00"))
    assert result.key == {"groupId": "g", "regularExpression": "t.*"}
    assert result.value == {"topics": ("t1", "t2"), "version": 100, "timestamp": TS}


def test_tombstone() -> None:
    result = record(OFFSET_KEY, None)
    assert result.value is None and result.type_name == "OffsetCommit"
    assert to_json(result) == {"key": {"type": 1, "data": {"group": "g", "topic": "t", "partition": 0}},
                               "value": None}


# --- section 14: coordinator partition ---------------------------------------------------------


@pytest.mark.parametrize(("group_id", "hash_code", "partition"), [
    ("g", 103, 3),
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", 158455506, 6),
    ("connect-cluster", 1440343063, 13),
    ("polygenelubricants", -2147483648, 0),
    ("", 0, 0),
])
def test_coordinator_partition_table(group_id: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(group_id) == hash_code
    assert coordinator_partition(group_id) == partition


def test_java_hash_sanity_values() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001F600") == 1772899  # two UTF-16 surrogate units
    assert coordinator_partition("polygenelubricants", 7) == 0
    with pytest.raises(ValueError, match="positive"):
        coordinator_partition("g", 0)


# --- errors: reasons, routing data, never an exception -----------------------------------------


@pytest.mark.parametrize(("key", "value", "reason", "record_type", "group"), [
    (None, b"\x00\x03", "null_key", None, None),
    (b"\x00", None, "truncated_key", None, None),
    (h("00 19 00 01 67"), h("00 00"), "unknown_record_type", 25, None),
    (h("ff ff 00 01 67"), None, "unknown_record_type", -1, None),
    (h("00 01 00 05 67"), None, "truncated_key", 1, None),
    (h("00 01 ff fe"), None, "malformed_key", 1, None),
    (OFFSET_KEY, h("00 05 00 00"), "unknown_value_version", 1, "g"),
    (OFFSET_KEY, h("00"), "truncated_value", 1, "g"),
    (OFFSET_KEY, h("00 03 00 00 00 00 00 00 00 2a"), "truncated_value", 1, "g"),
    (OFFSET_KEY, h("00 03 00 00 00 00 00 00 00 2a 00 00 00 07 ff ff 00 00 01 8b cf e5 68 00"),
     "malformed_value", 1, "g"),  # null in a non-nullable string
    (OFFSET_KEY, h("00 04 00 00 00 00 00 00 00 2a 00 00 00 07 01 00 00 01 8b cf e5 68 00 01 00 04 00 00 00 00"),
     "malformed_value", 1, "g"),  # topicId tag whose size is not 16
    (h("00 0b 00 01 67"), h("00 00 00 00 00 05 00 ff"), "malformed_value", 11, "g"),  # share: exact layouts
])
def test_decode_errors(key: bytes | None, value: bytes | None, reason: str, record_type: int | None,
                       group: str | None) -> None:
    result = decode(key, value)
    assert isinstance(result, DecodeError)
    assert (result.reason, result.record_type, result.group) == (reason, record_type, group)
    assert (result.key, result.value) == (key, value)
    assert result.detail


def test_trailing_bytes_ignored_like_kafka() -> None:
    value = h("00 03 00 00 00 00 00 00 00 2a 00 00 00 07 00 00 00 00 01 8b cf e5 68 00 de ad")
    assert record(OFFSET_KEY + b"\x99", value).value.offset == 42


def test_unknown_tags_are_skipped_by_size() -> None:
    value = h("00 00 00 00 00 05 02 00 08 01 23 45 67 89 ab cd ef 07 03 aa bb cc")
    assert record(h("00 03 00 01 67"), value).value == {"epoch": 5, "metadataHash": 0x0123456789ABCDEF}


def test_share_and_streams_layout_variants() -> None:
    share_40 = record(h("00 0b 00 01 67"), h("00 00 00 00 00 05 00"))
    share_41 = record(h("00 0b 00 01 67"), h("00 00 00 00 00 05 00 00 00 00 00 00 00 09 00"))
    assert share_40.value == {"epoch": 5} and share_41.value == {"epoch": 5, "metadataHash": 9}
    streams_first = record(h("00 11 00 01 67"), h("00 00 00 00 00 05 00"))
    assert streams_first.value == {"epoch": 5}


def test_bytes_like_inputs_and_non_bytes_never_raise() -> None:
    assert record(bytearray(OFFSET_KEY), memoryview(b"\x00\x00" + bytes(8) + b"\x00\x00" + bytes(8))).key.group == "g"
    weird = decode("not bytes", 5)  # type: ignore[arg-type]
    assert isinstance(weird, DecodeError) and weird.reason == "malformed_key"


def test_struct_is_immutable_and_hashable() -> None:
    value = record(h("00 02 00 01 67"), GROUP_V3).value
    assert isinstance(value, Struct) and hash(value) == hash(record(h("00 02 00 01 67"), GROUP_V3).value)
    with pytest.raises(AttributeError):
        value.generation = 2


# --- the command line ---------------------------------------------------------------------------


def test_format_line_shapes() -> None:
    ok = json.loads(format_line(b'{"key": "AAEAAWcAAXQAAAAA", "value": null}'))
    assert ok == {"key": {"type": 1, "data": {"group": "g", "topic": "t", "partition": 0}}, "value": None}
    bad = json.loads(format_line(b'{"key": "AAIAAWc=", "value": "AA=="}'))
    assert bad["error"]["reason"] == "truncated_value" and bad["error"]["group"] == "g"
    assert (bad["key"], bad["value"]) == ("AAIAAWc=", "AA==")
    for line in (b"not json", b"[1]", b'{"value": null}', b'{"key": "%%%"}', b"\xff\xfe", b"[" * 100000):
        assert json.loads(format_line(line))["error"]["reason"] == "invalid_input"


def test_cli_one_line_out_per_line_in() -> None:
    lines = [
        json.dumps({"key": "AAIAAWc=", "value": __import__("base64").b64encode(GROUP_V3).decode()}),
        "garbage",
        "",
        json.dumps({"key": "AAEAAWcAAXQAAAAA", "value": None}),
    ]
    run = subprocess.run([sys.executable, "-m", "decoders"], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, cwd=REPO, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    out = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(out) == 4
    member = out[0]["value"]["data"]["members"][0]
    assert member["subscription"] == {"topics": ["t"], "userData": None, "ownedPartitions": [],
                                      "generationId": -1, "rackId": None}
    assert member["assignment"] == {"assignedPartitions": [{"topic": "t", "partitions": [0]}], "userData": None}
    assert [line.get("error", {}).get("reason") for line in out[1:]] == ["invalid_input", "invalid_input", None]


@pytest.mark.slow
def test_cli_reads_the_live_topic(kafka_broker: Any, admin: Any, unique: str) -> None:
    """A real commit on a real broker comes out of ``--bootstrap-server`` mode, on the partition
    ``coordinator_partition`` predicts."""
    topic, group = f"decoders-live-{unique}", f"decoders-live-group-{unique}"
    admin.create_topic(topic, 1)
    admin.commit(group, {(topic, 0): 7})
    run = subprocess.run(
        [sys.executable, "-m", "decoders", "--bootstrap-server", kafka_broker.bootstrap, "--from-beginning",
         "--timeout-ms", "4000"],
        capture_output=True, text=True, cwd=REPO, timeout=180, check=False)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    ours = [line for line in lines if line.get("key", {}).get("data", {}).get("group") == group
            and line["key"]["type"] == 1]
    assert ours, f"commit of {group} not among {len(lines)} records"
    assert ours[-1]["key"]["data"] == {"group": group, "topic": topic, "partition": 0}
    assert ours[-1]["value"]["data"]["offset"] == 7
    assert ours[-1]["partition"] == coordinator_partition(group)
    assert all("error" not in line for line in lines), [line for line in lines if "error" in line][:3]


def test_triage_settles_bad_records_with_decodes_reason_and_never_a_good_one() -> None:
    """The vectorised triage on the hostile test's records (every form) and valid ones of every type."""
    import random

    import pyarrow as pa

    from decoders.batch import triage
    from tests.scenarios.test_hostile_input import Pools, hostile_records

    rng = random.Random(5)
    pools = Pools(rng)
    records = [(key, value) for key, value, _ in hostile_records(rng, 20_000)]
    records += [(key, None) for key in pools.commit_keys[:50] + pools.other_keys]
    records += [(rng.choice(pools.commit_keys), value) for value in pools.commit_values]
    records += [(rng.choice(pools.group_keys), value) for value in pools.group_values]
    checked = triage(pa.array([k for k, _ in records], pa.binary()), pa.array([v for _, v in records], pa.binary()))
    reasons = checked.reasons(list(range(len(records))))
    settled = 0
    for (key, value), reason, group in zip(records, reasons, checked.group.to_pylist(), strict=True):
        result, full = decode(key, value, payloads=False), decode(key, value)
        assert type(result) is type(full) and getattr(result, "reason", None) == getattr(full, "reason", None)
        if reason is not None:
            assert isinstance(result, DecodeError) and result.reason == reason, (key, value, reason)
            settled += 1
        if isinstance(result, Record) or result.group is not None:
            assert group == result.group
    assert settled > 18_000  # nearly every hostile record without per-record work
