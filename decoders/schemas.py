"""Every ``__consumer_offsets`` layout, declared once as data.

Each key body, value body and embedded consumer-protocol payload is a :class:`StructType`: an
ordered tuple of ``(field name, type)`` plus the struct's tagged fields. A :class:`Layout` adds
how the struct is encoded (flexible or classic, whether the body must be consumed exactly). The
generic reader in :mod:`decoders.reader` interprets these; the test encoder writes with them.

Field names are the ones Kafka's JSON converters print (the schema name with a lower-case first
letter), so a decoded record compares field by field with Kafka's own tools. Layouts follow the
generated message classes of Kafka 4.3; for the share/streams records whose schemas changed
incompatibly every known layout is listed, newest first (types 9 and 18, which 4.3 no longer
knows, from 3.9's classes and the format doc). decoders/NOTES.md lists where that departs from
the doc.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decoders.records import Struct


@dataclass(frozen=True, slots=True)
class Primitive:
    """A scalar wire type; in a flexible struct strings and bytes switch to compact encodings."""

    name: str

    def __repr__(self) -> str:
        return self.name


INT8 = Primitive("int8")
INT16 = Primitive("int16")
UINT16 = Primitive("uint16")
INT32 = Primitive("int32")
INT64 = Primitive("int64")
UUID = Primitive("uuid")
STRING = Primitive("string")
NULLABLE_STRING = Primitive("nullable_string")
BYTES = Primitive("bytes")
NULLABLE_BYTES = Primitive("nullable_bytes")


@dataclass(frozen=True, slots=True)
class Array:
    """An array (classic: int32 count; flexible: unsigned varint count + 1)."""

    element: FieldType
    nullable: bool = False


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: FieldType


@dataclass(frozen=True, slots=True)
class TaggedField:
    """A field that lives only in the struct's tagged section; absent means ``default``."""

    tag: int
    name: str
    type: FieldType
    default: Any = None


@dataclass(frozen=True, slots=True)
class StructType:
    fields: tuple[Field, ...]
    tagged: tuple[TaggedField, ...] = ()


@dataclass(frozen=True, slots=True)
class NullableStruct:
    """A struct that may be null: int8 marker when positional, varint marker when tagged."""

    struct: StructType


FieldType = Primitive | Array | StructType | NullableStruct


@dataclass(frozen=True, slots=True)
class Layout:
    """How one (record type, version) body is encoded.

    ``exact`` layouts must consume the whole body: used for the share/streams schemas that changed
    incompatibly, where leftover bytes mean "this is another layout", not "a newer writer".
    ``label`` names the Kafka line a layout variant comes from, for error details.
    """

    struct: StructType
    flexible: bool = False
    exact: bool = False
    label: str = ""


def struct(*fields: tuple[str, FieldType], tagged: tuple[TaggedField, ...] = ()) -> StructType:
    """Shorthand: ``struct(("offset", INT64), ("metadata", STRING))``."""
    return StructType(tuple(Field(name, type_) for name, type_ in fields), tagged)


ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's text form of the all-zero "no id" uuid
# Kafka's generated classes start a tagged nullable array at an empty list and a tagged nullable
# struct at a struct of defaults (whatever the schema's "default": null says); they neither write
# nor print the tag while it holds that, and print an explicit null as null. So the effective
# default of such a tag is the empty array / the all-defaults struct, not null.
EMPTY_ARRAY: tuple[()] = ()

# --- keys (never flexible) ---------------------------------------------------------------------

_OFFSET_KEY = struct(("group", STRING), ("topic", STRING), ("partition", INT32))
_GROUP_KEY = struct(("groupId", STRING))
_MEMBER_KEY = struct(("groupId", STRING), ("memberId", STRING))

_KEY_STRUCTS: dict[int, StructType] = {
    0: _OFFSET_KEY,
    1: _OFFSET_KEY,
    2: struct(("group", STRING)),
    3: _GROUP_KEY,
    4: _GROUP_KEY,
    5: _MEMBER_KEY,
    6: _GROUP_KEY,
    7: _MEMBER_KEY,
    8: _MEMBER_KEY,
    9: _GROUP_KEY,
    10: _MEMBER_KEY,
    11: _GROUP_KEY,
    12: _GROUP_KEY,
    13: _MEMBER_KEY,
    14: _MEMBER_KEY,
    15: _GROUP_KEY,
    16: struct(("groupId", STRING), ("regularExpression", STRING)),
    17: _GROUP_KEY,
    18: _GROUP_KEY,
    19: _MEMBER_KEY,
    20: _GROUP_KEY,
    21: _MEMBER_KEY,
    22: _MEMBER_KEY,
    23: _GROUP_KEY,
}
KEY_LAYOUTS: dict[int, Layout] = {record_type: Layout(key) for record_type, key in _KEY_STRUCTS.items()}

