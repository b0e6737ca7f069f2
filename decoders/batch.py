"""``decode_batch``: Arrow key/value columns to a flat Arrow table, vectorised for offset commits.

Offset commits are nearly all of ``__consumer_offsets`` traffic, so they never go through a
Python loop: numpy views over the Arrow offsets and data buffers read the record type, the
string lengths and the fixed-width fields of every row at once (value versions 0-4 side by
side, positions chosen per row), and the string columns are cut out of the original data
buffers by Arrow itself (see ``_strings``). Rows the fast path does not fully understand
(other record types, tagged fields other than a lone topic id, multi-byte varints, anything
short or odd) first meet ``triage``, which settles vectorised what the key, the value's version
or the value's leading fields make undecodable (most hostile input), walking the same layout
tables; only what it leaves goes through the scalar ``decode``, so both paths agree on every input.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from decoders.core import decode
from decoders.reader import java_string
from decoders.records import OFFSET_COMMIT_TYPES, DecodeError, Record
from decoders.schemas import (
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    KEY_LAYOUTS,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    STRING,
    UINT16,
    UUID,
    VALUE_LAYOUTS,
    ZERO_UUID,
    Array,
    Layout,
)

SCHEMA = pa.schema([
    ("record_type", pa.int16()),
    ("group", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("leader_epoch", pa.int32()),
    ("metadata", pa.string()),
    ("commit_timestamp", pa.int64()),
    ("expire_timestamp", pa.int64()),
    ("value_version", pa.int16()),
    ("is_tombstone", pa.bool_()),
    ("error", pa.string()),
    ("member_id", pa.string()),
    ("topic_id", pa.binary(16)),
])
_STRING_COLUMNS = ("group", "topic", "metadata", "error", "member_id")
_NUMERIC_COLUMNS = ("record_type", "partition", "offset", "leader_epoch", "commit_timestamp",
                    "expire_timestamp", "value_version")
_TOPIC_ID_TAG = (1, 0, 16)  # one tagged field, tag 0, 16 bytes: the topic id of a 4.1+ commit

BinaryColumn: TypeAlias = pa.BinaryArray | pa.LargeBinaryArray | pa.ChunkedArray


def row_of(result: Record | DecodeError) -> dict[str, Any]:
    """The table row for one scalar decode result (the fallback path, and the contract)."""
    if isinstance(result, DecodeError):
        return {"record_type": result.record_type, "group": result.group,
                "is_tombstone": result.value is None, "error": result.reason}
    row: dict[str, Any] = {"record_type": result.record_type, "group": result.group,
                           "value_version": result.version, "is_tombstone": result.value is None,
                           "member_id": result.key.get("memberId")}
    if result.record_type in OFFSET_COMMIT_TYPES:
        row["topic"], row["partition"] = result.key["topic"], result.key["partition"]
        if result.value is not None:
            value = result.value
            row.update(offset=value["offset"], leader_epoch=value.get("leaderEpoch"),
                       metadata=value["metadata"], commit_timestamp=value["commitTimestamp"],
                       expire_timestamp=value.get("expireTimestamp"))
            if value.get("topicId") not in (None, ZERO_UUID):  # the 16 bytes, as the vectorised path keeps them
                row["topic_id"] = base64.urlsafe_b64decode(value["topicId"] + "==")
    return row


@dataclass
class _Column:
    """numpy views of one binary column: row validity, row start/length in ``data``.

    Positions are int32 unless the data buffer needs more (keeps the vectorised arithmetic narrow).
    """

    array: pa.Array
    valid: np.ndarray
    start: np.ndarray
    length: np.ndarray
    data: np.ndarray

    def be(self, pos: np.ndarray, dtype: str, ok: np.ndarray | None = None) -> np.ndarray:
        """Big-endian integers of ``dtype`` (e.g. ``>i8``) at byte positions ``pos`` (unaligned).

        Only rows where ``ok`` are meaningful; the others read position 0 so that garbage
        lengths can never index outside the buffer.
        """
        width = np.dtype(dtype).itemsize
        result_type = np.int64 if width == 8 else self.start.dtype
        if self.data.size < width:
            return np.zeros(pos.size, result_type)
        if ok is not None and not ok.all():
            pos = np.where(ok, pos, 0)
        windows = np.ndarray((self.data.size - width + 1,), dtype, self.data, 0, (1,))
        return windows[pos].astype(result_type)


def _as_binary(column: BinaryColumn) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        column = column.cast(pa.binary())  # null-typed (all tombstones) or string input
    return column


def _view(array: pa.Array) -> _Column:
    n = len(array)
    _, offsets_buf, data_buf = array.buffers()
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    position_type = np.int32 if data.size < (1 << 31) - (1 << 20) else np.int64
    if offsets_buf is None:
        offsets = np.zeros(n + 1, position_type)
    else:
        offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        offsets = np.frombuffer(offsets_buf, offset_type)[array.offset:array.offset + n + 1]
        offsets = offsets.astype(position_type, copy=False)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return _Column(array, valid, offsets[:-1], np.diff(offsets), data)


def _strings(column: _Column, mask: np.ndarray, tiling: np.ndarray, every_other: pa.Array) -> pa.Array:
    """A string column holding the slices ``tiling`` describes where ``mask``, null elsewhere.

    Arrow cannot address gaps, so the data buffer is tiled by 2n elements that alternate between
    the wanted slice of a row and the gap up to the next row's slice (``tiling`` holds their 2n+1
    offsets); taking every other element (``every_other`` = 0, 2, 4, ...) then copies exactly the
    wanted bytes in C++. Every slice lies inside its own row (rows without one get an empty slice
    at their start), which keeps the tiling monotonic.
    """
    n = len(mask)
    large = tiling.dtype == np.int64
    data_buf = column.array.buffers()[2] or pa.py_buffer(b"")
    binary_type = pa.large_binary() if large else pa.binary()
    tiled = pa.Array.from_buffers(binary_type, 2 * n, [None, pa.py_buffer(tiling), data_buf])
    taken = tiled.take(every_other)
    validity = None if mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))
    buffers = [validity, *taken.buffers()[1:]]
    ends = np.frombuffer(buffers[1], tiling.dtype)[[0, n]]
    text = np.frombuffer(buffers[2], np.uint8)[ends[0]:ends[1]] if buffers[2] is not None else np.zeros(0)
    if (text.size == 0 or text.max() < 0x80) and not large:  # ASCII is valid UTF-8: skip validating
        return pa.Array.from_buffers(pa.string(), n, buffers)
    binary = pa.Array.from_buffers(binary_type, n, buffers)
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8 (never written by Kafka): replace as Java and decode() do
        return pa.array([None if raw is None else java_string(raw) for raw in binary.to_pylist()], pa.string())


_CHUNK = 1 << 14  # rows per vectorised step: keeps the temporaries of one step in cache

# Which row mask says a numeric column is present: "done" (key read, incl. tombstones),
# "value" (value read), "epoch" (value v3/v4), "expire" (value v1).
_PRESENT_WHEN = {"record_type": "done", "partition": "done", "value_version": "value", "offset": "value",
                 "leader_epoch": "epoch", "commit_timestamp": "value", "expire_timestamp": "expire"}


class _Fast:
    """Full-length results of the vectorised path; ``masks["done"]`` marks the rows it finished."""

    def __init__(self, n: int, position_type: type) -> None:
        self.numeric = {name: np.zeros(n, SCHEMA.field(name).type.to_pandas_dtype()) for name in _NUMERIC_COLUMNS}
        self.masks = {name: np.zeros(n, bool) for name in ("done", "value", "epoch", "expire", "topic_id")}
        self.topic_id_at: np.ndarray = np.zeros(n, position_type)  # where a v4 topic id starts in the data
        self.tilings: dict[str, np.ndarray] = {name: np.zeros(2 * n + 1, position_type)
                                               for name in ("group", "topic", "metadata")}

    @property
    def done(self) -> np.ndarray:
        return self.masks["done"]

    def present(self) -> dict[str, np.ndarray]:
        """Per numeric column, a (fresh) mask of the rows that have a value."""
        return {name: self.masks[mask].copy() for name, mask in _PRESENT_WHEN.items()}

    def put_slice(self, rows: slice, name: str, ok: np.ndarray, row_start: np.ndarray,
                  start: np.ndarray, length: np.ndarray) -> None:
        """Tile ``rows``: where ``ok`` the string at ``start``; elsewhere empty at the row's start."""
        if not ok.all():
            start, length = np.where(ok, start, row_start), np.where(ok, length, 0)
        _tile(self.tilings[name], rows, start, length)


