"""The one generic reader: interprets a :class:`~decoders.schemas.Layout` over a byte buffer.

It mirrors the checks of Kafka's generated readers (negative lengths, null in a non-nullable
field, over-long strings, collections larger than the remaining bytes, over-long varints) so that
what Kafka rejects is rejected here too, and it decodes UTF-8 leniently exactly as Java does
(invalid sequences become U+FFFD). Every failure is a :class:`ReadError`; nothing else escapes.
"""

from __future__ import annotations

import base64
import codecs
import struct as _struct
from typing import Any

from decoders.records import Struct
from decoders.schemas import (
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    UINT16,
    UUID,
    Array,
    FieldType,
    Layout,
    NullableStruct,
    Primitive,
    StructType,
)

_INT8 = _struct.Struct(">b")
_INT16 = _struct.Struct(">h")
_UINT16 = _struct.Struct(">H")
_INT32 = _struct.Struct(">i")
_INT64 = _struct.Struct(">q")
_FIXED: dict[Primitive, _struct.Struct] = {
    INT8: _INT8, INT16: _INT16, UINT16: _UINT16, INT32: _INT32, INT64: _INT64,
}
_MAX_STRING_LENGTH = 0x7FFF  # Kafka's generated readers reject longer strings


def _java_replacement(error: UnicodeError) -> tuple[str, int]:
    """Replace malformed UTF-8 as Java's decoder does, one U+FFFD per malformed sequence.

    Python's "replace" agrees except after ED: Java takes ED A0-BF as a sequence prefix (it
    rejects the surrogate only once decoded), so ED A0-BF plus a continuation byte is one
    malformed sequence of 3 bytes, and without one a sequence of 2; Python counts 1 + 1 (+ 1).
    """
    assert isinstance(error, UnicodeDecodeError)
    data, start = error.object, error.start
    if data[start] == 0xED and len(data) > start + 1 and 0xA0 <= data[start + 1] <= 0xBF:
        complete = len(data) > start + 2 and 0x80 <= data[start + 2] <= 0xBF
        return "\ufffd", start + (3 if complete else 2)
    return "\ufffd", error.end


JAVA_REPLACE = "kafka-java-replace"
codecs.register_error(JAVA_REPLACE, _java_replacement)


def java_string(raw: bytes) -> str:
    """UTF-8 bytes to text exactly as Kafka's Java readers decode them."""
    return raw.decode("utf-8", JAVA_REPLACE)


class ReadError(Exception):
    """Bytes that do not fit the layout. ``kind`` is ``truncated`` or ``malformed``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def uuid_text(raw: bytes) -> str:
    """Kafka's text form of a uuid: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def read_int16(data: bytes, pos: int = 0) -> int:
    """The int16 prefix (record type or version) at ``pos``."""
    if len(data) < pos + 2:
        raise ReadError("truncated", f"need 2 bytes at offset {pos}, have {max(len(data) - pos, 0)}")
    return _INT16.unpack_from(data, pos)[0]


def read_layout(data: bytes, pos: int, layout: Layout) -> tuple[Struct, int]:
    """Read ``layout`` from ``data`` at ``pos``; return the struct and the position after it."""
    reader = _Reader(data, pos, layout.flexible)
    result = reader.struct(layout.struct)
    if layout.exact and reader.pos != len(data):
        raise ReadError("malformed", f"{len(data) - reader.pos} unconsumed bytes at offset {reader.pos}")
    return result, reader.pos


