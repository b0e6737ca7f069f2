"""Decoders for Kafka's ``__consumer_offsets`` records.

``decode(key, value)`` turns one record into a :class:`Record` (or a :class:`DecodeError` that
keeps the bytes); ``decoders.batch.decode_batch`` does the same for Arrow columns, vectorised
for offset commits; ``coordinator_partition`` says which partition owns a group.
"""

from decoders.core import decode
from decoders.partition import coordinator_partition
from decoders.records import DecodeError, Record, Struct

__all__ = ["DecodeError", "Record", "Struct", "coordinator_partition", "decode"]