def _tile(tiling: np.ndarray, rows: slice, start: np.ndarray, length: np.ndarray) -> None:
    """Write the slices of ``rows`` (and the gaps after them) into a ``_strings`` tiling."""
    tiling[2 * rows.start:2 * rows.stop:2] = start
    tiling[2 * rows.start + 1:2 * rows.stop + 1:2] = start + length


def _scan(keys: _Column, values: _Column, rows: slice, out: _Fast) -> None:
    """Decode the offset commits among ``rows`` that the fast path fully understands.

    Each step narrows ``ok`` (key readable as an offset-commit key) and ``vok`` (value readable)
    with the same checks the scalar reader makes; a row failing any of them is left for it.
    """
    # key: int16 type, STRING group, STRING topic, int32 partition (at least 10 bytes)
    ks, klen = keys.start[rows], keys.length[rows]
    ok = keys.valid[rows] & (klen >= 10)
    head = keys.be(ks, ">i4", ok)
    record_type, group_len = head >> 16, head.astype(np.int16).astype(ks.dtype)
    ok &= (record_type >= 0) & (record_type <= 1) & (group_len >= 0)
    topic_pos = ks + 4 + group_len
    ok &= topic_pos + 2 <= ks + klen
    topic_len = keys.be(topic_pos, ">i2", ok)
    ok &= (topic_len >= 0) & (group_len + topic_len + 10 <= klen)
    partition = keys.be(topic_pos + 2 + topic_len, ">i4", ok)

    # value: int16 version, int64 offset, then per version: v0-v2 metadata length at 10;
    # v3 leader epoch at 10, length at 14; v4 leader epoch at 10, compact length byte at 14.
    # Bytes 0-7 and 8-15 (every value is at least 20 bytes) hold all of that.
    vs, vlen, has_value = values.start[rows], values.length[rows], values.valid[rows]
    vok = ok & has_value & (vlen >= 20)
    head, tail = values.be(vs, ">i8", vok), values.be(vs + 8, ">i8", vok)
    version = (head >> 48).astype(vs.dtype)
    vok &= (version >= 0) & (version <= 4)
    v4, v1 = version == 4, version == 1
    has_epoch = v4 | (version == 3)
    low = tail.astype(vs.dtype)  # bytes 12-15
    length_byte = (low >> 8) & 0xFF
    meta_len = np.where(v4, length_byte - 1,
                        np.where(has_epoch, low.astype(np.int16), (tail >> 32).astype(np.int16)))
    meta_at = np.where(v4, vs.dtype.type(15), np.where(has_epoch, vs.dtype.type(16), vs.dtype.type(12)))
    vok &= np.where(v4, (length_byte >= 1) & (length_byte < 0x80), meta_len >= 0)
    vok &= vlen >= meta_at + meta_len + np.where(v1, vs.dtype.type(16), vs.dtype.type(8)) + v4
    meta = vs + meta_at
    tags = meta + meta_len + 8
    with_tags = np.flatnonzero(vok & v4)
    tag_count = values.data[tags[with_tags]]
    if tag_count.any():  # 4.1+ writers: accept exactly one tag 0 of 16 bytes (the topic id)
        tagged = with_tags[tag_count != 0]
        fits = vlen[tagged] >= meta_at[tagged] + meta_len[tagged] + 8 + 19
        tagged, short = tagged[fits], tagged[~fits]
        lone = np.ones(tagged.size, bool)
        for step, expected in enumerate(_TOPIC_ID_TAG):
            lone &= values.data[tags[tagged] + step] == expected
        vok[tagged[~lone]] = False
        vok[short] = False
        found = tagged[lone]
        out.masks["topic_id"][rows.start + found] = True
        out.topic_id_at[rows.start + found] = tags[found] + len(_TOPIC_ID_TAG)

    masks, numeric = out.masks, out.numeric
    masks["done"][rows] = ok & (vok | ~has_value)
    masks["value"][rows] = vok
    masks["epoch"][rows] = vok & has_epoch
    numeric["record_type"][rows] = record_type
    numeric["partition"][rows] = partition
    numeric["value_version"][rows] = version
    numeric["offset"][rows] = ((head & 0xFFFFFFFFFFFF) << 16) | ((tail >> 48) & 0xFFFF)
    numeric["leader_epoch"][rows] = (tail >> 16).astype(np.int32)
    numeric["commit_timestamp"][rows] = values.be(tags - 8, ">i8", vok)
    expire_rows = np.flatnonzero(vok & v1)
    if expire_rows.size:
        start = rows.start
        masks["expire"][start + expire_rows] = True
        numeric["expire_timestamp"][start + expire_rows] = values.be(tags[expire_rows], ">i8")
    out.put_slice(rows, "group", ok, ks, ks + 4, group_len)
    out.put_slice(rows, "topic", ok, ks, topic_pos + 2, topic_len)
    out.put_slice(rows, "metadata", vok, vs, meta, meta_len)


