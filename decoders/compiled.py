"""The layouts compiled to straight-line Python: the generic reader's results at a fraction of its cost.

:mod:`decoders.reader` interprets a layout field by field (a type dispatch, a method call and a
bounds check per field, a dict comprehension per struct). For a 100,000-group backlog that
interpretation was most of the driver's time. :func:`read_layout` here generates, once per
layout, one function per struct that reads its fields in order with the checks inlined, from the
same declarations in :mod:`decoders.schemas` (nothing about a layout is written twice).

The compiled code only takes the straight road: on anything unusual (too few bytes, a negative
or over-long length, a long varint, a tagged field it does not know how to skip cheaply) it gives
up and the generic reader reads the bytes again, so errors, their kinds and details, and every
corner of Kafka's rules stay the generic reader's alone. ``tests/unit/decoders/test_compiled.py``
holds the two to the same results on generated and damaged bytes.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable
from typing import Any

from decoders import reader
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

Reader = Callable[[bytes, int, int], tuple[Struct, int]]


class _GiveUp(Exception):
    """The compiled code met something off its straight road: the generic reader takes over."""


_FIXED: dict[Primitive, tuple[str, int]] = {INT8: (">b", 1), INT16: (">h", 2), UINT16: (">H", 2),
                                            INT32: (">i", 4), INT64: (">q", 8)}


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes, as Java reads it into a signed int."""
    value = shift = 0
    while True:
        if pos >= end:
            raise _GiveUp
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 28:
            raise _GiveUp
    value &= 0xFFFFFFFF
    return (value - (1 << 32) if value & 0x80000000 else value), pos


def _tagged(data: bytes, pos: int, end: int, schema: StructType, fields: dict[str, Any]) -> int:
    """A tagged section, read by the generic reader (rare, and full of Kafka's special cases)."""
    generic = reader._Reader(data, pos, True)
    generic.end = end
    try:
        generic._tagged_fields(schema, fields)
    except reader.ReadError:
        raise _GiveUp from None
    return generic.pos


