"""Giving the allocators' free memory back to the system, after a full collection or a large batch.

glibc's malloc keeps what an arena freed for that arena's next allocations. The driver has a dozen
threads allocating and freeing buffers: py4j's callbacks, the pollers, the HTTP server. In the churn
soak, that kept free memory grew by about 0.4 MiB a minute while the memory in use stayed flat
(docs/reliability.md). ``malloc_trim(0)`` returns the free pages of every arena. It is absent outside
glibc, where that part does nothing.

Arrow's pool (mimalloc in pyarrow's wheels) keeps the pages of the buffers it freed, for the next
buffers: after a backlog's first batch, the collected table's size (some 270 MiB at 100,000 groups)
stayed resident for as long as the job ran, while the state's Python objects never reuse it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pyarrow as pa


def _libc(name: str) -> Any:
    """A function of the C library the process runs on; None where it has no such function (not glibc)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_TRIM = _libc("malloc_trim")
if _TRIM is not None:
    _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
_MALLINFO2 = _libc("mallinfo2")  # glibc 2.33+
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _MallInfo2


def malloc_heap_bytes() -> tuple[int, int] | None:
    """Bytes glibc's malloc holds for the process, all arenas: in use (Arrow's and the extensions'
    allocations, Python objects too large for its own allocator), and free but kept (what
    :func:`release_free_memory` gives back). None without ``mallinfo2``. The soak benchmark reads it."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd, info.fordblks


def release_free_memory() -> bool:
    """Return the free pages of Arrow's pool and of malloc to the system; True when malloc had some to give
    back."""
    pa.default_memory_pool().release_unused()
    return _TRIM is not None and bool(_TRIM(0))