def _fast_offsets(keys: _Column, values: _Column) -> tuple[_Fast, dict[str, pa.Array]]:
    """Run the vectorised path over all rows; return its results and its string columns."""
    n = len(keys.valid)
    out = _Fast(n, np.promote_types(keys.start.dtype, values.start.dtype).type)
    for lo in range(0, n, _CHUNK):
        _scan(keys, values, slice(lo, min(lo + _CHUNK, n)), out)
    every_other = _every_other(n)
    for tiling in out.tilings.values():
        tiling[-1] = tiling[-2] if n else 0
    strings = {
        name: _strings(column, mask, out.tilings[name], every_other)
        for name, column, mask in (("group", keys, out.done), ("topic", keys, out.done),
                                   ("metadata", values, out.masks["value"]))
    }
    return out, strings

# Reasons the vectorised checks settle: ``Triage.code`` holds index + 1 (0: nothing found wrong).
TRIAGE_REASONS = ("null_key", "truncated_key", "malformed_key", "unknown_record_type",
                  "truncated_value", "unknown_value_version", "malformed_value")
(_NULL_KEY, _TRUNCATED_KEY, _MALFORMED_KEY, _UNKNOWN_TYPE, _TRUNCATED_VALUE, _UNKNOWN_VERSION,
 _MALFORMED_VALUE) = range(1, 8)
