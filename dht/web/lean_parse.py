"""The lean HTTP path's parser (pure): the head of a simple request to one of the lean
routes, or `NotLean` when the request is not one the lean path takes.

What it takes is a subset of what aiohttp's own parser (llhttp) takes, read alike:
HTTP/1.1, one of the routes' methods, a request target of URL characters, plain
`name: value` headers with one Host, and a body of at most `LEAN_MAX_BODY` bytes announced
by Content-Length; no Transfer-Encoding, Expect, Upgrade, Content-Encoding or anything
else llhttp reads its own way (tests/fuzz/test_lean_http.py compares the two). A head
that cannot become one it takes is handed off at once, not waited for.
"""

from __future__ import annotations

import re

from dht.limits import LEAN_MAX_BODY, LEAN_MAX_HEADER_BYTES, LEAN_MAX_HEADERS

# RFC 9112's request line with an origin-form target of RFC 3986's characters.
_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*) HTTP/1\.1\r\n")
# One header field: a token, a colon, a value of visible ASCII and inner spaces.
_HEADER = re.compile(
    rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[!-~]+(?:[ \t]+[!-~]+)*)?)[ \t]*\r\n"
)
# The characters of a request target, and what may start a request line that ends
# within its target (the method is one of a route's prefix, checked apart).
_TARGET = re.compile(rb"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
_UNFINISHED_TARGET = re.compile(rb"[A-Z]+ /[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
# What may start a request line _REQUEST_LINE matches, its CRLF not come yet.
_PARTIAL_LINE = re.compile(
    rb"[A-Z]+ /[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*"
    rb"(?: (?:H(?:T(?:T(?:P(?:/(?:1(?:\.(?:1\r?)?)?)?)?)?)?)?)?)?"
)
# What may start a header field _HEADER matches, its CRLF not come yet.
_PARTIAL_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]*(?::[ \t!-~]*)?\r?")


def _fields_so_far_fit(data: bytes | bytearray, scan: HeadScan) -> bool:
    """Whether the header fields of an unfinished head are, as far as they came, ones
    `parse` may take: a field llhttp refuses goes to aiohttp at once rather than waiting
    for the head's end. Each whole field is checked once (`scan.fields_from` moves past
    it); the unfinished last one again with each read, which LEAN_MAX_HEADER_BYTES bounds."""
    start = scan.fields_from
    while (end := data.find(b"\r\n", start)) >= 0:
        if _HEADER.match(data, start, end + 2) is None:
            return False
        start = end + 2
    scan.fields_from = start
    return _PARTIAL_FIELD.fullmatch(data, start) is not None


# Headers whose meaning the lean path does not take on: their requests go to aiohttp.
_NOT_LEAN = frozenset(
    [
        b"transfer-encoding",
        b"expect",
        b"upgrade",
        b"content-encoding",
        b"proxy-connection",  # llhttp reads it as Connection
        b"sec-websocket-key1",  # aiohttp refuses it
    ]
)
# Headers aiohttp refuses twice in one request (its parser's SINGLETON_HEADERS).
_SINGLETONS = frozenset(
    [
        b"content-length",
        b"content-location",
        b"content-range",
        b"content-type",
        b"etag",
        b"host",
        b"max-forwards",
        b"server",
        b"user-agent",
    ]
)


class NotLean(Exception):
    """The request at the buffer's start is not one the lean path takes."""


class LeanRequest:
    """A request whose head is whole; its body may still be on its way."""

    __slots__ = ("head_size", "keep_alive", "length", "method", "path", "query")

    def __init__(
        self, method: str, path: str, query: str, length: int, keep_alive: bool, head_size: int
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.length = length  # of the body
        self.keep_alive = keep_alive
        self.head_size = head_size  # bytes of the buffer its head takes


class HeadScan:
    """How far the unfinished head at the start of a connection's buffer has been
    checked, so each read costs work in proportion to the bytes it brought (SPEC.md rule
    7.11): the request line is checked once as it grows, not again with each byte of it or
    of the headers after it (found by review: a 180,000-byte line trickled a byte a
    millisecond cost a node 3.3 s of CPU)."""

    __slots__ = ("checked", "fields_from", "line_end", "target")

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """For the next request's head."""
        self.checked = 0  # bytes of the buffer known to start a head `parse` may take
        self.target = False  # and these end within the request target
        self.line_end = -1  # where the request line's CRLF is, once it came and fits
        self.fields_from = 0  # where the first header field not yet checked whole starts


class LeanParser:
    """Parses the heads of requests to `routes` (path -> the methods taken lean)."""

    def __init__(
        self, routes: dict[str, set[str]], max_line: int, max_body: int = LEAN_MAX_BODY
    ) -> None:
        """`max_line`: aiohttp's limit of a request target (a request line as long goes
        to aiohttp); `max_body`: the largest body taken lean (a larger one goes to aiohttp,
        which answers 413 before it is read past the value limit)."""
        self._prefixes = tuple(
            f"{method} {path}?".encode() for path, methods in routes.items() for method in methods
        )
        self._max_line = max_line
        self._max_body = min(max_body, LEAN_MAX_BODY)

    def parse(self, data: bytes | bytearray, scan: HeadScan | None = None) -> LeanRequest | None:
        """The request whose head is at the start of `data`; None while its head is not
        whole and it may still be one the lean path takes; raises NotLean when it is not.
        `scan` carries what earlier calls found of the same head as `data` grew (given
        back restarted once a request is taken); without one, `data` is checked whole."""
        if scan is None:
            scan = HeadScan()
        if scan.line_end < 0:
            if not self._line_so_far_fits(data, scan):
                return None
        line_end = scan.line_end
        head_end = data.find(b"\r\n\r\n", max(line_end, scan.checked - 3))
        if head_end < 0:
            if len(data) - 3 - line_end > LEAN_MAX_HEADER_BYTES or not _fields_so_far_fit(
                data, scan
            ):
                raise NotLean  # too long, or a field llhttp refuses (found by review)
            scan.checked = len(data)
            return None
        if head_end - line_end > LEAN_MAX_HEADER_BYTES:
            raise NotLean
        request = self._request(data, line_end, head_end)
        scan.restart()
        return request

    def _line_so_far_fits(self, data: bytes | bytearray, scan: HeadScan) -> bool:
        """Whether the request line has come whole (and fits: `scan.line_end` is set);
        False while it may still become one `parse` takes; NotLean when it cannot."""
        if not data.startswith(self._prefixes):
            if any(prefix.startswith(data) for prefix in self._prefixes):
                return False  # a prefix of one: wait for more
            raise NotLean
        line_end = data.find(b"\r\n", max(scan.checked - 1, 0))
        if line_end < 0:
            # A bare LF ends lines for no one here: llhttp answers it 400 at once.
            if len(data) > self._max_line:
                raise NotLean
            if scan.target and _TARGET.fullmatch(data, scan.checked):
                pass  # more of the target: only the new bytes are checked
            elif _UNFINISHED_TARGET.fullmatch(data):
                scan.target = True
            elif _PARTIAL_LINE.fullmatch(data):
                scan.target = False  # in " HTTP/1.1": a few more bytes at most
            else:
                raise NotLean
            scan.checked = len(data)
            return False
        line = _REQUEST_LINE.match(data, 0, line_end + 2)
        if line is None or line.end() != line_end + 2 or line_end >= self._max_line:
            raise NotLean
        scan.line_end = line_end
        scan.checked = scan.fields_from = line_end + 2
        return True

    def _request(self, data: bytes | bytearray, line_end: int, head_end: int) -> LeanRequest:
        """The request of a whole head, or NotLean."""
        length: int | None = None
        keep_alive = True
        position = line_end + 2
        fields = 0
        singletons: list[bytes] = []
        while position < head_end + 2:
            field = _HEADER.match(data, position, head_end + 2)
            fields += 1
            if field is None or fields > LEAN_MAX_HEADERS:
                raise NotLean
            position = field.end()
            name = field.group(1).lower()
            if name in _SINGLETONS:
                if name in singletons:
                    raise NotLean  # llhttp refuses it
                singletons.append(name)
            if name == b"content-length":
                value = field.group(2)
                if length is not None or not value.isdigit() or len(value) > 9:
                    raise NotLean
                length = int(value)
            elif name == b"connection":
                token = field.group(2).lower()
                if token == b"close":
                    keep_alive = False
                elif token != b"keep-alive":
                    raise NotLean
            elif name in _NOT_LEAN:
                raise NotLean
        if b"host" not in singletons:
            raise NotLean  # aiohttp refuses an HTTP/1.1 request without one
        line = _REQUEST_LINE.match(data, 0, line_end + 2)
        assert line is not None  # checked as the line came
        method = line.group(1).decode()
        if method == "PUT":
            if length is None or length > self._max_body:
                raise NotLean  # chunked, or large: admitted before it is read
        elif length:
            raise NotLean  # a GET or DELETE with a body
        # The prefix ended with the path's "?": this is the path of one of the routes.
        path, _, query = bytes(line.group(2)).decode().partition("?")
        return LeanRequest(method, path, query, length or 0, keep_alive, head_end + 4)
