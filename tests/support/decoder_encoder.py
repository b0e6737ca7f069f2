"""Test-side encoder for ``__consumer_offsets`` records, driven by the decoder's own layout data.

Writing with the same :mod:`decoders.schemas` tables the reader interprets means a round trip
checks the reader's handling of every type and encoding rule; whether those tables match Kafka
is checked separately against Kafka's own classes (tests/unit/decoders/test_kafka_oracle.py).

Values use the decoder's representation (uuids as Kafka text, arrays as sequences, nested
structs as mappings). A struct mapping may carry ``UNKNOWN_TAGS`` (tag -> raw bytes) to inject
tagged fields the schema does not know; ``random_fields`` builds random values for any layout.
"""

from __future__ import annotations

import base64
import random
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from decoders.schemas import (
    ASSIGNMENT_LAYOUTS,
    BYTES,
    CONSUMER_PROTOCOL_MAX_VERSION,
    INT8,
    INT16,
    INT32,
    INT64,
    KEY_LAYOUTS,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    SUBSCRIPTION_LAYOUTS,
    UINT16,
    UUID,
    VALUE_LAYOUTS,
    Array,
    FieldType,
    Layout,
    NullableStruct,
    Primitive,
    StructType,
)

UNKNOWN_TAGS = "_unknownTags"
_FIXED = {INT8: ">b", INT16: ">h", UINT16: ">H", INT32: ">i", INT64: ">q"}
_RANGES = {INT8: 8, INT16: 16, INT32: 32, INT64: 64}


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uuid_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "==")


class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible

    def _length(self, length: int | None, classic: str) -> bytes:
        if self.flexible:
            return uvarint(0 if length is None else length + 1)
        return struct.pack(classic, -1 if length is None else length)

    def value(self, type_: FieldType, value: Any) -> bytes:
        if isinstance(type_, Primitive):
            if type_ in _FIXED:
                return struct.pack(_FIXED[type_], value)
            if type_ is UUID:
                return uuid_bytes(value)
            if type_ in (STRING, NULLABLE_STRING):
                raw = None if value is None else value.encode()
                return self._length(None if raw is None else len(raw), ">h") + (raw or b"")
            assert type_ in (BYTES, NULLABLE_BYTES)
            return self._length(None if value is None else len(value), ">i") + (value or b"")
        if isinstance(type_, Array):
            if value is None:
                return self._length(None, ">i")
            return self._length(len(value), ">i") + b"".join(self.value(type_.element, item) for item in value)
        if isinstance(type_, NullableStruct):
            return b"\xff" if value is None else b"\x01" + self.struct(type_.struct, value)
        return self.struct(type_, value)

    def _tagged_data(self, type_: FieldType, value: Any) -> bytes:
        if isinstance(type_, NullableStruct):  # tagged nullable structs use a varint marker
            return uvarint(0) if value is None else uvarint(1) + self.struct(type_.struct, value)
        return self.value(type_, value)

    def struct(self, schema: StructType, fields: Mapping[str, Any]) -> bytes:
        out = b"".join(self.value(field.type, fields[field.name]) for field in schema.fields)
        if not self.flexible:
            return out
        tags = {field.tag: self._tagged_data(field.type, fields[field.name])
                for field in schema.tagged if field.name in fields}
        tags.update(fields.get(UNKNOWN_TAGS, {}))
        section = uvarint(len(tags)) + b"".join(
            uvarint(tag) + uvarint(len(data)) + data for tag, data in sorted(tags.items()))
        return out + section


def encode_layout(layout: Layout, fields: Mapping[str, Any]) -> bytes:
    """The body bytes of ``fields`` written with ``layout`` (no version prefix)."""
    return _Writer(layout.flexible).struct(layout.struct, fields)


def encode_key(record_type: int, fields: Mapping[str, Any]) -> bytes:
    return struct.pack(">h", record_type) + encode_layout(KEY_LAYOUTS[record_type], fields)


def encode_value(record_type: int, version: int, fields: Mapping[str, Any], variant: int = 0) -> bytes:
    layout = VALUE_LAYOUTS[record_type][version][variant]
    return struct.pack(">h", version) + encode_layout(layout, fields)


def encode_subscription(version: int, fields: Mapping[str, Any]) -> bytes:
    layout = SUBSCRIPTION_LAYOUTS[min(version, CONSUMER_PROTOCOL_MAX_VERSION)]
    return struct.pack(">h", version) + encode_layout(layout, fields)


def encode_assignment(version: int, fields: Mapping[str, Any]) -> bytes:
    layout = ASSIGNMENT_LAYOUTS[min(version, CONSUMER_PROTOCOL_MAX_VERSION)]
    return struct.pack(">h", version) + encode_layout(layout, fields)


# --- random values for any layout (deterministic given the Random) -------------------------------

_WORDS = ["g", "orders", "payments-consumer", "t1", "ümlaut", "日本", "rack-a", "", "x" * 40, "emoji-😀"]


def random_value(rng: random.Random, type_: FieldType, flexible: bool) -> Any:
    if isinstance(type_, Primitive):
        if type_ is UINT16:
            return rng.randrange(1 << 16)
        if type_ in _RANGES:
            bits = _RANGES[type_]
            return rng.choice([0, -1, 1, rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))])
        if type_ is UUID:
            return base64.urlsafe_b64encode(rng.randbytes(16)).rstrip(b"=").decode()
        if type_ is NULLABLE_STRING and rng.random() < 0.3:
            return None
        if type_ in (STRING, NULLABLE_STRING):
            return rng.choice(_WORDS)
        if type_ is NULLABLE_BYTES and rng.random() < 0.3:
            return None
        return rng.randbytes(rng.randrange(6))
    if isinstance(type_, Array):
        if type_.nullable and rng.random() < 0.3:
            return None
        return tuple(random_value(rng, type_.element, flexible) for _ in range(rng.randrange(4)))
    if isinstance(type_, NullableStruct):
        return None if rng.random() < 0.3 else random_fields(rng, type_.struct, flexible)
    return random_fields(rng, type_, flexible)


def random_fields(rng: random.Random, schema: StructType, flexible: bool) -> dict[str, Any]:
    """Random positional fields, and (when flexible) some non-default tagged fields."""
    fields = {field.name: random_value(rng, field.type, flexible) for field in schema.fields}
    if flexible:
        for field in schema.tagged:
            if rng.random() < 0.6:
                value = random_value(rng, field.type, flexible)
                if value != field.default:
                    fields[field.name] = value
    return fields


def without_unknown_tags(value: Any) -> Any:
    """``value`` as the decoder returns it: injected unknown tags dropped, sequences as tuples."""
    if isinstance(value, Mapping):
        return {name: without_unknown_tags(field) for name, field in value.items() if name != UNKNOWN_TAGS}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return tuple(without_unknown_tags(item) for item in value)
    return value
