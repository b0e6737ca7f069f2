"""Free memory the C allocator keeps goes back to the system after a full collection of the driver's garbage."""

from __future__ import annotations

import os

import pytest

from streaming.driver import malloc, sink
from streaming.driver.sink import young_garbage_only

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
    del held
    freed = rss()
    assert malloc.release_free_memory()
    assert freed - rss() > 30 * MIB
    assert len(top) == 100_000


def test_only_a_full_collection_releases_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(sink, "release_free_memory", lambda: calls.append(True) or True)
    with young_garbage_only():
        pass
    assert calls == []
    with young_garbage_only(full=True):
        pass
    assert calls == [True]