# --- offset commits (types 0 and 1) ------------------------------------------------------------

_OFFSET_V0 = struct(("offset", INT64), ("metadata", STRING), ("commitTimestamp", INT64))
_OFFSET_VALUES: dict[int, tuple[Layout, ...]] = {
    0: (Layout(_OFFSET_V0),),
    1: (Layout(struct(("offset", INT64), ("metadata", STRING), ("commitTimestamp", INT64),
                      ("expireTimestamp", INT64))),),
    2: (Layout(_OFFSET_V0),),
    3: (Layout(struct(("offset", INT64), ("leaderEpoch", INT32), ("metadata", STRING),
                      ("commitTimestamp", INT64))),),
    4: (Layout(struct(("offset", INT64), ("leaderEpoch", INT32), ("metadata", STRING),
                      ("commitTimestamp", INT64),
                      tagged=(TaggedField(0, "topicId", UUID, ZERO_UUID),)), flexible=True),),
}

# --- classic group metadata (type 2) -----------------------------------------------------------


def _member(version: int) -> StructType:
    fields: list[tuple[str, FieldType]] = [("memberId", STRING)]
    if version >= 3:
        fields.append(("groupInstanceId", NULLABLE_STRING))
    fields += [("clientId", STRING), ("clientHost", STRING)]
    if version >= 1:
        fields.append(("rebalanceTimeout", INT32))
    fields += [("sessionTimeout", INT32), ("subscription", BYTES), ("assignment", BYTES)]
    return struct(*fields)


def _group_value(version: int) -> Layout:
    fields: list[tuple[str, FieldType]] = [
        ("protocolType", STRING), ("generation", INT32),
        ("protocol", NULLABLE_STRING), ("leader", NULLABLE_STRING),
    ]
    if version >= 2:
        fields.append(("currentStateTimestamp", INT64))
    fields.append(("members", Array(_member(version))))
    return Layout(struct(*fields), flexible=version >= 4)


_GROUP_VALUES: dict[int, tuple[Layout, ...]] = {version: (_group_value(version),) for version in range(5)}

# --- KIP-848 consumer groups (types 3-8, 16) ---------------------------------------------------

_TOPIC_PARTITIONS = struct(("topicId", UUID), ("partitions", Array(INT32)))
_TOPIC_PARTITIONS_WITH_EPOCHS = struct(
    ("topicId", UUID), ("partitions", Array(INT32)),
    tagged=(TaggedField(0, "assignmentEpochs", Array(INT32, nullable=True), EMPTY_ARRAY),),
)
_TOPIC_METADATA = struct(
    ("topicId", UUID), ("topicName", STRING), ("numPartitions", INT32),
    ("partitionMetadata", Array(struct(("partition", INT32), ("racks", Array(STRING))))),
)
_CLASSIC_MEMBER_METADATA = struct(
    ("sessionTimeoutMs", INT32),
    ("supportedProtocols", Array(struct(("name", STRING), ("metadata", BYTES)))),
)
_ASSIGNMENT_TIMESTAMP = TaggedField(0, "assignmentTimestamp", INT64, 0)


def _flexible(*fields: tuple[str, FieldType], tagged: tuple[TaggedField, ...] = (),
              exact: bool = False, label: str = "") -> tuple[Layout, ...]:
    return (Layout(struct(*fields, tagged=tagged), flexible=True, exact=exact, label=label),)