class _Reader:
    __slots__ = ("data", "end", "flexible", "pos")

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)
        self.flexible = flexible

    def _take(self, size: int, what: str) -> int:
        """Reserve ``size`` bytes; return their start."""
        start = self.pos
        if size > self.end - start:
            have = self.end - start
            raise ReadError("truncated", f"{what}: need {size} bytes at offset {start}, have {have}")
        self.pos = start + size
        return start

    def _fixed(self, codec: _struct.Struct, what: str) -> int:
        return codec.unpack_from(self.data, self._take(codec.size, what))[0]

    def varint(self, what: str) -> int:
        """Unsigned varint as Java reads it into an int (at most 5 bytes, wraps to signed 32 bits)."""
        value = shift = 0
        while True:
            byte = self.data[self._take(1, what)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise ReadError("malformed", f"{what}: varint longer than 5 bytes")
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value & 0x80000000 else value

    def _length(self, what: str, classic: _struct.Struct) -> int:
        """A length prefix: compact (varint N+1) when flexible, else the classic fixed width."""
        return self.varint(what) - 1 if self.flexible else self._fixed(classic, what)

    def _string(self, nullable: bool, what: str) -> str | None:
        length = self._length(what, _INT16)
        if length < 0:
            if nullable:
                return None
            raise ReadError("malformed", f"{what}: non-nullable string is null")
        if length > _MAX_STRING_LENGTH:
            raise ReadError("malformed", f"{what}: string length {length} exceeds {_MAX_STRING_LENGTH}")
        start = self._take(length, what)
        return self.data[start:start + length].decode("utf-8", JAVA_REPLACE)

    def _bytes(self, nullable: bool, what: str) -> bytes | None:
        length = self._length(what, _INT32)
        if length < 0:
            if nullable:
                return None
            raise ReadError("malformed", f"{what}: non-nullable bytes are null")
        start = self._take(length, what)
        return self.data[start:start + length]

    def value(self, type_: FieldType, what: str) -> Any:
        if isinstance(type_, Primitive):
            codec = _FIXED.get(type_)
            if codec is not None:
                return self._fixed(codec, what)
            if type_ is STRING or type_ is NULLABLE_STRING:
                return self._string(type_ is NULLABLE_STRING, what)
            if type_ is BYTES or type_ is NULLABLE_BYTES:
                return self._bytes(type_ is NULLABLE_BYTES, what)
            if type_ is UUID:
                start = self._take(16, what)
                return uuid_text(self.data[start:start + 16])
            raise AssertionError(f"unhandled primitive {type_}")
        if isinstance(type_, Array):
            return self._array(type_, what)
        if isinstance(type_, NullableStruct):
            if self._fixed(_INT8, what) < 0:
                return None
            return self.struct(type_.struct)
        return self.struct(type_)

    def _array(self, type_: Array, what: str) -> tuple[Any, ...] | None:
        count = self._length(what, _INT32)
        if count < 0:
            if type_.nullable:
                return None
            raise ReadError("malformed", f"{what}: non-nullable array is null")
        if count > self.end - self.pos:
            have = self.end - self.pos
            raise ReadError("truncated", f"{what}: {count} elements cannot fit in {have} bytes")
        element = type_.element
        return tuple(self.value(element, what) for _ in range(count))

    def struct(self, schema: StructType) -> Struct:
        fields = {field.name: self.value(field.type, field.name) for field in schema.fields}
        if self.flexible:
            self._tagged_fields(schema, fields)
        return Struct(fields)

    def _tagged_fields(self, schema: StructType, fields: dict[str, Any]) -> None:
        """Read a tagged section: known tags into ``fields`` (unless default), unknown ones skipped."""
        known = {field.tag: field for field in schema.tagged}
        for _ in range(self.varint("tagged field count")):
            tag = self.varint("tag")
            size = self.varint(f"tag {tag} size")
            if size < 0:
                raise ReadError("malformed", f"tag {tag}: negative size {size}")
            start = self._take(size, f"tag {tag}")
            field = known.get(tag)
            if field is None:
                continue
            outer_end, self.end, self.pos = self.end, start + size, start
            try:
                if isinstance(field.type, NullableStruct):
                    value = self.struct(field.type.struct) if self.varint(field.name) > 0 else None
                else:
                    value = self.value(field.type, field.name)
                if self.pos != self.end:
                    raise ReadError("malformed", f"{field.name}: {self.end - self.pos} bytes left in its tag")
            except ReadError as exc:
                detail = f"tag {tag} ({field.name}) does not match its size: {exc}"
                raise ReadError("malformed", detail) from None
            self.end = outer_end
            if value != field.default:
                fields[field.name] = value
            else:
                fields.pop(field.name, None)
