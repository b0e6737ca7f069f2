"""Which ``__consumer_offsets`` partition holds a group: Kafka's ``Utils.abs(groupId.hashCode()) % N``."""

from __future__ import annotations

from array import array
from sys import byteorder

_INT_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, wrapped to a signed 32-bit int."""
    units = array("H", text.encode("utf-16-le", "surrogatepass"))
    if byteorder == "big":
        units.byteswap()
    value = 0
    for unit in units:
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def coordinator_partition(group_id: str, partitions: int = 50) -> int:
    """The partition of ``__consumer_offsets`` (with ``partitions`` partitions) that owns ``group_id``.

    Kafka's ``Utils.abs`` maps Integer.MIN_VALUE to 0 (Math.abs would stay negative, a plain
    ``abs`` would give a different partition), so that case is kept exactly.
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    value = java_string_hash(group_id)
    return (0 if value == _INT_MIN else abs(value)) % partitions
