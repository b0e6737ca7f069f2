"""``decode``: one ``__consumer_offsets`` record (key bytes, value bytes or None) to a typed value.

Dispatch is by the key's int16 record type and the value's int16 version into the layout
tables of :mod:`decoders.schemas`; the generic reader does the rest. Every failure becomes a
:class:`~decoders.records.DecodeError` that keeps the raw bytes (and the record type and group
when the key was readable), so a caller can always route, count and keep bad records.
"""

from __future__ import annotations

from decoders.compiled import read_layout
from decoders.consumer_protocol import with_decoded_members
from decoders.reader import ReadError, read_int16
from decoders.records import GROUP_METADATA_TYPE, DecodeError, Record, Struct
from decoders.schemas import KEY_LAYOUTS, VALUE_LAYOUTS

BytesLike = bytes | bytearray | memoryview


def _group_of(key: Struct) -> str | None:
    return key.get("group", key.get("groupId"))


class _BadValue(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _decode_value(value: bytes, record_type: int, payloads: bool) -> tuple[int, Struct]:
    """``(version, body)`` of a value; the first layout of its version that fits wins."""
    if len(value) < 2:
        raise _BadValue("truncated_value", f"value has {len(value)} bytes, too short for its int16 version")
    version = read_int16(value)
    layouts = VALUE_LAYOUTS[record_type].get(version)
    if not layouts:
        raise _BadValue("unknown_value_version", f"record type {record_type} has no value version {version}")
    errors: list[ReadError] = []
    for layout in layouts:
        try:
            body, _ = read_layout(value, 2, layout)
        except ReadError as exc:
            errors.append(exc)
            continue
        if payloads and record_type == GROUP_METADATA_TYPE:
            body = with_decoded_members(body)
        return version, body
    if len(layouts) == 1:
        detail = f"value v{version}: {errors[0].detail}"
    else:
        detail = f"value v{version} fits no known layout: " + "; ".join(
            f"{layout.label}: {exc}" for layout, exc in zip(layouts, errors, strict=True))
    # "truncated" only when every candidate layout ran out of bytes; otherwise the value is inconsistent
    kind = "truncated" if all(exc.kind == "truncated" for exc in errors) else "malformed"
    raise _BadValue(f"{kind}_value", detail)


def _decode(key: BytesLike | None, value: BytesLike | None, payloads: bool) -> Record | DecodeError:
    value = None if value is None else bytes(value)
    if key is None:
        return DecodeError("null_key", "record has no key", None, value)
    key = bytes(key)
    if len(key) < 2:
        return DecodeError("truncated_key", f"key has {len(key)} bytes, too short for its int16 record type",
                           key, value)
    record_type = read_int16(key)
    key_layout = KEY_LAYOUTS.get(record_type)
    if key_layout is None:
        return DecodeError("unknown_record_type", f"unknown record type {record_type}",
                           key, value, record_type)
    try:
        key_struct, _ = read_layout(key, 2, key_layout)
    except ReadError as exc:
        return DecodeError(f"{exc.kind}_key", f"key of record type {record_type}: {exc.detail}",
                           key, value, record_type)
    if value is None:
        return Record(record_type, key_struct, None, None)
    try:
        version, body = _decode_value(value, record_type, payloads)
    except _BadValue as bad:
        return DecodeError(bad.reason, bad.detail, key, value, record_type, _group_of(key_struct))
    return Record(record_type, key_struct, version, body)


def decode(key: BytesLike | None, value: BytesLike | None, *, payloads: bool = True) -> Record | DecodeError:
    """Decode one record. Never raises: anything unreadable comes back as a ``DecodeError``.

    ``payloads=False`` leaves classic members' consumer-protocol payloads raw (no
    ``decodedSubscription``/``decodedAssignment``/``payloadError``). Such a payload never fails a
    record, so the outcome (record or error, and the reason) is the same, at a fraction of the
    cost for a large group: enough to check a record that is decoded in full elsewhere.
    """
    try:
        return _decode(key, value, payloads)
    except Exception as exc:  # a decoder bug must not stop a stream; keep the bytes and say why
        raw_key = bytes(key) if isinstance(key, bytes | bytearray | memoryview) else None
        raw_value = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None
        return DecodeError("malformed_key" if raw_key is None else "malformed_value",
                           f"unexpected {type(exc).__name__}: {exc}", raw_key, raw_value)
