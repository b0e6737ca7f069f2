"""Free memory the allocators keep goes back to the system after a full collection or a large batch."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from streaming.driver import malloc, sink
from tests.support.stage_records import commit, kafka_batch
from tests.unit.decode.test_stage import run_task
from tests.unit.driver.test_sink import make_sink

MIB = 1 << 20


def rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))


@pytest.mark.skipif(malloc._TRIM is None, reason="not glibc: no malloc_trim")
def test_memory_freed_below_a_live_buffer_is_resident_until_released() -> None:
    # 100 KB buffers come from malloc's heap (below its 128 KB mmap threshold); the last one allocated keeps the
    # heap's top in use, so free() alone cannot shrink it.
    held = [os.urandom(100_000) for _ in range(600)]
    top = os.urandom(100_000)
    heap = malloc.malloc_heap_bytes()
    del held
    freed, kept = rss(), malloc.malloc_heap_bytes()
    assert malloc.release_free_memory()
    assert freed - rss() > 30 * MIB
    assert len(top) == 100_000
    if heap is not None and kept is not None:  # glibc 2.33+: the freed buffers counted free and kept, not in use
        assert heap[0] - kept[0] > 50 * MIB and kept[1] - heap[1] > 50 * MIB


class FreshFrame:
    """What foreachBatch hands the sink, as far as the sink uses it: a new table at each collect, as Spark's."""

    def toArrow(self) -> pa.Table:  # PySpark's name
        return run_task(kafka_batch([commit("g", "t", p, 10 + p) for p in range(50)], first_offset=0,
                                    time_ms=1_700_000_000_000))


def test_a_large_batch_and_a_full_collection_release_free_memory_once_the_batch_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live_at_release: list[int] = []
    monkeypatch.setattr(sink, "release_free_memory", lambda: live_at_release.append(pa.total_allocated_bytes()) or True)
    batch_sink, frame = make_sink(tmp_path), FreshFrame()
    size = frame.toArrow().nbytes
    monkeypatch.setattr(sink, "RELEASE_AFTER_BYTES", size + 1)
    batch_sink(frame, 0)
    assert live_at_release == []  # a small batch, no full collection: nothing to give back
    monkeypatch.setattr(sink, "RELEASE_AFTER_BYTES", size)
    before = pa.total_allocated_bytes()
    batch_sink(frame, 1)
    assert len(live_at_release) == 1
    assert live_at_release[0] <= before  # the batch's buffers were freed first: they are what is given back
    monkeypatch.setattr(sink, "RELEASE_AFTER_BYTES", size + 1)
    monkeypatch.setattr(sink, "FULL_COLLECTION_BATCHES", batch_sink._batches + 1)
    batch_sink(frame, 2)
    assert len(live_at_release) == 2  # the full collection's