_WIDTHS: dict[Any, int] = {INT8: 1, INT16: 2, UINT16: 2, INT32: 4, INT64: 8, UUID: 16}
# -> nullable
_LENGTH_PREFIXED: dict[Any, bool] = {STRING: False, NULLABLE_STRING: True, BYTES: False, NULLABLE_BYTES: True}
_MAX_STRING_LENGTH = 0x7FFF
_KEY_STRING, _KEY_INT32 = 1, 2
_KEY_KINDS: dict[Any, int] = {STRING: _KEY_STRING, INT32: _KEY_INT32}


def _key_fields() -> np.ndarray:
    """``[field index, record type]`` -> 0 (no such field), ``_KEY_STRING`` or ``_KEY_INT32``, from KEY_LAYOUTS.

    Keys are classic structs of strings and int32s whose first field is the group, which is
    all the vectorised key check reads; a layout outside that would need the scalar reader.
    """
    width = max(len(layout.struct.fields) for layout in KEY_LAYOUTS.values())
    table = np.zeros((width, max(KEY_LAYOUTS) + 1), np.int8)
    for record_type, layout in KEY_LAYOUTS.items():
        fields = layout.struct.fields
        if record_type < 0 or layout.flexible or layout.struct.tagged or fields[0].type is not STRING:
            raise AssertionError(f"key layout of type {record_type} is outside what triage reads")
        for i, field in enumerate(fields):
            table[i, record_type] = _KEY_KINDS[field.type]
    return table


def _value_versions() -> np.ndarray:
    """``[record type, version]`` -> whether VALUE_LAYOUTS has a layout for it."""
    table = np.zeros((max(KEY_LAYOUTS) + 1, max(max(v) for v in VALUE_LAYOUTS.values()) + 1), bool)
    for record_type, versions in VALUE_LAYOUTS.items():
        table[record_type, [v for v in versions if v >= 0]] = True
    return table


_KEY_FIELDS = _key_fields()
_VALUE_VERSIONS = _value_versions()