_CONSUMER_GROUP_VALUES: dict[int, dict[int, tuple[Layout, ...]]] = {
    3: {0: _flexible(("epoch", INT32), tagged=(TaggedField(0, "metadataHash", INT64, 0),))},
    4: {0: _flexible(("topics", Array(_TOPIC_METADATA)))},
    5: {0: _flexible(
        ("instanceId", NULLABLE_STRING), ("rackId", NULLABLE_STRING),
        ("clientId", STRING), ("clientHost", STRING),
        ("subscribedTopicNames", Array(STRING)), ("subscribedTopicRegex", NULLABLE_STRING),
        ("rebalanceTimeoutMs", INT32), ("serverAssignor", NULLABLE_STRING),
        tagged=(TaggedField(0, "classicMemberMetadata", NullableStruct(_CLASSIC_MEMBER_METADATA),
                            Struct(sessionTimeoutMs=0, supportedProtocols=EMPTY_ARRAY)),),
    )},
    6: {0: _flexible(("assignmentEpoch", INT32), tagged=(_ASSIGNMENT_TIMESTAMP,))},
    7: {0: _flexible(("topicPartitions", Array(_TOPIC_PARTITIONS)))},
    8: {0: _flexible(
        ("memberEpoch", INT32), ("previousMemberEpoch", INT32), ("state", INT8),
        ("assignedPartitions", Array(_TOPIC_PARTITIONS_WITH_EPOCHS)),
        ("partitionsPendingRevocation", Array(_TOPIC_PARTITIONS_WITH_EPOCHS)),
    )},
    16: {0: _flexible(("topics", Array(STRING)), ("version", INT64), ("timestamp", INT64))},
}

# --- share groups (types 9-15): best-known layouts, newest first, consumed exactly -------------

_TOPIC_PARTITIONS_INFO = struct(("topicId", UUID), ("topicName", STRING), ("partitions", Array(INT32)))
_TOPIC_INFO = struct(("topicId", UUID), ("topicName", STRING))

_SHARE_GROUP_VALUES: dict[int, dict[int, tuple[Layout, ...]]] = {
    9: {0: (
        Layout(struct(("topics", Array(_TOPIC_METADATA))), flexible=True, exact=True, label="4.0"),
        Layout(struct(("initializedTopics", Array(_TOPIC_PARTITIONS_INFO)),
                      ("deletingTopics", Array(_TOPIC_INFO))), flexible=True, exact=True, label="3.9"),
    )},
    10: {0: _flexible(("rackId", NULLABLE_STRING), ("clientId", STRING), ("clientHost", STRING),
                      ("subscribedTopicNames", Array(STRING)), exact=True)},
    11: {0: (
        Layout(struct(("epoch", INT32), ("metadataHash", INT64)), flexible=True, exact=True, label="4.1+"),
        Layout(struct(("epoch", INT32)), flexible=True, exact=True, label="4.0"),
    )},
    12: {0: _flexible(("assignmentEpoch", INT32), tagged=(_ASSIGNMENT_TIMESTAMP,), exact=True)},
    13: {0: _flexible(("topicPartitions", Array(_TOPIC_PARTITIONS)), exact=True)},
    14: {0: _flexible(("memberEpoch", INT32), ("previousMemberEpoch", INT32), ("state", INT8),
                      ("assignedPartitions", Array(_TOPIC_PARTITIONS)), exact=True)},
    15: {0: (
        Layout(struct(("initializingTopics", Array(_TOPIC_PARTITIONS_INFO)),
                      ("initializedTopics", Array(_TOPIC_PARTITIONS_INFO)),
                      ("deletingTopics", Array(_TOPIC_INFO))), flexible=True, exact=True, label="4.1+"),
        Layout(struct(("initializedTopics", Array(_TOPIC_PARTITIONS_INFO)),
                      ("deletingTopics", Array(_TOPIC_INFO))), flexible=True, exact=True, label="4.0"),
    )},
}

# --- streams groups (types 17-23): best-known layouts, newest first, consumed exactly ----------

_KEY_VALUE = struct(("key", STRING), ("value", STRING))
_TASK_IDS = struct(("subtopologyId", STRING), ("partitions", Array(INT32)))
_TASK_IDS_WITH_EPOCHS = struct(
    ("subtopologyId", STRING), ("partitions", Array(INT32)),
    tagged=(TaggedField(0, "assignmentEpochs", Array(INT32, nullable=True), EMPTY_ARRAY),),
)
_TOPIC_INFO_STREAMS = struct(("name", STRING), ("partitions", INT32), ("replicationFactor", INT16),
                             ("topicConfigs", Array(_KEY_VALUE)))
_VALIDATED_TOPOLOGY_EPOCH = TaggedField(0, "validatedTopologyEpoch", INT32, -1)

