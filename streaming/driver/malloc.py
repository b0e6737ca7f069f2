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
from collections.abc import Callable

import pyarrow as pa


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return the free pages of Arrow's pool and of malloc to the system; True when malloc had some to give
    back."""
    pa.default_memory_pool().release_unused()
    return _TRIM is not None and bool(_TRIM(0))
