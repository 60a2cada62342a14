"""One raw request over a bare socket, the answer read against a deadline, and the
properties every answer must have.

http.client would refuse to send most of what the fuzzer makes (bad framing, junk
methods, raw bytes in the target) and would hide how the node ended the exchange, so
this speaks HTTP/1.1 by hand: send the bytes as they are, then read until one complete
response, a close, a reset, or the deadline (a hang).
"""

from __future__ import annotations

import enum
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

# No exchange may take longer than this: past it the node is hanging on us.
HANG_SECONDS = 5.0
# How long a request that is cut short (the node may rightly wait for the rest) is
# given to be answered before we half-close to tell the node no more bytes will come.
CUT_SHORT_GRACE = 0.1
# 5xx a node may answer: unavailable replicas or an overload (503), replicas not
# answering in time (504). Any other 5xx is a bug: 500 is an unexpected exception.
ALLOWED_5XX = frozenset({503, 504})
# What a node may answer a malformed request head with, besides closing: the generic
# rejection and the size-limit rejections (target or headers too long).
REJECTIONS = frozenset({400, 413, 414, 431})


class Expect(enum.Enum):
    """What a request's shape entitles the sender to."""

    # Well-formed HTTP: a complete response, never a dropped connection.
    ANSWER = "answer"
    # A malformed head or framing that the node has all the bytes to see: a rejection
    # (REJECTIONS) or a close, soon.
    REJECTION = "rejection"
    # Bytes that a server may read any way it likes, or that stop short of a whole
    # request: any permitted status or a close, and no hang once we half-close.
    ANY = "any"


@dataclass(frozen=True)
class Probe:
    """One fuzzed request: the exact bytes, and what the node owes us for them."""

    kind: str  # what it exercises, for the summary
    wire: bytes
    expect: Expect
    # The node cannot know the request is over until we half-close (a body shorter than
    # its Content-Length, a chunked body with no last chunk, random bytes).
    cut_short: bool = False
    # A HEAD is answered without a body even when Content-Length says otherwise.
    head_method: bool = False
    # When `wire` is a request followed by more bytes: that request on its own, whose
    # answer `wire` must get too.
    alone: bytes | None = None

    def __repr__(self) -> str:
        shown = self.wire if len(self.wire) <= 600 else self.wire[:600] + b"..."
        return f"Probe({self.kind}, {self.expect.value}, cut_short={self.cut_short}, {shown!r})"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class End(enum.Enum):
    """How an exchange ended."""

    ANSWERED = "answered"  # one complete response arrived
    CLOSED = "closed"  # the node closed the connection first (EOF)
    RESET = "reset"  # the node reset the connection
    HUNG = "hung"  # neither an answer nor a close before the deadline
    GARBLED = "garbled"  # the node sent bytes that are not an HTTP/1.x response


@dataclass(frozen=True)
class Exchange:
    end: End
    answer: Answer | None
    received: bytes  # every byte the node sent, for the failure message
    seconds: float


class BrokenResponse(ValueError):
    """The node sent bytes that are not an HTTP/1.x response."""


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((value for key, value in headers if key.lower() == name), None)


