"""Property tests: schema-driven round trips, ``decode_batch`` == ``decode``, and no input ever raises.

Profiles: ``default`` (about 100 examples per test, for every run) and ``fuzz`` (20000, for
``make fuzz``), chosen by the HYPOTHESIS_PROFILE environment variable.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=20000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

from decoders import DecodeError, Record, decode  # noqa: E402  (profiles first, as documented above)
from decoders.__main__ import format_line  # noqa: E402
from decoders.batch import SCHEMA, decode_batch  # noqa: E402
from decoders.json_format import dumps, to_json  # noqa: E402
from decoders.reader import ReadError, read_layout, uuid_text  # noqa: E402
from decoders.schemas import (  # noqa: E402
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    KEY_LAYOUTS,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STICKY_USER_DATA_LAYOUTS,
    STRING,
    SUBSCRIPTION_LAYOUTS,
    UINT16,
    UUID,
    VALUE_LAYOUTS,
    Array,
    FieldType,
    NullableStruct,
    StructType,
)
from tests.support.decoder_encoder import (  # noqa: E402
    UNKNOWN_TAGS,
    encode_assignment,
    encode_key,
    encode_layout,
    encode_subscription,
    encode_value,
    uuid_bytes,
    without_unknown_tags,
)

# --- strategies driven by the layout data ------------------------------------------------------

_INT_BITS = {INT8: 8, INT16: 16, INT32: 32, INT64: 64}
_text = st.text(max_size=12)


@functools.cache
def values(type_: FieldType, flexible: bool, unknown_tags: bool = True) -> st.SearchStrategy[Any]:
    """Any value of ``type_`` in the decoder's representation."""
    if type_ in _INT_BITS:
        bits = _INT_BITS[type_]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if type_ is UINT16:
        return st.integers(0, 0xFFFF)
    if type_ is UUID:
        return st.binary(min_size=16, max_size=16).map(uuid_text)
    if type_ is STRING:
        return _text
    if type_ is NULLABLE_STRING:
        return st.none() | _text
    if type_ is BYTES:
        return st.binary(max_size=12)
    if type_ is NULLABLE_BYTES:
        return st.none() | st.binary(max_size=12)
    if isinstance(type_, Array):
        items = st.lists(values(type_.element, flexible, unknown_tags), max_size=3).map(tuple)
        return st.none() | items if type_.nullable else items
    if isinstance(type_, NullableStruct):
        return st.none() | structs(type_.struct, flexible, unknown_tags)
    assert isinstance(type_, StructType)
    return structs(type_, flexible, unknown_tags)