@dataclass
class Triage:
    """What the vectorised checks say about every row, before any per-record work.

    They are the first checks ``decode`` makes, made the same way, so where ``code`` is not 0
    the reason ``TRIAGE_REASONS[code - 1]`` is exactly the one ``decode`` gives. Where it is 0 the
    key reads and the value is null, or has a known version and its leading fields read (what
    follows them, from the first struct or non-empty array on, is left to the scalar reader).
    """

    typed: np.ndarray  # bool: the key has its 2-byte record type
    record_type: np.ndarray  # int16, meaningful where typed
    code: np.ndarray  # int8
    group: pa.Array  # the key's group where the key reads, else null

    def reasons(self, rows: np.ndarray) -> np.ndarray:
        """The reason of each of ``rows`` (object array, None where code is 0)."""
        return _REASON_OF_CODE[self.code[rows]]


_REASON_OF_CODE = np.array((None, *TRIAGE_REASONS), object)


def triage(keys: BinaryColumn, values: BinaryColumn) -> Triage:
    """Settle, vectorised, every row whose key or value version alone makes it undecodable."""
    return _triage(_view(_as_binary(keys)), _view(_as_binary(values)))


def _triage(keys: _Column, values: _Column) -> Triage:
    typed = keys.valid & (keys.length >= 2)
    record_type = keys.be(keys.start, ">i2", typed)
    code = np.where(keys.valid, np.where(typed, 0, _TRUNCATED_KEY), _NULL_KEY).astype(np.int8)
    known = typed & (record_type >= 0) & (record_type < _KEY_FIELDS.shape[1])
    table_type = np.where(known, record_type, 0)
    known &= _KEY_FIELDS[0, table_type] != 0
    code[typed & ~known] = _UNKNOWN_TYPE

    # the key's fields in order, as the reader takes them: a string's length, then its bytes
    end, pos, live = keys.start + keys.length, keys.start + 2, known
    group_start, group_len = pos, np.zeros_like(pos)
    for i, kinds in enumerate(_KEY_FIELDS):
        kind = kinds[table_type]
        ints, strings = live & (kind == _KEY_INT32), live & (kind == _KEY_STRING)
        has_length = strings & (pos + 2 <= end)
        length = keys.be(pos, ">i2", has_length)
        malformed = has_length & (length < 0)  # a null in a non-nullable string
        width = np.where(strings, 2 + np.where(has_length, length, 0), 4)
        truncated = (ints | strings) & ~malformed & (pos + width > end)
        code[truncated] = _TRUNCATED_KEY
        code[malformed] = _MALFORMED_KEY
        live = live & ~truncated & ~malformed
        if i == 0:
            group_start, group_len = pos + 2, length
        pos = np.where(live & (ints | strings), pos + width, pos)

    # the value: an int16 version the record type knows (a null value is a tombstone)
    has_version = live & values.valid
    short = has_version & (values.length < 2)
    code[short] = _TRUNCATED_VALUE
    has_version &= ~short
    version = values.be(values.start, ">i2", has_version)
    in_table = has_version & (version >= 0) & (version < _VALUE_VERSIONS.shape[1])
    known_version = in_table.copy()
    known_version[in_table] = _VALUE_VERSIONS[record_type[in_table], version[in_table]]
    code[has_version & ~known_version] = _UNKNOWN_VERSION
    body = np.flatnonzero(known_version)
    if body.size:
        pair = (record_type[body].astype(np.int64) << 16) | version[body].astype(np.int64)
        for value_type in np.unique(pair).tolist():
            layouts = VALUE_LAYOUTS[value_type >> 16][value_type & 0xFFFF]
            if len(layouts) == 1:  # several: the first that fits wins, which only the scalar reader decides
                rows = body[pair == value_type]
                code[rows] = _leading_fields(values, rows, layouts[0])

    n = len(code)
    tiling = np.zeros(2 * n + 1, keys.start.dtype)
    _tile(tiling, slice(0, n), np.where(live, group_start, keys.start), np.where(live, group_len, 0))
    tiling[-1] = tiling[-2] if n else 0
    group = _strings(keys, live, tiling, _every_other(n))
    return Triage(typed, record_type.astype(np.int16), code, group)


