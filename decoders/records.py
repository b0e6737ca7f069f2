"""Immutable typed values the decoder returns: a decoded record, or a decode error.

Field names are Kafka's own (the lower-camel names its JSON formatters print), so a
record read here and a record printed by Kafka's tools can be compared field by field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class RecordType(IntEnum):
    """Record type numbers (the int16 key prefix); ``.kafka_name`` is Kafka's key schema name."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    STREAMS_GROUP_METADATA = 17
    STREAMS_GROUP_PARTITION_METADATA = 18
    STREAMS_GROUP_MEMBER_METADATA = 19
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
    STREAMS_GROUP_TOPOLOGY = 23

    @property
    def kafka_name(self) -> str:
        """Kafka's name for the key schema, e.g. ``OffsetCommit``."""
        return "".join(word.capitalize() for word in self.name.split("_"))


RECORD_TYPE_NAMES: dict[int, str] = {t.value: t.kafka_name for t in RecordType}

OFFSET_COMMIT_TYPES = frozenset({RecordType.LEGACY_OFFSET_COMMIT, RecordType.OFFSET_COMMIT})
GROUP_METADATA_TYPE = RecordType.GROUP_METADATA
CONSUMER_GROUP_TYPES = frozenset({RecordType(t) for t in (3, 4, 5, 6, 7, 8, 16)})
SHARE_GROUP_TYPES = frozenset(RecordType(t) for t in range(9, 16))
STREAMS_GROUP_TYPES = frozenset(RecordType(t) for t in range(17, 24))
# What the group stage folds: classic group metadata, the KIP-848 consumer-group records, and the
# share- and streams-group records (their type, epochs and members).
GROUP_STATE_TYPES = frozenset({GROUP_METADATA_TYPE, *CONSUMER_GROUP_TYPES, *SHARE_GROUP_TYPES, *STREAMS_GROUP_TYPES})


class Struct(Mapping[str, Any]):
    """A read-only struct: fields by key (``s["memberId"]``) or attribute (``s.memberId``).

    Nested structs are Structs and arrays are tuples, so a whole record is immutable
    and hashable.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(fields or {})
        merged.update(kwargs)
        object.__setattr__(self, "_fields", merged)

    @classmethod
    def wrap(cls, fields: dict[str, Any]) -> Struct:
        """A Struct over ``fields`` itself, not a copy (for a dict its maker hands over)."""
        made = object.__new__(cls)
        object.__setattr__(made, "_fields", fields)
        return made

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Struct is immutable")

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __hash__(self) -> int:
        return hash(tuple(self._fields.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Struct):
            return self._fields == other._fields
        if isinstance(other, Mapping):
            return self._fields == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        return f"Struct({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Struct, (self._fields,))


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded ``__consumer_offsets`` record.

    ``value`` is None for a tombstone (then ``version`` is None too).
    """

    record_type: int
    key: Struct
    version: int | None
    value: Struct | None

    @property
    def type_name(self) -> str:
        return RECORD_TYPE_NAMES.get(self.record_type, f"Unknown{self.record_type}")

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    @property
    def group(self) -> str:
        """The group id, whatever the key schema calls it (``group`` or ``groupId``)."""
        return self.key["group"] if "group" in self.key else self.key["groupId"]


@dataclass(frozen=True, slots=True)
class DecodeError:
    """A record that could not be decoded, with its bytes kept intact.

    ``reason`` is a short stable code (bounded set, used as a metric label):
    ``null_key``, ``truncated_key``, ``unknown_record_type``, ``unknown_value_version``,
    ``truncated_value``, ``malformed_key``, ``malformed_value``. ``detail`` says what
    exactly was wrong. ``record_type`` and ``group`` are filled in when the key was
    readable, so callers can still route the error to its group.
    """

    reason: str
    detail: str
    key: bytes | None
    value: bytes | None
    record_type: int | None = None
    group: str | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
