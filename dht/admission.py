"""The bytes of request bodies a node holds at once, bounded (`--max-in-flight-bytes`).

A client PUT is admitted against the budget before its body is read (from its
Content-Length, or chunk by chunk as a chunked body streams) and holds its share until
every replica call carrying the value has ended, since the value stays in memory that
long. Past the budget the node answers 503 at once instead of letting memory grow.

When a burst of large values has passed, the memory it used is handed back to the OS
(`malloc_trim`): glibc keeps freed arenas otherwise, and the node's RSS would stay at
its peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# Bytes released since the last trim after which an idle budget trims the heap.
TRIM_AFTER = 64 * 1024 * 1024


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0), or nothing where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return lambda: None
    return lambda: trim(0)


class ByteBudget:
    def __init__(self, limit: int, trim: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0
        self._released = 0
        self._trim = trim or _malloc_trim()

    def acquire(self, size: int) -> bool:
        """Takes `size` bytes of the budget, or counts a refusal and returns False."""
        if self.in_flight + size > self.limit and self.in_flight > 0:
            self.refused += 1
            return False
        self.in_flight += size
        return True

    def release(self, size: int) -> None:
        self.in_flight -= size
        self._released += size
        if self.in_flight == 0 and self._released >= TRIM_AFTER:
            self._released = 0
            self._trim()