def _leading_fields(values: _Column, rows: np.ndarray, layout: Layout) -> np.ndarray:
    """Read ``layout``'s leading fields of the values at ``rows`` as the scalar reader would.

    Covers fixed-width fields, strings, bytes and array counts (an empty array is read past,
    a non-empty one ends the walk, as does a struct). Returns per row ``_TRUNCATED_VALUE``,
    ``_MALFORMED_VALUE`` or 0 (no failure in what was read).
    """
    out = np.zeros(rows.size, np.int8)
    pos, end = values.start[rows] + 2, values.start[rows] + values.length[rows]
    live = np.ones(rows.size, bool)
    for field in layout.struct.fields:
        kind = field.type
        if kind in _WIDTHS:
            short = live & (pos + _WIDTHS[kind] > end)
            out[short] = _TRUNCATED_VALUE
            live &= ~short
            pos = pos + _WIDTHS[kind]
            continue
        if kind not in _LENGTH_PREFIXED and not isinstance(kind, Array):
            break
        size: np.ndarray | int
        if layout.flexible:
            length, size, truncated, malformed = _varint(values.data, pos, end, live)
            length -= 1
        else:
            size = 2 if kind in (STRING, NULLABLE_STRING) else 4
            truncated, malformed = live & (pos + size > end), np.zeros(rows.size, bool)
            length = values.be(pos, ">i2" if size == 2 else ">i4", live & ~truncated).astype(np.int64)
        out[truncated] = _TRUNCATED_VALUE
        live &= ~truncated
        pos = pos + size
        nullable = kind.nullable if isinstance(kind, Array) else _LENGTH_PREFIXED[kind]
        malformed |= live & (length < 0) & (not nullable)
        if kind in (STRING, NULLABLE_STRING):
            malformed |= live & (length > _MAX_STRING_LENGTH)
        out[malformed] = _MALFORMED_VALUE
        live &= ~malformed
        short = live & (length > end - pos)  # a string's bytes, or more elements than bytes left
        out[short] = _TRUNCATED_VALUE
        live &= ~short
        if isinstance(kind, Array):
            live &= length <= 0  # elements follow: the rest is the scalar reader's
        else:
            pos = pos + np.maximum(length, 0)
        if not live.any():
            break
    return out