def _parse_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise BrokenResponse(f"bad status line {status_line!r}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BrokenResponse(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    return int(code), headers


def dechunk(data: bytes) -> tuple[bytes, int] | None:
    """The body of a chunked stream at the start of `data` and the bytes it takes (with
    any trailers); None while it is incomplete."""
    body = bytearray()
    position = 0
    while True:
        line_end = data.find(b"\r\n", position)
        if line_end < 0:
            return None
        size_text = data[position:line_end].split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BrokenResponse(f"bad chunk size {size_text!r}") from None
        if size == 0:
            trailers_end = data.find(b"\r\n\r\n", line_end)
            if data[line_end : line_end + 4] == b"\r\n\r\n":
                return bytes(body), line_end + 4
            return None if trailers_end < 0 else (bytes(body), trailers_end + 4)
        start, end = line_end + 2, line_end + 2 + size
        if len(data) < end + 2:
            return None
        if data[end : end + 2] != b"\r\n":
            raise BrokenResponse(f"chunk at byte {position} is not terminated by CRLF")
        body += data[start:end]
        position = end + 2


def parse_answer(data: bytes, head_method: bool, at_eof: bool) -> Answer | None:
    """The first complete response in `data`; None while more bytes are needed. Raises
    BrokenResponse if the bytes cannot be an HTTP/1.x response."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        if len(data) >= 8 and not data.startswith(b"HTTP/1."):
            raise BrokenResponse(f"not an HTTP response: {data[:40]!r}")
        return None
    status, headers = _parse_head(data[:head_end])
    rest = data[head_end + 4 :]
    if 100 <= status < 200 and status != 101:  # interim (100 Continue): the answer follows
        return parse_answer(rest, head_method, at_eof)
    if head_method or status in (101, 204, 304):
        return Answer(status, headers, b"")
    if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
        dechunked = dechunk(rest)
        return None if dechunked is None else Answer(status, headers, dechunked[0])
    length = _header(headers, "content-length")
    if length is not None:
        if not length.isdigit():
            raise BrokenResponse(f"bad Content-Length {length!r}")
        size = int(length)
        return Answer(status, headers, rest[:size]) if len(rest) >= size else None
    return Answer(status, headers, rest) if at_eof else None  # delimited by the close


def exchange(host: str, port: int, probe: Probe, deadline: float = HANG_SECONDS) -> Exchange:
    """Sends `probe.wire` on a fresh connection and reads until one complete response,
    a close, a reset or `deadline` seconds. A cut-short probe is half-closed after
    CUT_SHORT_GRACE so the node learns that nothing more will come."""
    started = time.monotonic()
    received = bytearray()

    def ended(end: End, answer: Answer | None = None) -> Exchange:
        return Exchange(end, answer, bytes(received), time.monotonic() - started)

    with socket.create_connection((host, port), timeout=deadline) as sock:
        try:
            sock.sendall(probe.wire)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node stopped reading, rightly or not: what it sent tells
        half_close_due = probe.cut_short
        while True:
            elapsed = time.monotonic() - started
            if half_close_due and elapsed >= CUT_SHORT_GRACE:
                _half_close(sock)
                half_close_due = False
            wait = deadline - elapsed
            if half_close_due:
                wait = min(wait, CUT_SHORT_GRACE - elapsed)
            if wait <= 0:
                return ended(End.HUNG)
            sock.settimeout(wait)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return ended(End.RESET)
            received += data
            try:
                answer = parse_answer(bytes(received), probe.head_method, at_eof=not data)
            except BrokenResponse:
                return ended(End.GARBLED)
            if answer is not None:
                return ended(End.ANSWERED, answer)
            if not data:
                return ended(End.CLOSED)


def _half_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # already closed by the node: the next read says how


# -- the properties: each returns what is wrong, or None --------------------------------


def hung(result: Exchange) -> str | None:
    if result.end is End.HUNG:
        return f"no answer and no close within {HANG_SECONDS} s"
    return None


def garbled(result: Exchange) -> str | None:
    if result.end is End.GARBLED:
        return "the node sent bytes that are not an HTTP/1.x response"
    return None


def server_error(result: Exchange) -> str | None:
    answer = result.answer
    if answer is not None and answer.status >= 500 and answer.status not in ALLOWED_5XX:
        return f"answered {answer.status}: {answer.body[:200]!r}"
    return None


def dropped(probe: Probe, result: Exchange) -> str | None:
    if probe.expect is Expect.ANSWER and result.end in (End.CLOSED, End.RESET):
        return f"well-formed request, connection {result.end.value} without an answer"
    return None


def not_rejected(probe: Probe, result: Exchange) -> str | None:
    answer = result.answer
    if probe.expect is Expect.REJECTION and answer is not None:
        if answer.status not in REJECTIONS:
            return f"malformed request answered {answer.status}, not a rejection"
    return None


def answered_for_another(result: Exchange, alone: Exchange | None) -> str | None:
    """A request followed by more bytes on its connection gets the answer it gets alone,
    or a 400 for the lot: aiohttp parses what arrives in one read together, and junk
    behind a request makes it reject the read whole, running nothing (accepted: the
    request was not acknowledged, so nothing acknowledged is lost). Any other answer
    would be the request answered as something it is not."""
    if alone is None or alone.answer is None or result.answer is None:
        return None
    if result.answer.status not in (alone.answer.status, 400):
        return (
            f"answered {result.answer.status} {result.answer.body[:120]!r} with bytes after "
            f"it, {alone.answer.status} alone: the request itself went unanswered"
        )
    return None


def violations(probe: Probe, result: Exchange, alone: Exchange | None = None) -> list[str]:
    """Every property of the exchange that does not hold (empty: all hold)."""
    found = [
        hung(result),
        garbled(result),
        server_error(result),
        dropped(probe, result),
        not_rejected(probe, result),
        answered_for_another(result, alone),
    ]
    return [problem for problem in found if problem is not None]


def check(probe: Probe, result: Exchange, alone: Exchange | None = None) -> None:
    """Raises AssertionError on the first broken property, naming the request and what
    came back. One assert per property, so hypothesis tells distinct bugs apart (it
    keys a failure by where it was raised) and reports each with its own example."""
    context = (
        f"\n  request: {probe!r}\n  received ({result.end.value} after "
        f"{result.seconds:.2f} s): {result.received[:400]!r}"
    )
    assert (problem := hung(result)) is None, problem + context
    assert (problem := garbled(result)) is None, problem + context
    assert (problem := server_error(result)) is None, problem + context
    assert (problem := dropped(probe, result)) is None, problem + context
    assert (problem := not_rejected(probe, result)) is None, problem + context
    assert (problem := answered_for_another(result, alone)) is None, problem + context


@dataclass
class Tally:
    """Counts for the summary line: requests by kind, how exchanges ended, and statuses
    apart for well-formed requests and the rest."""

    kinds: Counter[str] = field(default_factory=Counter)
    ends: Counter[str] = field(default_factory=Counter)
    statuses: dict[Expect, Counter[int]] = field(
        default_factory=lambda: {expect: Counter() for expect in Expect}
    )
    slowest: float = 0.0

    def add(self, probe: Probe, result: Exchange) -> None:
        self.kinds[probe.kind] += 1
        self.ends[result.end.value] += 1
        if result.answer is not None:
            self.statuses[probe.expect][result.answer.status] += 1
        self.slowest = max(self.slowest, result.seconds)

    def summary(self, label: str) -> str:
        def listed(counter: Counter[str] | Counter[int]) -> str:
            return ", ".join(f"{key}={count}" for key, count in sorted(counter.items()))

        statuses = "; ".join(
            f"statuses to {expect.value} [{listed(counter)}]"
            for expect, counter in self.statuses.items()
        )
        return (
            f"http fuzz ({label}): {sum(self.kinds.values())} requests "
            f"[{listed(self.kinds)}]; ends [{listed(self.ends)}]; {statuses}; "
            f"slowest {self.slowest:.2f} s"
        )