@functools.cache
def structs(schema: StructType, flexible: bool, unknown_tags: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A struct's fields; when flexible, some non-default tagged fields and maybe unknown tags."""
    required = {field.name: values(field.type, flexible, unknown_tags) for field in schema.fields}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    if flexible:
        for field in schema.tagged:
            # Kafka writes no tag equal to its default (an empty struct included); unknown tags
            # injected inside a value do not make it differ.
            optional[field.name] = values(field.type, flexible, unknown_tags).filter(
                lambda value, default=field.default: without_unknown_tags(value) != default)
        if unknown_tags:
            known = {field.tag for field in schema.tagged}
            optional[UNKNOWN_TAGS] = st.dictionaries(
                st.integers(1, 300).filter(lambda tag: tag not in known), st.binary(max_size=6), max_size=2)
    return st.fixed_dictionaries(required, optional=optional)


VALUE_CASES = [(record_type, version, variant) for record_type, versions in VALUE_LAYOUTS.items()
               for version, layouts in versions.items() for variant in range(len(layouts))]


def _record(result: Record | DecodeError) -> Record:
    assert isinstance(result, Record), result
    return result


def _plain_members(value: Any) -> Any:
    """A group value without our decoded-payload additions, to compare with what was encoded."""
    extras = {"decodedSubscription", "decodedAssignment", "payloadError"}
    return {**value, "members": tuple({k: v for k, v in m.items() if k not in extras} for m in value["members"])}


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize(("record_type", "version", "variant"), VALUE_CASES)
@given(data=st.data())
@settings(max_examples=max(10, settings().max_examples // 4))
def test_round_trip_every_layout(record_type: int, version: int, variant: int, data: st.DataObject) -> None:
    layouts = VALUE_LAYOUTS[record_type][version]
    layout = layouts[variant]
    key = data.draw(structs(KEY_LAYOUTS[record_type].struct, False))
    value = data.draw(structs(layout.struct, layout.flexible, unknown_tags=variant == 0))
    value_bytes = encode_value(record_type, version, value, variant)
    for earlier in layouts[:variant]:  # older layouts are tried second: only unambiguous bytes reach them
        try:
            read_layout(value_bytes, 2, earlier)
        except ReadError:
            continue
        assume(False)
    result = _record(decode(encode_key(record_type, key), value_bytes))
    assert (result.record_type, result.version, result.key) == (record_type, version, key)
    decoded = _plain_members(result.value) if record_type == 2 else result.value
    assert decoded == without_unknown_tags(value)
    assert json.loads(dumps(to_json(result)))["key"]["type"] == record_type


@st.composite
def subscriptions(draw: st.DrawFn, protocol: str) -> tuple[bytes, dict[str, Any]]:
    """An encoded subscription (v0-v5, maybe with trailing bytes) and what decoding must give."""
    version = draw(st.integers(0, 5))
    fields = draw(structs(SUBSCRIPTION_LAYOUTS[min(version, 3)].struct, False))
    expected: dict[str, Any] = {"version": version, **fields}
    if protocol == "sticky" and draw(st.booleans()):
        sticky_layout = draw(st.sampled_from(STICKY_USER_DATA_LAYOUTS))
        sticky = draw(structs(sticky_layout.struct, False))
        fields["userData"] = encode_layout(sticky_layout, sticky)
        expected.update(userData=fields["userData"], stickyUserData={
            "previousAssignment": sticky["previousAssignment"], "generation": sticky.get("generation")})
    elif protocol == "cooperative-sticky" and draw(st.booleans()):
        generation = draw(values(INT32, False))
        fields["userData"] = struct.pack(">i", generation)
        expected.update(userData=fields["userData"], cooperativeStickyGeneration=generation)
    elif protocol in ("sticky", "cooperative-sticky"):  # random bytes could read as assignor data
        fields["userData"] = expected["userData"] = None
    trailing = draw(st.binary(max_size=4)) if version > 3 else b""
    return encode_subscription(version, fields) + trailing, expected


@given(data=st.data(), group_version=st.integers(0, 4),
       protocol=st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"]))
def test_consumer_payloads_round_trip(data: st.DataObject, group_version: int, protocol: str) -> None:
    layout = VALUE_LAYOUTS[2][group_version][0]
    group = data.draw(structs(layout.struct, layout.flexible))
    group.update(protocolType="consumer", protocol=protocol)
    expected = []
    members = []
    for member in group["members"]:
        subscription, decoded_subscription = data.draw(subscriptions(protocol))
        version = data.draw(st.integers(0, 5))
        assignment = data.draw(structs(SUBSCRIPTION_LAYOUTS[0].struct, False).map(
            lambda fields: {"assignedPartitions": (), "userData": fields["userData"]}))
        members.append({**member, "subscription": subscription, "assignment": encode_assignment(version, assignment)})
        expected.append((decoded_subscription, {"version": version, **assignment}))
    group["members"] = tuple(members)
    result = _record(decode(encode_key(2, {"group": "g"}), encode_value(2, group_version, group)))
    for member, (subscription, assignment) in zip(result.value.members, expected, strict=True):
        assert member.payloadError is None
        assert member.decodedSubscription == subscription
        assert member.decodedAssignment == assignment


# --- decode_batch agrees with decode -----------------------------------------------------------

_offset_keys = structs(KEY_LAYOUTS[1].struct, False)


@st.composite
def offset_commits(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    record_type = draw(st.sampled_from([0, 1]))
    key = encode_key(record_type, draw(_offset_keys))
    if draw(st.integers(0, 9)) == 0:
        return key, None
    version = draw(st.integers(0, 4))
    layout = VALUE_LAYOUTS[1][version][0]
    return key, encode_value(1, version, draw(structs(layout.struct, layout.flexible)))


@st.composite
def other_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    record_type, version, variant = draw(st.sampled_from(VALUE_CASES))
    layout = VALUE_LAYOUTS[record_type][version][variant]
    key = encode_key(record_type, draw(structs(KEY_LAYOUTS[record_type].struct, False)))
    value = draw(st.none() | structs(layout.struct, layout.flexible, unknown_tags=False))
    return key, None if value is None else encode_value(record_type, version, value, variant)


@st.composite
def damaged(draw: st.DrawFn, records: st.SearchStrategy[tuple[bytes | None, bytes | None]]
            ) -> tuple[bytes | None, bytes | None]:
    """A record cut short, with bytes changed or appended, or its key and value swapped."""
    key, value = draw(records)
    target = draw(st.sampled_from(["key", "value"]))
    raw = key if target == "key" or value is None else value
    assert raw is not None
    how = draw(st.sampled_from(["cut", "flip", "append", "swap"]))
    if how == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif how == "flip" and raw:
        index = draw(st.integers(0, len(raw) - 1))
        raw = raw[:index] + bytes([draw(st.integers(0, 255))]) + raw[index + 1:]
    elif how == "append":
        raw += draw(st.binary(min_size=1, max_size=6))
    else:
        return value, key
    return (raw, value) if target == "key" or value is None else (key, raw)


garbage = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=60))
invalid_utf8_keys = st.tuples(
    st.binary(min_size=1, max_size=8).map(lambda raw: b"\x00\x01" + struct.pack(">h", len(raw)) + raw
                                         + b"\x00\x01t\x00\x00\x00\x07"),
    st.none() | st.just(b"\x00\x03" + bytes(8) + b"\x00\x00\x00\x00\x00\x00" + bytes(8)))
any_record = st.one_of(offset_commits(), other_records(), damaged(offset_commits()), damaged(other_records()),
                       garbage, invalid_utf8_keys)


def expected_row(result: Record | DecodeError) -> dict[str, Any]:
    """One ``decode_batch`` row as the contract defines it from a ``decode`` result."""
    row = dict.fromkeys(SCHEMA.names)
    row["is_tombstone"] = result.value is None
    if isinstance(result, DecodeError):
        row.update(record_type=result.record_type, group=result.group, error=result.reason)
        return row
    row.update(record_type=result.record_type, group=result.group, value_version=result.version,
               member_id=result.key.get("memberId"))
    if result.record_type in (0, 1):
        row.update(topic=result.key.topic, partition=result.key.partition)
        if result.value is not None:
            row.update(offset=result.value.offset, leader_epoch=result.value.get("leaderEpoch"),
                       metadata=result.value.metadata, commit_timestamp=result.value.commitTimestamp,
                       expire_timestamp=result.value.get("expireTimestamp"))
            topic_id = result.value.get("topicId")  # v4 (4.1+ writers); Kafka's zero id means none
            row["topic_id"] = None if topic_id in (None, "AAAAAAAAAAAAAAAAAAAAAA") else uuid_bytes(topic_id)
    return row


def _arrow(items: list[bytes | None], form: str) -> pa.Array | pa.ChunkedArray:
    if form == "large":
        return pa.array(items, pa.large_binary())
    if form == "chunked":
        middle = len(items) // 2
        return pa.chunked_array([pa.array(items[:middle], pa.binary()), pa.array(items[middle:], pa.binary())],
                                pa.binary())
    if form == "sliced":
        return pa.array([b"pad", *items, b"pad"], pa.binary()).slice(1, len(items))
    return pa.array(items, pa.binary())


@given(records=st.lists(any_record, max_size=40), form=st.sampled_from(["plain", "large", "chunked", "sliced"]))
def test_decode_batch_equals_decode(records: list[tuple[bytes | None, bytes | None]], form: str) -> None:
    keys, values_ = [key for key, _ in records], [value for _, value in records]
    table = decode_batch(_arrow(keys, form), _arrow(values_, form))
    assert table.schema == SCHEMA
    assert table.to_pylist() == [expected_row(decode(key, value)) for key, value in records]


def test_decode_batch_edge_shapes() -> None:
    assert decode_batch(pa.array([], pa.binary()), pa.array([], pa.binary())).num_rows == 0
    table = decode_batch(pa.array([b"\x00\x02\x00\x01g"], pa.binary()), pa.array([None]))  # null-typed values
    assert table.to_pylist()[0]["group"] == "g" and table.to_pylist()[0]["is_tombstone"]
    with pytest.raises(ValueError, match="differ in length"):
        decode_batch(pa.array([b"x"], pa.binary()), pa.array([], pa.binary()))


# --- nothing raises ----------------------------------------------------------------------------


@given(key=st.none() | st.binary(max_size=80), value=st.none() | st.binary(max_size=200))
def test_random_bytes_never_raise(key: bytes | None, value: bytes | None) -> None:
    result = decode(key, value)
    assert isinstance(result, Record | DecodeError)
    json.loads(dumps(to_json(result)))


@given(record=st.one_of(damaged(offset_commits()), damaged(other_records())))
def test_mutated_records_never_raise(record: tuple[bytes | None, bytes | None]) -> None:
    result = decode(*record)
    if isinstance(result, DecodeError):
        assert result.reason in {"null_key", "truncated_key", "unknown_record_type", "unknown_value_version",
                                 "truncated_value", "malformed_key", "malformed_value"}
        assert (result.key, result.value) == record
    json.loads(dumps(to_json(result)))


@given(line=st.binary(max_size=120) | st.text(max_size=60).map(str.encode)
       | st.builds(lambda k, v: json.dumps({"key": k, "value": v}).encode(), st.text(max_size=20),
                   st.none() | st.text(max_size=20)))
def test_cli_lines_never_raise(line: bytes) -> None:
    assert isinstance(json.loads(format_line(line)), dict)
