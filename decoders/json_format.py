"""JSON shaped like Kafka 4.x's formatters, so our output diffs cleanly against Kafka's tools.

A record prints as ``{"key": {"type": T, "data": {...}}, "value": {"version": V, "data": {...}}}``
(``"value": null`` for a tombstone); bytes print as base64 and topic ids as Kafka's text uuid, as
Kafka's JSON converters do. Classic consumer-group members print their subscription/assignment
as decoded objects, exactly as Kafka's ``DumpLogSegments --offsets-decoder`` does, or as base64
when they were not decoded. An undecodable record prints as ``{"error": {...}, "key": b64,
"value": b64}``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from decoders.records import GROUP_METADATA_TYPE, DecodeError, Record, Struct

# Decoded-payload fields of ours that Kafka's dump tool does not print.
_PAYLOAD_EXTRAS = frozenset({"version", "stickyUserData", "cooperativeStickyGeneration"})
_MEMBER_EXTRAS = frozenset({"decodedSubscription", "decodedAssignment", "payloadError"})


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def jsonable(value: Any) -> Any:
    """Struct/tuple/bytes to plain JSON types (bytes as base64, like Kafka's JSON converters)."""
    if isinstance(value, Mapping):
        return {name: jsonable(field) for name, field in value.items()}
    if isinstance(value, tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes):
        return b64(value)
    return value


def _payload(raw: bytes, decoded: Struct | None) -> Any:
    if decoded is None:
        return b64(raw)
    return jsonable({name: field for name, field in decoded.items() if name not in _PAYLOAD_EXTRAS})


def _member(member: Struct) -> dict[str, Any]:
    out = {name: jsonable(field) for name, field in member.items() if name not in _MEMBER_EXTRAS}
    out["subscription"] = _payload(member["subscription"], member["decodedSubscription"])
    out["assignment"] = _payload(member["assignment"], member["decodedAssignment"])
    return out


def _value_data(record: Record) -> dict[str, Any]:
    assert record.value is not None
    data = jsonable(record.value)
    if record.record_type == GROUP_METADATA_TYPE:
        data["members"] = [_member(member) for member in record.value["members"]]
    return data


def to_json(result: Record | DecodeError) -> dict[str, Any]:
    """The JSON object for one decoded record or decode error."""
    if isinstance(result, DecodeError):
        error: dict[str, Any] = {"reason": result.reason, "detail": result.detail}
        if result.record_type is not None:
            error["recordType"] = result.record_type
        if result.group is not None:
            error["group"] = result.group
        return {"error": error, "key": b64(result.key), "value": b64(result.value)}
    value = None if result.value is None else {"version": result.version, "data": _value_data(result)}
    return {"key": {"type": result.record_type, "data": jsonable(result.key)}, "value": value}


def dumps(obj: Mapping[str, Any]) -> str:
    """One compact JSON line (non-ASCII kept as UTF-8, as Kafka's tools print it)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
