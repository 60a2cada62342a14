"""The bytes of request bodies a node holds at once, bounded (`--max-in-flight-bytes`),
and the pace a body must keep while it comes (`--min-body-rate`).

A client PUT is admitted against the budget (a body of the lean path once it has come
whole; a larger one by its Content-Length before it is read, a chunked one chunk by chunk
as it streams) and holds its share until every replica call carrying the value has ended,
since the value stays in memory that long. Past the budget the node answers 503 at once
instead of letting memory grow. Bytes reserved for bodies that have not come yet may take
only half of the budget, and a body that falls behind the minimum rate is cut with 408
(SPEC.md rule 7.10): clients that announce bodies and send nothing cannot hold the
budget, nor anything else (found by review: sixteen silent 16 MiB PUTs held all of it,
and every write through the node answered 503 for as long as they stayed open).

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
        self.awaited = 0  # of those, reserved for bodies whose bytes have not come yet
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

    def fits(self, size: int) -> bool:
        """Whether `size` more bytes fit the budget now (a message alone always does)."""
        return self.in_flight + size <= self.limit or self.in_flight <= 0

    def reserve(self, size: int) -> bool:
        """Takes `size` bytes for a body announced and not yet read, if they fit the
        budget and the half of it such reservations may take (one alone always does);
        False, with nothing taken and no refusal counted, if not: the caller refuses the
        body if it does not `fit`, and else reads it as it comes, taking its bytes as they
        arrive (`acquire`). So what reservations hold before a byte of theirs has come
        never stops bodies that come, nor replica traffic (found by review: silent bodies
        holding the half refused every PUT over 64 KiB, its body sent whole with its
        head and the other half free). `arrived` counts their bytes in."""
        if self.awaited + size > self.limit // 2 and self.awaited > 0:
            return False
        if not self.fits(size):
            return False
        self.in_flight += size
        self.awaited += size
        return True

    def arrived(self, size: int) -> None:
        """`size` bytes of a reserved body came (or will never come: it ended)."""
        self.awaited -= size

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


class ClientRequestError(Exception):
    """Root of the errors that end a client's request at the HTTP edge before it is
    carried out (`dht.web.server`'s handler answers them): the client's own mistakes,
    a 4xx, or a refusal to take it now, a 503. `status` is that answer's status, the
    message its reason. It lives here, the web package's lowest module, so that this
    module's own error can be one. Nothing catches the root itself: the handler catches
    each kind, as each answers its own way."""

    status: int


class BodyTooSlow(ClientRequestError):
    """A body fell behind the minimum rate; the message is the reason sent with 408."""

    status = 408  # Request Timeout, and the connection closes (SPEC.md rule 7.10)


class BodyPace:
    """The pace a request body must keep (SPEC.md rule 7.10): `GRACE` seconds for its
    first bytes, then on average `rate` bytes a second since its head came; a body that
    falls behind is cut (408), whatever it announced, so a client that stalls holds a
    node's memory and budget for seconds, not for as long as its connection lasts."""

    GRACE = 5.0

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.cut = 0  # bodies cut for falling behind, on both HTTP paths

    def due(self, head_came: float, received: int) -> float:
        """When a body whose head came at `head_came` (the loop's time) falls behind, if
        no more than `received` bytes of it come by then."""
        return head_came + self.GRACE + received / self.rate

    def too_slow(self) -> BodyTooSlow:
        self.cut += 1
        return BodyTooSlow(
            f"the body came slower than {self.rate} bytes a second (--min-body-rate) "
            f"after a grace of {self.GRACE:g} s"
        )