_STREAMS_GROUP_VALUES: dict[int, dict[int, tuple[Layout, ...]]] = {
    17: {0: (
        Layout(struct(("epoch", INT32), ("metadataHash", INT64),
                      tagged=(_VALIDATED_TOPOLOGY_EPOCH,
                              TaggedField(1, "lastAssignmentConfigs", Array(_KEY_VALUE, nullable=True),
                                          EMPTY_ARRAY))),
               flexible=True, exact=True, label="4.3"),
        Layout(struct(("epoch", INT32), ("metadataHash", INT64), ("assignmentConfigs", Array(_KEY_VALUE)),
                      tagged=(_VALIDATED_TOPOLOGY_EPOCH,)),
               flexible=True, exact=True, label="4.1"),
        Layout(struct(("epoch", INT32)), flexible=True, exact=True, label="4.1 development"),
    )},
    18: {0: _flexible(("topics", Array(_TOPIC_METADATA)), exact=True)},
    19: {0: _flexible(
        ("instanceId", NULLABLE_STRING), ("rackId", NULLABLE_STRING),
        ("clientId", STRING), ("clientHost", STRING),
        ("rebalanceTimeoutMs", INT32), ("topologyEpoch", INT32), ("processId", STRING),
        ("userEndpoint", NullableStruct(struct(("host", STRING), ("port", UINT16)))),
        ("clientTags", Array(_KEY_VALUE)), exact=True,
    )},
    20: {0: _flexible(("assignmentEpoch", INT32), tagged=(_ASSIGNMENT_TIMESTAMP,), exact=True)},
    21: {0: _flexible(("activeTasks", Array(_TASK_IDS)), ("standbyTasks", Array(_TASK_IDS)),
                      ("warmupTasks", Array(_TASK_IDS)), exact=True)},
    22: {0: _flexible(
        ("memberEpoch", INT32), ("previousMemberEpoch", INT32), ("state", INT8),
        *((name, Array(_TASK_IDS_WITH_EPOCHS)) for name in (
            "activeTasks", "standbyTasks", "warmupTasks", "activeTasksPendingRevocation",
            "standbyTasksPendingRevocation", "warmupTasksPendingRevocation")),
        exact=True,
    )},
    23: {0: _flexible(
        ("epoch", INT32),
        ("subtopologies", Array(struct(
            ("subtopologyId", STRING), ("sourceTopics", Array(STRING)), ("sourceTopicRegex", Array(STRING)),
            ("stateChangelogTopics", Array(_TOPIC_INFO_STREAMS)), ("repartitionSinkTopics", Array(STRING)),
            ("repartitionSourceTopics", Array(_TOPIC_INFO_STREAMS)),
            ("copartitionGroups", Array(struct(
                ("sourceTopics", Array(INT16)), ("sourceTopicRegex", Array(INT16)),
                ("repartitionSourceTopics", Array(INT16))))),
        ))),
        exact=True,
    )},
}

# (record type) -> (value version) -> candidate layouts, tried in order
VALUE_LAYOUTS: dict[int, dict[int, tuple[Layout, ...]]] = {
    0: _OFFSET_VALUES,
    1: _OFFSET_VALUES,
    2: _GROUP_VALUES,
    **_CONSUMER_GROUP_VALUES,
    **_SHARE_GROUP_VALUES,
    **_STREAMS_GROUP_VALUES,
}

# --- embedded consumer-protocol payloads (never flexible; versions above 3 read as v3) ----------

_TOPIC_PARTITION_LIST = Array(struct(("topic", STRING), ("partitions", Array(INT32))))


def _subscription(version: int) -> Layout:
    fields: list[tuple[str, FieldType]] = [("topics", Array(STRING)), ("userData", NULLABLE_BYTES)]
    if version >= 1:
        fields.append(("ownedPartitions", _TOPIC_PARTITION_LIST))
    if version >= 2:
        fields.append(("generationId", INT32))
    if version >= 3:
        fields.append(("rackId", NULLABLE_STRING))
    return Layout(struct(*fields))


SUBSCRIPTION_LAYOUTS: dict[int, Layout] = {version: _subscription(version) for version in range(4)}
_ASSIGNMENT = Layout(struct(("assignedPartitions", _TOPIC_PARTITION_LIST), ("userData", NULLABLE_BYTES)))
ASSIGNMENT_LAYOUTS: dict[int, Layout] = dict.fromkeys(range(4), _ASSIGNMENT)
CONSUMER_PROTOCOL_MAX_VERSION = 3

# Assignor user data inside a subscription's userData (no version prefix).
STICKY_USER_DATA_LAYOUTS: tuple[Layout, ...] = (  # v1 first, then the v0 fallback
    Layout(struct(("previousAssignment", _TOPIC_PARTITION_LIST), ("generation", INT32)), label="v1"),
    Layout(struct(("previousAssignment", _TOPIC_PARTITION_LIST)), label="v0"),
)
COOPERATIVE_STICKY_USER_DATA = Layout(struct(("generation", INT32)))
