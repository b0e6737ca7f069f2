"""Embedded consumer-protocol payloads of classic group members (``protocolType == "consumer"``).

The coordinator stores each member's subscription and assignment as opaque bytes; only consumer
groups use the consumer protocol inside them. A payload that does not parse never fails the
record: the member keeps its raw bytes and gets a ``payloadError`` note, as Kafka's dump tool
keeps the raw bytes in that case.
"""

from __future__ import annotations

from typing import Any

from decoders.compiled import read_layout
from decoders.reader import ReadError, read_int16
from decoders.records import Struct
from decoders.schemas import (
    ASSIGNMENT_LAYOUTS,
    CONSUMER_PROTOCOL_MAX_VERSION,
    COOPERATIVE_STICKY_USER_DATA,
    STICKY_USER_DATA_LAYOUTS,
    SUBSCRIPTION_LAYOUTS,
    Layout,
)

CONSUMER_PROTOCOL_TYPE = "consumer"


def _versioned(data: bytes, layouts: dict[int, Layout]) -> dict[str, Any]:
    """Read a version-prefixed payload; versions above the highest known parse with that layout."""
    version = read_int16(data)
    if version < 0:
        raise ReadError("malformed", f"negative version {version}")
    body, _ = read_layout(data, 2, layouts[min(version, CONSUMER_PROTOCOL_MAX_VERSION)])
    fields = {"version": version}
    fields.update(body._fields)
    return fields


def _sticky_user_data(user_data: bytes) -> Struct | None:
    """The ``sticky`` assignor's previous assignment: layout v1, else v0, else nothing (as Kafka)."""
    for layout in STICKY_USER_DATA_LAYOUTS:
        try:
            body, _ = read_layout(user_data, 0, layout)
        except ReadError:
            continue
        return Struct(previousAssignment=body["previousAssignment"], generation=body.get("generation"))
    return None


def decode_subscription(data: bytes, protocol: str | None) -> Struct:
    """Decode a subscription; add the assignor's user data when ``protocol`` names a known one."""
    fields = _versioned(data, SUBSCRIPTION_LAYOUTS)
    user_data = fields["userData"]
    if user_data is not None:
        if protocol == "sticky":
            sticky = _sticky_user_data(user_data)
            if sticky is not None:
                fields["stickyUserData"] = sticky
        elif protocol == "cooperative-sticky":
            try:
                body, _ = read_layout(user_data, 0, COOPERATIVE_STICKY_USER_DATA)
            except ReadError:
                pass  # unreadable user data is ignored, as the assignor itself does
            else:
                fields["cooperativeStickyGeneration"] = body["generation"]
    return Struct.wrap(fields)


def decode_assignment(data: bytes) -> Struct:
    return Struct.wrap(_versioned(data, ASSIGNMENT_LAYOUTS))


def with_decoded_members(value: Struct) -> Struct:
    """Return a group-metadata value whose members carry their decoded payloads.

    Every member gains ``decodedSubscription``, ``decodedAssignment`` (Struct or None) and
    ``payloadError`` (str or None); the raw ``subscription``/``assignment`` bytes stay as they are.
    An empty payload (e.g. the zero-length assignment of a member the leader assigned nothing)
    is simply absent, not an error.
    """
    is_consumer = value["protocolType"] == CONSUMER_PROTOCOL_TYPE
    protocol = value["protocol"]
    members = []
    for member in value["members"]:
        decoded: dict[str, Any] = dict(member._fields)
        decoded["decodedSubscription"] = decoded["decodedAssignment"] = None
        errors = []
        if is_consumer:
            for name in ("subscription", "assignment"):
                payload = member[name]
                if not payload:
                    continue
                try:
                    decoded_payload = (decode_subscription(payload, protocol) if name == "subscription"
                                       else decode_assignment(payload))
                except ReadError as exc:
                    errors.append(f"{name}: {exc}")
                else:
                    decoded["decoded" + name.capitalize()] = decoded_payload
        decoded["payloadError"] = "; ".join(errors) or None
        members.append(Struct.wrap(decoded))
    fields = dict(value._fields)
    fields["members"] = tuple(members)
    return Struct.wrap(fields)
