"""Offset-commit decoding throughput: ``decode_batch`` against a plain per-record baseline.

Builds N realistic offset-commit records (value v3 as written by 2.1-4.0 brokers, v4 as written
by 4.1+, some with the topic-id tag), decodes them with a straightforward ``struct``-based
per-record decoder and then with ``decode_batch`` on the same data in the same process, and
prints records/s for both. The baseline gets Python ``bytes`` (its natural input); decode_batch
gets the Arrow columns Spark hands over. Run: ``python -m benchmarks.decode_bench [N]``.
"""

from __future__ import annotations

import random
import struct
import sys
import time
from collections.abc import Callable

import pyarrow as pa

from decoders.batch import decode_batch

_TEAMS = ["payments", "orders", "inventory", "search", "billing", "fraud", "shipping", "analytics"]
_ROLES = ["consumer", "processor", "indexer", "sink", "enricher"]
_DOMAINS = ["orders", "payments", "clicks", "users", "inventory", "audit", "telemetry"]


def _key(group: bytes, topic: bytes, partition: int) -> bytes:
    return struct.pack(f">hh{len(group)}sh{len(topic)}si", 1, len(group), group, len(topic), topic, partition)


def _value(rng: random.Random, offset: int, timestamp: int) -> bytes:
    epoch = rng.choice((-1, rng.randrange(0, 40)))
    kind = rng.random()
    if kind < 0.5:  # v3: classic int16-length metadata
        return struct.pack(">hqihq", 3, offset, epoch, 0, timestamp)
    tags = b"\x00" if kind < 0.8 else b"\x01\x00\x10" + rng.randbytes(16)  # v4, maybe with topic id
    return struct.pack(">hqiBq", 4, offset, epoch, 1, timestamp) + tags


def build(n: int, seed: int = 7) -> tuple[list[bytes], list[bytes | None]]:
    """N offset-commit records over a realistic set of groups, topics and partitions."""
    rng = random.Random(seed)
    groups = [f"{rng.choice(_TEAMS)}-{rng.choice(_ROLES)}-{i}".encode() for i in range(400)]
    topics = [f"{rng.choice(_DOMAINS)}.events.v{rng.randrange(1, 4)}-{i}".encode() for i in range(150)]
    keys, values = [], []
    now = 1_758_335_260_726
    for _ in range(n):
        keys.append(_key(rng.choice(groups), rng.choice(topics), rng.randrange(64)))
        values.append(None if rng.random() < 0.01 else _value(rng, rng.randrange(1 << 40), now))
    return keys, values


def baseline(keys: list[bytes], values: list[bytes | None]) -> list[tuple]:
    """A straightforward per-record decoder (what one writes first): struct.unpack_from per field."""
    unpack = struct.unpack_from
    rows: list[tuple] = []
    for key, value in zip(keys, values, strict=True):
        record_type, group_len = unpack(">hh", key)
        group = key[4:4 + group_len].decode()
        pos = 4 + group_len
        (topic_len,) = unpack(">h", key, pos)
        topic = key[pos + 2:pos + 2 + topic_len].decode()
        (partition,) = unpack(">i", key, pos + 2 + topic_len)
        if value is None:
            rows.append((record_type, group, topic, partition, None, None, None, None))
            continue
        version, offset = unpack(">hq", value)
        if version == 3:
            epoch, meta_len = unpack(">ih", value, 10)
            meta_pos = 16
        else:
            (epoch,) = unpack(">i", value, 10)
            meta_len, meta_pos = value[14] - 1, 15
        metadata = value[meta_pos:meta_pos + meta_len].decode()
        (timestamp,) = unpack(">q", value, meta_pos + meta_len)
        rows.append((record_type, group, topic, partition, offset, epoch, metadata, timestamp))
    return rows


def _best_of(runs: int, func: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def main(n: int = 1_000_000) -> None:
    keys, values = build(n)
    key_array, value_array = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    table = decode_batch(key_array, value_array)
    assert table.num_rows == n and table["error"].null_count == n, "benchmark data must decode cleanly"
    base = _best_of(3, lambda: baseline(keys, values))
    fast = _best_of(3, lambda: decode_batch(key_array, value_array))
    print(f"records: {n:,} offset commits (v3/v4 mix, 1% tombstones)")
    print(f"baseline (per-record struct): {n / base:>12,.0f} records/s  ({base:.3f} s)")
    print(f"decode_batch (vectorised):    {n / fast:>12,.0f} records/s  ({fast:.3f} s)")
    print(f"speed-up: {base / fast:.1f}x (target >= 5x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