class _Compiler:
    """Generates one function per (struct, flexible) and keeps them."""

    def __init__(self) -> None:
        self.functions: dict[tuple[int, bool], Reader] = {}
        self._names = 0
        self.namespace: dict[str, Any] = {
            "_GiveUp": _GiveUp, "_wrap": Struct.wrap, "_varint": _varint, "_tagged": _tagged,
            "_uuid": reader.uuid_text, "_REPLACE": reader.JAVA_REPLACE,
            **{f"_unpack_{code[1:]}": _struct.Struct(code).unpack_from for code, _ in _FIXED.values()},
        }

    def function(self, schema: StructType, flexible: bool) -> Reader:
        key = (id(schema), flexible)
        found = self.functions.get(key)
        if found is None:
            self._names += 1  # before the source: generating it compiles the inner structs first
            name = f"_read_{self._names}"
            self.namespace[f"_schema_{name}"] = schema
            source = self._source(name, schema, flexible)
            exec(compile(source, f"<layout {name}>", "exec"), self.namespace)  # source generated from schemas
            found = self.functions[key] = self.namespace[name]
        return found

    def _source(self, name: str, schema: StructType, flexible: bool) -> str:
        lines = [f"def {name}(data, pos, end):"]
        for index, field in enumerate(schema.fields):
            lines += self._read(field.type, f"v{index}", flexible, "    ")
        entries = ", ".join(f"{field.name!r}: v{index}" for index, field in enumerate(schema.fields))
        lines.append(f"    fields = {{{entries}}}")
        if flexible:
            lines.append(f"    pos = _tagged(data, pos, end, _schema_{name}, fields)")
        lines.append("    return _wrap(fields), pos")
        return "\n".join(lines) + "\n"

    def _length(self, target: str, flexible: bool, classic: str, indent: str) -> list[str]:
        if flexible:
            return [f"{indent}{target}, pos = _varint(data, pos, end)", f"{indent}{target} -= 1"]
        width = _FIXED[INT16 if classic == "h" else INT32][1]
        return [f"{indent}if pos + {width} > end: raise _GiveUp",
                f"{indent}{target} = _unpack_{classic}(data, pos)[0]", f"{indent}pos += {width}"]

    def _read(self, type_: FieldType, target: str, flexible: bool, indent: str) -> list[str]:
        if isinstance(type_, Primitive):
            return self._primitive(type_, target, flexible, indent)
        if isinstance(type_, Array):
            count, items = f"{target}_n", f"{target}_items"
            lines = self._length(count, flexible, "i", indent)
            lines += [f"{indent}if {count} < 0:"]
            lines += [f"{indent}    {target} = None"] if type_.nullable else [f"{indent}    raise _GiveUp"]
            lines += [f"{indent}else:",
                      f"{indent}    if {count} > end - pos: raise _GiveUp",
                      f"{indent}    {items} = []",
                      f"{indent}    for _ in range({count}):"]
            lines += self._read(type_.element, f"{target}_e", flexible, indent + "        ")
            lines += [f"{indent}        {items}.append({target}_e)", f"{indent}    {target} = tuple({items})"]
            return lines
        if isinstance(type_, NullableStruct):
            inner = self.function(type_.struct, flexible).__name__
            return [f"{indent}if pos + 1 > end: raise _GiveUp",
                    f"{indent}if _unpack_b(data, pos)[0] < 0:",
                    f"{indent}    pos += 1", f"{indent}    {target} = None",
                    f"{indent}else:", f"{indent}    {target}, pos = {inner}(data, pos + 1, end)"]
        inner = self.function(type_, flexible).__name__
        return [f"{indent}{target}, pos = {inner}(data, pos, end)"]

    def _primitive(self, type_: Primitive, target: str, flexible: bool, indent: str) -> list[str]:
        fixed = _FIXED.get(type_)
        if fixed is not None:
            code, width = fixed
            return [f"{indent}if pos + {width} > end: raise _GiveUp",
                    f"{indent}{target} = _unpack_{code[1:]}(data, pos)[0]", f"{indent}pos += {width}"]
        if type_ is UUID:
            return [f"{indent}if pos + 16 > end: raise _GiveUp",
                    f"{indent}{target} = _uuid(data[pos:pos + 16])", f"{indent}pos += 16"]
        if type_ in (STRING, NULLABLE_STRING, BYTES, NULLABLE_BYTES):
            text = type_ in (STRING, NULLABLE_STRING)
            nullable = type_ in (NULLABLE_STRING, NULLABLE_BYTES)
            size = f"{target}_size"
            lines = self._length(size, flexible, "h" if text else "i", indent)
            lines += [f"{indent}if {size} < 0:"]
            lines += [f"{indent}    {target} = None"] if nullable else [f"{indent}    raise _GiveUp"]
            lines += [f"{indent}else:"]
            if text:
                lines += [f"{indent}    if {size} > 0x7FFF: raise _GiveUp"]
            lines += [f"{indent}    if pos + {size} > end: raise _GiveUp"]
            value = (f"data[pos:pos + {size}].decode('utf-8', _REPLACE)" if text else f"data[pos:pos + {size}]")
            lines += [f"{indent}    {target} = {value}", f"{indent}    pos += {size}"]
            return lines
        raise AssertionError(f"unhandled primitive {type_}")


_COMPILER = _Compiler()


def read_layout(data: bytes, pos: int, layout: Layout) -> tuple[Struct, int]:
    """:func:`decoders.reader.read_layout`'s result, by the compiled road when it can be taken."""
    try:
        result, end = _COMPILER.function(layout.struct, layout.flexible)(data, pos, len(data))
    except _GiveUp:
        return reader.read_layout(data, pos, layout)
    if layout.exact and end != len(data):
        return reader.read_layout(data, pos, layout)
    return result, end
