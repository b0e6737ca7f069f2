"""Giving the C allocator's free memory back to the system, once in a while.

glibc's malloc keeps what an arena freed for that arena's next allocations. The driver has a dozen
threads allocating and freeing buffers: py4j's callbacks, the pollers, the HTTP server. In the churn
soak, that kept free memory grew by about 0.4 MiB a minute while the memory in use stayed flat
(docs/reliability.md). ``malloc_trim(0)`` returns the free pages of every arena. It is absent outside
glibc, where this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return malloc's free pages to the system; True when it had some to give back."""
    return _TRIM is not None and bool(_TRIM(0))