def _varint(data: np.ndarray, pos: np.ndarray, end: np.ndarray, live: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reader's unsigned varint at ``pos`` where ``live``: value (wrapped to signed 32 bits),
    its size, and where it runs past ``end`` (truncated) or past 5 bytes (malformed)."""
    value = np.zeros(pos.size, np.int64)
    size = np.zeros(pos.size, pos.dtype)
    truncated = np.zeros(pos.size, bool)
    going = live.copy()
    for i in range(5):
        short = going & (pos + i >= end)
        truncated |= short
        going &= ~short
        byte = np.zeros(pos.size, np.int64)
        byte[going] = data[pos[going] + i]
        value |= (byte & 0x7F) << (7 * i)
        size[going] = i + 1
        going &= (byte & 0x80) != 0
    value &= 0xFFFFFFFF
    return np.where(value & 0x80000000, value - (1 << 32), value), size, truncated, going


def _topic_ids(values: _Column, at: np.ndarray, present: np.ndarray) -> pa.Array:
    """The 16-byte topic ids at ``at`` where ``present`` (null elsewhere, and for Kafka's zero id,
    which means none), gathered vectorised and kept as bytes: the few distinct ids are turned into
    Kafka's text form by whoever reads them, after the commits are reduced."""
    n = len(present)
    rows = np.flatnonzero(present)
    if rows.size == 0:
        return pa.nulls(n, pa.binary(16))
    window = np.ndarray((values.data.size - 15,), "V16", values.data, 0, (1,))  # 16 bytes at any position
    raw = np.zeros((n, 16), np.uint8)
    raw[rows] = window[at[rows]].view(np.uint8).reshape(rows.size, 16)
    valid = np.zeros(n, bool)
    valid[rows] = raw[rows].any(axis=1)
    return pa.Array.from_buffers(pa.binary(16), n, [pa.py_buffer(np.packbits(valid, bitorder="little")),
                                                    pa.py_buffer(raw)])


def _every_other(n: int) -> pa.Array:
    """0, 2, 4, ... 2n-2: the indices ``_strings`` takes from a tiling of n rows."""
    return pa.array(np.arange(0, 2 * n, 2, dtype=np.int32 if n < 1 << 30 else np.int64))


def _slice(column: _Column, row: int) -> bytes | None:
    if not column.valid[row]:
        return None
    start = column.start[row]
    return column.data[start:start + column.length[row]].tobytes()


def _put_settled(fast: _Fast, present: dict[str, np.ndarray], strings: dict[str, pa.Array], checked: Triage,
                 rows: np.ndarray) -> None:
    """Fill the rows triage settled as ``row_of`` fills a ``DecodeError``: record type when the key
    had one, group when the key read (a value error), the reason; nothing else."""
    if rows.size == 0:
        return
    n = len(checked.code)
    for name in _NUMERIC_COLUMNS:
        present[name][rows] = False
    present["record_type"][rows] = checked.typed[rows]
    fast.numeric["record_type"][rows] = checked.record_type[rows]
    settled = np.zeros(n, bool)
    settled[rows] = True
    code = pa.array(np.where(settled, checked.code - 1, 0).astype(np.int8), mask=~settled)
    strings["error"] = pc.if_else(settled, pa.array(TRIAGE_REASONS).take(code), strings["error"])
    value_error = settled & (checked.code >= _TRUNCATED_VALUE)
    if value_error.any():
        strings["group"] = pc.if_else(value_error, checked.group, strings["group"])


def decode_batch(keys: BinaryColumn, values: BinaryColumn) -> pa.Table:
    """Decode aligned key/value columns into one row per record (columns: ``SCHEMA``).

    Agrees with :func:`decoders.decode` on every row: same record type, group, fields and error
    reason. Bad records never raise; only inputs that are not two equally long binary columns do.
    """
    key_array, value_array = _as_binary(keys), _as_binary(values)
    if len(key_array) != len(value_array):
        raise ValueError(f"keys and values differ in length: {len(key_array)} != {len(value_array)}")
    key_col, value_col = _view(key_array), _view(value_array)
    fast, strings = _fast_offsets(key_col, value_col)
    topic_ids = _topic_ids(value_col, fast.topic_id_at, fast.masks["topic_id"] & fast.masks["value"])
    strings["error"] = pa.nulls(len(key_array), pa.string())
    strings["member_id"] = pa.nulls(len(key_array), pa.string())

    present = fast.present()
    slow_rows = np.flatnonzero(~fast.done)
    if slow_rows.size:  # first what the vectorised checks settle, then the rest one by one
        checked = _triage(key_col, value_col)
        settled = slow_rows[checked.code[slow_rows] != 0]
        slow_rows = slow_rows[checked.code[slow_rows] == 0]
        _put_settled(fast, present, strings, checked, settled)
    if slow_rows.size:
        fallback = [row_of(decode(_slice(key_col, row), _slice(value_col, row)))
                    for row in slow_rows.tolist()]
        for name in _NUMERIC_COLUMNS:
            got = [row.get(name) for row in fallback]
            has = np.fromiter((value is not None for value in got), bool, len(got))
            fast.numeric[name][slow_rows[has]] = [value for value in got if value is not None]
            present[name][slow_rows] = has
        slow = np.zeros(len(key_array), bool)
        slow[slow_rows] = True
        mask = pa.array(slow)
        for name in _STRING_COLUMNS:
            strings[name] = pc.replace_with_mask(strings[name], mask,
                                                 pa.array([row.get(name) for row in fallback], pa.string()))
        topic_ids = pc.replace_with_mask(topic_ids, mask,
                                         pa.array([row.get("topic_id") for row in fallback], pa.binary(16)))

    columns: dict[str, pa.Array] = {
        name: pa.array(fast.numeric[name], mask=None if present[name].all() else ~present[name])
        for name in _NUMERIC_COLUMNS
    }
    columns.update(strings)
    columns["topic_id"] = topic_ids
    columns["is_tombstone"] = pa.array(~value_col.valid)
    return pa.table([columns[field.name] for field in SCHEMA], schema=SCHEMA)


def record_types(keys: BinaryColumn) -> np.ndarray:
    """Each key's int16 record type, vectorised; -1 where the key is null or shorter than 2 bytes.

    Lets a caller route rows by type before decoding anything (a type that no layout knows
    still comes back as its number; ``decode`` says what is wrong with it).
    """
    column = _view(_as_binary(keys))
    ok = column.valid & (column.length >= 2)
    return np.where(ok, column.be(column.start, ">i2", ok), -1).astype(np.int16)
