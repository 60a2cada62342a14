"""The bytes of request bodies a node holds at once, bounded (`--max-in-flight-bytes`).

A client PUT is admitted against the budget before its body is read (from its
Content-Length, or chunk by chunk as a chunked body streams) and holds its share until
every replica call carrying the value has ended, since the value stays in memory that
long. Past the budget the node answers 503 at once instead of letting memory grow.

Memory a burst of large values used goes back to the OS. glibc would keep it: past the
first freed large buffer it raises its mmap threshold (up to 32 MiB), so later 16 MiB
buffers come from the heap and stay there after they are freed. The node pins the
threshold at 1 MiB (`mallopt`), so a large buffer is unmapped as soon as it is freed,
and trims the heap (`malloc_trim`) once a burst is over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

# Bytes released since the last trim after which an idle budget trims the heap.
TRIM_AFTER = 64 * 1024 * 1024


_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
MMAP_THRESHOLD = 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def keep_large_buffers_out_of_the_heap() -> None:
    """glibc's mallopt(M_MMAP_THRESHOLD, 1 MiB); nothing where there is none."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0), or nothing where the C library has none (musl, macOS)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return lambda: None
    trim = libc.malloc_trim

    def trimmed() -> None:
        trim(0)
        log.info("a burst of values is over: freed memory handed back to the OS")

    return trimmed


class ByteBudget:
    def __init__(self, limit: int, trim: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0
        self._released = 0
        self._trim = trim or _malloc_trim()

    def acquire(self, size: int, held: int = 0) -> bool:
        """Takes `size` more bytes for a message that holds `held` already, or counts a
        refusal and returns False. A message alone in flight always passes, however
        large: else a budget under the largest value would refuse it for ever."""
        if self.in_flight + size > self.limit and self.in_flight > held:
            self.refused += 1
            return False
        self.in_flight += size
        return True

    def hold(self, size: int) -> None:
        """Counts `size` bytes that are held already and cannot be declined: a large
        replica write given up on midway, whose last fragments still have to leave."""
        self.in_flight += size

    def release(self, size: int) -> None:
        self.in_flight -= size
        self._released += size
        if self.in_flight == 0 and self._released >= TRIM_AFTER:
            self._released = 0
            self._trim()
