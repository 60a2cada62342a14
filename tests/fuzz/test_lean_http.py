"""The lean HTTP parser (dht.web.lean_parse) against aiohttp's own, llhttp: what the lean
parser takes must be a subset of what llhttp takes, and taken alike.

Requests come from a grammar of valid ones (methods, targets with percent-encoded and
odd characters, header fields of random names and values among Content-Length,
Transfer-Encoding, Connection, Expect, Content-Encoding, Host and the like, duplicated,
with odd whitespace, obs-fold, bare LF, NUL and high bytes, HTTP/1.0 and 1.1, bodies,
request lines and header blocks at the lean parser's limits), then mutated (bytes
flipped, inserted and deleted, cut short, a second request behind the first).
Whatever the bytes, `LeanParser.parse` raises nothing but `NotLean` and returns at once.
Whenever it takes a request, llhttp, made as aiohttp's web server makes it for a node,
parses the same bytes into exactly one message with the same method, target, body and
keep-alive decision, neither upgraded, chunked nor compressed; every proper prefix of
those bytes makes the lean parser wait for more until the head is whole, and take the
same request from then on; and whatever follows it does not change where it ends. Nor
does the lean parser wait for more after a head a client has ended (with any line ends)
that llhttp refuses: aiohttp answers that one 400 at once. And a slow sender, its bytes
coming in pieces that one `HeadScan` follows as a connection's does, gets after each
piece what the bytes so far would get at once.

No node and no socket: both parsers are fed the same bytes in the test process.
DHT_FUZZ_EXAMPLES scales the examples (dht/conformance/fuzz/budget.py).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import string
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpRequestParser, HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import MAX_MSG_QUEUE_SIZE, RequestHandler, RequestPayloadError
from hypothesis import event, given
from hypothesis import strategies as st

from dht.config import NodeConfig, request_line_limit
from dht.conformance.fuzz.budget import raw_request_settings
from dht.limits import LEAN_MAX_BODY, LEAN_MAX_HEADER_BYTES, LEAN_MAX_HEADERS
from dht.web.lean_parse import HeadScan, LeanParser, LeanRequest, NotLean

# A node's limit of a request line, the lean parser's and aiohttp's (dht/node.py).
MAX_LINE = request_line_limit(NodeConfig.max_key_bytes)
ROUTE = b"/v0/entity"
# The largest input here parses in about a millisecond: this long is a hang.
PARSE_SECONDS = 1.0
# And a parse that never returns fails the test rather than blocks the suite (shrinking
# a failure takes a minute at most).
pytestmark = pytest.mark.timeout(300)


LEAN = LeanParser({ROUTE.decode(): {"GET", "PUT", "DELETE"}}, MAX_LINE)

# -- the two parsers ----------------------------------------------------------------------

Outcome = LeanRequest | Literal["wait", "hand off"]


def lean(data: bytes) -> Outcome:
    """What the lean parser makes of `data`; any exception but NotLean goes through."""
    start = time.perf_counter()
    try:
        request = LEAN.parse(data)
    except NotLean:
        outcome: Outcome = "hand off"
    else:
        outcome = "wait" if request is None else request
    seconds = time.perf_counter() - start
    assert seconds < PARSE_SECONDS, f"parse took {seconds:.2f} s over {data[:300]!r}..."
    return outcome


def describe(outcome: Outcome) -> str:
    """All of an outcome: two requests are the same if they are described alike."""
    if isinstance(outcome, str):
        return outcome
    return (
        f"LeanRequest({outcome.method} {outcome.path!r} ? {outcome.query!r}, a body of"
        f" {outcome.length} bytes, keep_alive={outcome.keep_alive}, a head of"
        f" {outcome.head_size} bytes)"
    )


def whole_size(request: LeanRequest) -> int:
    return request.head_size + request.length


# RequestHandler.__init__'s defaults: what a node's aiohttp server parses with, but for
# the node's max_line_size (dht/node.py passes no other).
_HANDLER = inspect.signature(RequestHandler.__init__).parameters


def llhttp(
    loop: asyncio.AbstractEventLoop, data: bytes
) -> list[tuple[RawRequestMessage, StreamReader]]:
    """The messages aiohttp's web server's parser finds in `data`, made as
    RequestHandler makes it; raises what it raises on a malformed request."""
    parser = HttpRequestParser(
        BaseProtocol(loop),
        loop,
        _HANDLER["read_bufsize"].default,
        max_line_size=MAX_LINE,
        max_field_size=_HANDLER["max_field_size"].default,
        max_headers=_HANDLER["max_headers"].default,
        payload_exception=RequestPayloadError,
        auto_decompress=_HANDLER["auto_decompress"].default,
        max_msg_queue_size=MAX_MSG_QUEUE_SIZE,
    )
    messages, upgraded, tail = parser.feed_data(data)
    assert not upgraded, f"llhttp upgrades the connection on {data!r}"
    assert tail == b"", f"llhttp leaves {tail!r} unparsed of {data!r}"
    return list(messages)


def takes(loop: asyncio.AbstractEventLoop, data: bytes) -> bool:
    try:
        llhttp(loop, data)
    except HttpProcessingError:
        return False
    return True


def assert_alike(
    message: RawRequestMessage, payload: StreamReader, request: LeanRequest, body: bytes
) -> None:
    """llhttp's message is the lean parser's request, whose body is `body`."""
    taken = describe(request)
    assert message.method == request.method, f"llhttp: {message.method}; lean: {taken}"
    assert message.path == f"{request.path}?{request.query}", (
        f"llhttp: {message.path!r}; lean: {taken}"
    )
    assert message.url.raw_path == request.path, f"llhttp: {message.url!r}; lean: {taken}"
    assert message.url.raw_query_string == request.query, f"llhttp: {message.url!r}; lean: {taken}"
    assert message.version == HttpVersion11, f"llhttp: {message.version}; lean: {taken}"
    assert not message.upgrade, f"llhttp: an upgrade; lean: {taken}"
    assert not message.chunked, f"llhttp: chunked; lean: {taken}"
    assert message.compression is None, f"llhttp: {message.compression}; lean: {taken}"
    assert "Content-Encoding" not in message.headers, f"llhttp: {message.headers}; lean: {taken}"
    assert payload.is_eof(), f"llhttp waits for more of the body; lean: {taken}"
    read = payload.read_nowait()
    assert read == body, f"llhttp: a body of {len(read)} bytes, not {len(body)}; lean: {taken}"
    assert (not message.should_close) == request.keep_alive, (
        f"llhttp: should_close={message.should_close}; lean: {taken}"
    )


def assert_llhttp_agrees(
    loop: asyncio.AbstractEventLoop, data: bytes, request: LeanRequest
) -> None:
    """llhttp takes `data`, which the lean parser took as `request`, head and body, as one
    message and alike."""
    assert whole_size(request) == len(data)
    try:
        messages = llhttp(loop, data)
    except Exception as error:
        raise AssertionError(
            f"the lean parser takes {data[:2000]!r} ({len(data)} bytes), which llhttp"
            f" refuses: {error!r}"
        ) from error
    assert len(messages) == 1, f"llhttp finds {len(messages)} messages in {data[:2000]!r}"
    try:
        assert_alike(*messages[0], request, data[request.head_size :])
    except AssertionError as error:
        raise AssertionError(f"over {data[:2000]!r} ({len(data)} bytes): {error}") from error


def cut_points(whole: bytes) -> Iterator[int]:
    """Where to cut `whole` short: anywhere in a short request; in a long one, near its
    start and end, around every line end of its head, and at 64 places between."""
    if len(whole) <= 2048:
        yield from range(len(whole))
        return
    points = set(range(64)) | set(range(len(whole) - 8, len(whole)))
    points |= set(range(0, len(whole), len(whole) // 64))
    head_end = whole.find(b"\r\n\r\n")
    line_end = whole.find(b"\r\n")
    while 0 <= line_end <= head_end + 2:
        points |= set(range(line_end - 2, line_end + 4))
        line_end = whole.find(b"\r\n", line_end + 1)
    yield from sorted(point for point in points if 0 <= point < len(whole))


def assert_prefixes_wait(whole: bytes) -> None:
    """Every proper prefix of `whole`, a request the lean parser takes, is one to wait
    for the rest of (neither another request nor a hand-off) until the head is whole,
    and the same request from then on."""
    taken = lean(whole)
    assert isinstance(taken, LeanRequest), f"{whole[:2000]!r}: {describe(taken)}"
    line_end = whole.find(b"\r\n")
    head = whole.find(b"\r\n\r\n") - line_end
    for cut in cut_points(whole):
        outcome = lean(whole[:cut])
        expected = "wait" if cut < taken.head_size else describe(taken)
        assert describe(outcome) == expected, (
            f"the lean parser takes {len(whole)} bytes (a request line of {line_end} bytes, a"
            f" header block of {head}) but their first {cut}, ending"
            f" {whole[max(0, cut - 60) : cut]!r}, give {describe(outcome)}"
        )


def assert_not_refused_by_llhttp(loop: asyncio.AbstractEventLoop, data: bytes) -> None:
    """The lean parser waits for more after `data`, where a client has ended its head
    (with any line ends): llhttp must not have refused it, or aiohttp would answer 400
    at once while the lean path waits until the connection is swept for idleness."""
    try:
        llhttp(loop, data)
    except HttpProcessingError as error:
        raise AssertionError(
            f"the lean parser waits for more after {data[:2000]!r}, which llhttp refuses: {error!r}"
        ) from error


@pytest.fixture(scope="module")
def parser_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop llhttp's body readers belong to; never run."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


# -- the grammar --------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: bytes
    separator: bytes  # b": ", or odd whitespace around the colon
    value: bytes | None  # None: the body's length, for a Content-Length that is right
    end: bytes  # b"\r\n", a bare LF, trailing whitespace, an obs-fold...


@dataclass(frozen=True)
class Request:
    method: bytes
    target: bytes
    version: bytes
    spaces: tuple[bytes, bytes]  # after the method, after the target
    line_end: bytes  # of the request line and of the header block
    fields: tuple[Field, ...]
    body: bytes
    line_length: int | None  # the target is padded to make the request line this long
    head_length: int | None  # a field is added to make the header block this long


def render(request: Request) -> bytes:
    start = request.method + request.spaces[0]
    end = request.spaces[1] + request.version
    target = request.target
    if request.line_length is not None:
        target += b"a" * max(0, request.line_length - len(start + target + end))
    fields = b"".join(
        field.name
        + field.separator
        + (b"%d" % len(request.body) if field.value is None else field.value)
        + field.end
        for field in request.fields
    )
    if request.head_length is not None:
        # From the request line's CRLF to the header block's CRLF CRLF: the fields.
        pad = request.head_length - len(fields) - len(b"X-Pad: \r\n")
        if pad >= 0:
            fields += b"X-Pad: " + b"p" * pad + b"\r\n"
    return start + target + end + request.line_end + fields + request.line_end + request.body


def _bytes(alphabet: bytes, min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[bytes]:
    return st.text(alphabet.decode("latin-1"), min_size=min_size, max_size=max_size).map(
        lambda text: text.encode("latin-1")
    )


T = TypeVar("T")


def _mostly(
    common: st.SearchStrategy[T], odd: st.SearchStrategy[T], one_in: int = 8
) -> st.SearchStrategy[T]:
    """`common`, but for one time in `one_in` (about): `odd`."""
    return st.integers(1, one_in).flatmap(lambda roll: odd if roll == one_in else common)


URL_CHARS = (string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/?%").encode()
TOKEN_CHARS = (string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~").encode()
VISIBLE = bytes(range(0x21, 0x7F))
ODD_BYTES = b'#[]{}|\\^`"<> \t\x00\x0b\x7f\x80\xff\r\n'

queries = st.lists(
    _mostly(
        st.one_of(_bytes(URL_CHARS, 1), st.integers(0, 255).map(lambda byte: b"%%%02X" % byte)),
        st.one_of(
            st.sampled_from([b"%", b"%z", b"%zz", b"%%", b"%0", b"&", b"?", b"//", b"%00"]),
            _bytes(ODD_BYTES, 1, 2),
        ),
    ),
    max_size=5,
).map(b"".join)
targets = _mostly(
    queries.map(lambda query: ROUTE + b"?id=" + query),
    st.one_of(
        queries.map(lambda query: ROUTE + b"?" + query),
        st.sampled_from(
            [
                ROUTE,
                ROUTE + b"X?id=1",
                ROUTE + b"/?id=1",
                ROUTE + b"#?id=1",
                ROUTE + b"%3Fid=1",
                b"/V0/entity?id=1",
                b"//v0/entity?id=1",
                b"/v0/status",
                b"http://127.0.0.1:8000/v0/entity?id=1",
                b"*",
                b"",
            ]
        ),
    ),
    one_in=6,
)
methods = _mostly(
    st.sampled_from([b"GET", b"PUT", b"DELETE"]),
    st.sampled_from([b"HEAD", b"POST", b"get", b"PUT2", b"CONNECT", b"OPTIONS"]),
)
versions = _mostly(
    st.just(b"HTTP/1.1"),
    st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1", b"HTTP/1.1 ", b"HTTP/1"]),
)
spaces = _mostly(st.just(b" "), st.sampled_from([b"", b"  ", b"\t", b" \x00"]), one_in=16)
line_ends = _mostly(st.just(b"\r\n"), st.sampled_from([b"\n", b"\r", b"\r\r\n", b" \r\n"]))

# Fields llhttp or aiohttp's parser act on, and fields they only carry.
ACTED_ON = [
    *(b"Host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Proxy-Connection"),
    *(b"Expect", b"Content-Encoding", b"Upgrade", b"Sec-WebSocket-Key1", b"Keep-Alive", b"TE"),
]
CARRIED = [
    *(b"Content-Type", b"User-Agent", b"Accept", b"Max-Forwards", b"ETag", b"Server"),
    *(b"Content-Range", b"Content-Location", b"Trailer"),
]
CASES: list[Callable[[bytes], bytes]] = [bytes, bytes, bytes.lower, bytes.upper]


def _cased(known: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.builds(lambda name, case: case(name), st.sampled_from(known), st.sampled_from(CASES))


names = _mostly(
    st.one_of(
        _cased(ACTED_ON),
        _cased(ACTED_ON),
        _cased(CARRIED),
        _bytes(TOKEN_CHARS, 1).map(lambda name: b"X-" + name),
    ),
    st.one_of(
        _bytes(TOKEN_CHARS, 1),
        st.sampled_from([b"", b"Host ", b" Host", b"Content-Length ", b"X Y", b"X\x00", b"\xffX"]),
        st.sampled_from([b"X\t", b"(X)", b"X:", b"\r", b"\n", b"X\r\n"]),
    ),
)
plain_values = st.lists(_bytes(VISIBLE, 1, 8), max_size=3).map(b" ".join)
values = _mostly(
    plain_values,
    st.one_of(
        _bytes(VISIBLE + b" \t\x00\x0b\x7f\x80\xff\r\n", 0, 8),
        st.builds(lambda first, then: first + b"\r\n " + then, plain_values, plain_values),
    ),
)
MEANINGFUL: dict[bytes, st.SearchStrategy[bytes | None]] = {
    b"content-length": _mostly(
        st.none(),
        st.sampled_from(
            [
                *(b"0", b"1", b"+1", b"-1", b"1 1", b"1,1", b"0x1", b"01", b"000000000"),
                *(b"999999999", b"1000000000", b"65536", b"65537", b"3\x00"),
                b"\xd9\xa3",  # an Arabic-Indic 3
            ]
        ),
        one_in=3,
    ),
    b"transfer-encoding": st.sampled_from([b"chunked", b"identity", b"gzip, chunked", b"Chunked"]),
    b"connection": st.sampled_from(
        [
            *(b"close", b"keep-alive", b"Close", b"KEEP-ALIVE", b"upgrade", b"close, upgrade"),
            *(b"keep-alive, close", b"", b"clos", b"close\x00", b"Keep-Alive, Upgrade"),
        ]
    ),
    b"expect": st.sampled_from([b"100-continue", b"100-Continue", b""]),
    b"content-encoding": st.sampled_from([b"gzip", b"identity", b"br", b"deflate", b""]),
    b"upgrade": st.sampled_from([b"websocket", b"h2c", b""]),
    b"host": st.sampled_from([b"127.0.0.1:8000", b"localhost", b"", b"a b", b"[::1]:80", b"h\x00"]),
}
separators = _mostly(
    st.just(b": "), st.sampled_from([b":", b":\t", b":  ", b" :", b"\t:", b": \t "])
)
field_ends = _mostly(
    st.just(b"\r\n"),
    st.sampled_from([b"\n", b" \r\n", b"\t\r\n", b"\r\n ", b"\r\n\t", b"\r", b"\x00\r\n"]),
)
MEANINGFUL[b"proxy-connection"] = MEANINGFUL[b"connection"]  # llhttp reads it as Connection
HOST = Field(b"Host", b": ", b"127.0.0.1:8000", b"\r\n")


@st.composite
def fields(draw: st.DrawFn) -> Field:
    name = draw(names)
    meaningful = MEANINGFUL.get(name.lower())
    value = draw(values if meaningful is None else _mostly(meaningful, values, one_in=3))
    return Field(name, draw(separators), value, draw(field_ends))


bodies = _mostly(
    st.binary(max_size=40),
    st.integers(LEAN_MAX_BODY - 2, LEAN_MAX_BODY + 2).map(lambda size: b"b" * size),
    one_in=16,
)


# Request lines and header blocks of about the lean parser's limits: the size the
# targets are padded to, or a field added (one time in 15 and 10).
line_lengths = _mostly(st.none(), st.integers(MAX_LINE - 2, MAX_LINE), one_in=15)
head_lengths = _mostly(
    st.none(), st.integers(LEAN_MAX_HEADER_BYTES - 3, LEAN_MAX_HEADER_BYTES + 1), one_in=10
)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """A request of the grammar, mostly one the lean parser takes, often with something
    odd in it."""
    method = draw(methods)
    body = draw(bodies) if method == b"PUT" or draw(st.integers(1, 8)) == 8 else b""
    chosen = draw(st.lists(fields(), max_size=4))
    if draw(st.integers(1, 4)) < 4:  # a right Content-Length
        chosen.insert(
            draw(st.integers(0, len(chosen))), Field(b"Content-Length", b": ", None, b"\r\n")
        )
    if draw(st.integers(1, 8)) < 8:
        chosen.insert(draw(st.integers(0, len(chosen))), HOST)
    many = draw(
        _mostly(st.just(0), st.integers(LEAN_MAX_HEADERS - 3, LEAN_MAX_HEADERS + 1), one_in=12)
    )
    chosen += [Field(b"X-Field-%d" % number, b": ", b"v", b"\r\n") for number in range(many)]
    return Request(
        method=method,
        target=draw(targets),
        version=draw(versions),
        spaces=(draw(spaces), draw(spaces)),
        line_end=draw(line_ends),
        fields=tuple(chosen),
        body=body,
        line_length=draw(line_lengths),
        head_length=draw(head_lengths),
    )


@st.composite
def plain_requests(draw: st.DrawFn, at_the_limits: bool = True) -> Request:
    """A request as a client such as wrk sends it: one Host, a Content-Length on a PUT,
    no two fields of a name, plain values; the lean parser takes every one but, if
    `at_the_limits`, some that are one byte over them."""
    method = draw(st.sampled_from([b"GET", b"PUT", b"DELETE"]))
    body = draw(bodies)[:LEAN_MAX_BODY] if method == b"PUT" else b""
    separator = draw(st.sampled_from([b": ", b":", b":\t", b":  ", b": \t"]))
    end = draw(st.sampled_from([b"\r\n", b"\r\n", b" \r\n", b"\t\r\n"]))
    others = draw(
        st.dictionaries(
            st.one_of(
                st.sampled_from([b"User-Agent", b"Accept", b"Accept-Encoding", b"Cookie"]),
                _bytes(TOKEN_CHARS, 1).map(lambda name: b"X-" + name),
            ),
            plain_values,
            max_size=4,
        )
    )
    chosen = [HOST, *(Field(name, separator, value, end) for name, value in others.items())]
    if method == b"PUT" or draw(st.booleans()):
        chosen.append(Field(b"Content-Length", separator, None, end))
    connection = draw(st.sampled_from([None, b"keep-alive", b"close", b"Keep-Alive", b"CLOSE"]))
    if connection is not None:
        chosen.append(Field(b"Connection", separator, connection, end))
    query = st.one_of(_bytes(URL_CHARS, 1), st.integers(0, 255).map(lambda byte: b"%%%02x" % byte))
    return Request(
        method=method,
        target=ROUTE + b"?" + draw(st.lists(query, max_size=4).map(b"".join)),
        version=b"HTTP/1.1",
        spaces=(b" ", b" "),
        line_end=b"\r\n",
        fields=tuple(draw(st.permutations(chosen))),
        body=body,
        line_length=draw(line_lengths) if at_the_limits else None,
        head_length=draw(head_lengths) if at_the_limits else None,
    )


Mutation = tuple[str, int, bytes]
mutations: st.SearchStrategy[list[Mutation]] = _mostly(
    st.just([]),
    st.lists(
        st.tuples(
            st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
            st.one_of(st.integers(0, 300), st.integers(0, 2**20)),
            st.binary(min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=3,
    ),
    one_in=3,
)


def mutate(data: bytes, changes: list[Mutation]) -> bytes:
    for kind, where, what in changes:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ what[0]]) + data[at + 1 :]
        elif kind == "set" and at < len(data):
            data = data[:at] + what[:1] + data[at + 1 :]
        elif kind == "insert":
            data = data[:at] + what + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + len(what) :]
        elif kind == "truncate":
            data = data[:at]
    return data


@st.composite
def fuzzed(draw: st.DrawFn) -> bytes:
    """A request of the grammar, or a plain one, mutated, maybe with another behind it
    (pipelined)."""
    data = render(draw(st.one_of(requests(), plain_requests())))
    data = mutate(data, draw(mutations))
    if draw(st.integers(1, 4)) == 4:
        data += render(draw(st.one_of(plain_requests(at_the_limits=False), requests())))
    return data


def assert_a_slow_sender_gets_the_same(data: bytes, pieces: list[int]) -> None:
    """`data` comes in pieces of `pieces`' sizes, then the rest at once, into one buffer
    that one HeadScan follows (SPEC.md rule 7.11: the parser goes on where it stopped):
    after each piece the parser says what it says of all the bytes so far at once, up to
    the first piece after which it no longer waits."""
    scan = HeadScan()
    cuts = [cut for cut in itertools.accumulate(pieces) if cut < len(data)] + [len(data)]
    buffer = bytearray()
    for cut in cuts:
        buffer += data[len(buffer) : cut]
        try:
            request = LEAN.parse(buffer, scan)
        except NotLean:
            piecewise: Outcome = "hand off"
        else:
            piecewise = "wait" if request is None else request
        at_once = lean(data[:cut])
        assert describe(piecewise) == describe(at_once), (
            f"after {cut} bytes, ending {data[max(0, cut - 60) : cut]!r}, in pieces"
            f" {pieces[:20]}: {describe(piecewise)}, at once: {describe(at_once)}"
        )
        if piecewise != "wait":
            return


# -- the properties -----------------------------------------------------------------------


def test_the_reference_is_llhttp() -> None:
    """aiohttp's web server parses with the C parser: the one these tests compare with."""
    assert HttpRequestParser.__module__ == "aiohttp._http_parser"


@raw_request_settings(4)
@given(data=fuzzed())
def test_what_the_lean_parser_takes_llhttp_takes_alike(
    parser_loop: asyncio.AbstractEventLoop, data: bytes
) -> None:
    outcome = lean(data)
    event(outcome if isinstance(outcome, str) else f"taken: {outcome.method}")
    if isinstance(outcome, LeanRequest):
        assert 0 < outcome.head_size <= len(data)
        assert 0 <= outcome.length <= LEAN_MAX_BODY
        # The request's bytes, its body made whole if it is not (any bytes will do).
        whole = data[: whole_size(outcome)]
        whole += b"\x00" * (whole_size(outcome) - len(whole))
        assert_llhttp_agrees(parser_loop, whole, outcome)
        assert_prefixes_wait(whole)
    elif outcome == "wait" and re.search(rb"\n\r?\n", data):
        assert_not_refused_by_llhttp(parser_loop, data)


@raw_request_settings(1)
@given(request=plain_requests(at_the_limits=False))
def test_a_plain_request_is_taken_and_alike(
    parser_loop: asyncio.AbstractEventLoop, request: Request
) -> None:
    data = render(request)
    outcome = lean(data)
    assert isinstance(outcome, LeanRequest), f"{data!r}: {describe(outcome)}"
    assert outcome.length == len(request.body)
    assert_llhttp_agrees(parser_loop, data, outcome)
    assert_prefixes_wait(data)


@raw_request_settings(2)
@given(data=fuzzed(), pieces=st.lists(st.integers(1, 64), max_size=80))
def test_a_slow_sender_gets_what_its_bytes_would_get_at_once(
    data: bytes, pieces: list[int]
) -> None:
    assert_a_slow_sender_gets_the_same(data, pieces)


@raw_request_settings(1)
@given(first=plain_requests(at_the_limits=False), then=st.one_of(fuzzed(), st.binary(max_size=20)))
def test_what_follows_a_request_does_not_change_where_it_ends(
    parser_loop: asyncio.AbstractEventLoop, first: Request, then: bytes
) -> None:
    data = render(first)
    alone = lean(data)
    assert isinstance(alone, LeanRequest), f"{data!r}: {describe(alone)}"
    assert whole_size(alone) == len(data), f"{data!r}: {describe(alone)}"
    followed = lean(data + then)
    assert describe(followed) == describe(alone), f"{data!r} then {then!r}"
    second = lean(then)
    if (
        alone.keep_alive  # else llhttp refuses what follows
        and isinstance(second, LeanRequest)
        and whole_size(second) == len(then)
        and takes(parser_loop, then)  # else the property above fails
    ):
        both = llhttp(parser_loop, data + then)  # pipelined: llhttp splits them alike
        assert len(both) == 2, f"llhttp finds {len(both)} messages in {data + then!r}"
        assert_alike(*both[0], alone, data[alone.head_size :])
        assert_alike(*both[1], second, then[second.head_size :])


# -- what the properties found ------------------------------------------------------------

SINGLETONS = [b"Host", b"User-Agent", b"Content-Type", b"ETag", b"Server", b"Max-Forwards"]
SINGLETONS += [b"Content-Location", b"Content-Range"]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"GET /v0/entity?id=1 HTTP/1.1\r\n\r\n", id="no-Host"),
        pytest.param(
            b"PUT /v0/entity?id=1 HTTP/1.1\r\nContent-Length: 1\r\n\r\nv", id="PUT-no-Host"
        ),
        *[
            pytest.param(
                b"GET /v0/entity?id=1 HTTP/1.1\r\n%s%s: a\r\n%s: b\r\n\r\n"
                % (b"" if name == b"Host" else b"Host: h\r\n", name, name.lower()),
                id=f"two-{name.decode()}",
            )
            for name in SINGLETONS
        ],
        pytest.param(
            b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Key1: k\r\n\r\n",
            id="Sec-WebSocket-Key1",
        ),
    ],
)
def test_a_request_llhttp_refuses_is_not_taken_lean(
    parser_loop: asyncio.AbstractEventLoop, data: bytes
) -> None:
    with pytest.raises(HttpProcessingError):  # the reference refuses it: check that first
        llhttp(parser_loop, data)
    outcome = lean(data)
    assert outcome == "hand off", f"llhttp refuses {data!r}; lean: {describe(outcome)}"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\r\nProxy-Connection: close\r\n\r\n",
            id="Proxy-Connection-close",
        ),
        pytest.param(
            b"PUT /v0/entity?id=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
            b"Proxy-Connection: close\r\n\r\nv",
            id="PUT-Proxy-Connection-close",
        ),
        pytest.param(
            b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
            b"Connection: close\r\n\r\n",
            id="keep-alive-then-close",
        ),
        pytest.param(
            b"GET /v0/entity?id=%zz%%?x:@!$&'()*+,;=//.. HTTP/1.1\r\nHost: h\r\n\r\n",
            id="odd-query",
        ),
    ],
)
def test_a_request_llhttp_takes_is_handed_off_or_taken_alike(
    parser_loop: asyncio.AbstractEventLoop, data: bytes
) -> None:
    outcome = lean(data)
    if isinstance(outcome, LeanRequest):
        assert_llhttp_agrees(parser_loop, data, outcome)
    else:
        assert outcome == "hand off", describe(outcome)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"GET /v0/entity?id=1 HTTP/1.1\nHost: h\n\n", id="bare-LF"),
        pytest.param(
            b"PUT /v0/entity?id=1 HTTP/1.1\nHost: h\nContent-Length: 1\n\nv", id="PUT-bare-LF"
        ),
        pytest.param(b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\n\n", id="bare-LF-fields"),
        pytest.param(b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\r\n\n", id="bare-LF-at-the-end"),
        pytest.param(b"GET /v0/entity?id=1 HTTP/1.1\r\nHost: h\n\r\n", id="LF-CRLF-at-the-end"),
    ],
)
def test_a_head_llhttp_refuses_is_not_waited_for(
    parser_loop: asyncio.AbstractEventLoop, data: bytes
) -> None:
    """A client that ends its lines with a bare LF has sent the whole request: aiohttp
    answers it 400; the lean path must hand it over rather than wait for a CRLF."""
    outcome = lean(data)
    if outcome == "wait":
        assert_not_refused_by_llhttp(parser_loop, data)
    else:
        assert outcome == "hand off", describe(outcome)


def _at_the_line_limit() -> bytes:
    start, end = b"GET /v0/entity?id=", b" HTTP/1.1"
    return start + b"k" * (MAX_LINE - 1 - len(start) - len(end)) + end + b"\r\nHost: h\r\n\r\n"


def _at_the_header_limit() -> bytes:
    line = b"GET /v0/entity?id=1 HTTP/1.1\r\n"
    fields = b"Host: h\r\nX-Pad: "
    fields += b"p" * (LEAN_MAX_HEADER_BYTES - len(fields) - 2) + b"\r\n"
    return line + fields + b"\r\n"


@pytest.mark.parametrize(
    "whole",
    [
        pytest.param(_at_the_line_limit(), id="request-line-of-max_line-1-bytes"),
        pytest.param(_at_the_header_limit(), id="header-block-of-LEAN_MAX_HEADER_BYTES"),
    ],
)
def test_a_request_at_the_limits_is_waited_for_in_every_prefix(whole: bytes) -> None:
    outcome = lean(whole)
    assert isinstance(outcome, LeanRequest), describe(outcome)
    assert_prefixes_wait(whole)
    # Sent slowly: a piece of odd size at a time, the last hundred bytes one by one.
    pieces = [997] * ((len(whole) - 100) // 997)
    assert_a_slow_sender_gets_the_same(whole, pieces + [1] * (len(whole) - sum(pieces)))


# -- the checks can fail ------------------------------------------------------------------

WRK_PUT = b"PUT /v0/entity?id=k1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 5\r\n\r\nhello"


def test_the_checks_catch_a_planted_disagreement(parser_loop: asyncio.AbstractEventLoop) -> None:
    request = LEAN.parse(WRK_PUT)
    assert request is not None
    assert_llhttp_agrees(parser_loop, WRK_PUT, request)
    head = len(WRK_PUT) - 5
    for planted in [
        LeanRequest("GET", "/v0/entity", "id=k1", 5, True, head),
        LeanRequest("PUT", "/v0/entit", "id=k1", 5, True, head),
        LeanRequest("PUT", "/v0/entity", "id=k2", 5, True, head),
        LeanRequest("PUT", "/v0/entity", "id=k1", 5, False, head),
    ]:
        with pytest.raises(AssertionError):
            assert_llhttp_agrees(parser_loop, WRK_PUT, planted)
    with pytest.raises(AssertionError, match="a body of 5 bytes, not 4"):
        assert_llhttp_agrees(
            parser_loop, WRK_PUT, LeanRequest("PUT", "/v0/entity", "id=k1", 4, True, head + 1)
        )
    with pytest.raises(AssertionError, match="waits for more"):
        assert_not_refused_by_llhttp(parser_loop, WRK_PUT.replace(b"\r\n", b"\n"))
    assert_not_refused_by_llhttp(parser_loop, WRK_PUT[:40])
    refused = WRK_PUT.replace(b"Host: 127.0.0.1:8000\r\n", b"")
    with pytest.raises(AssertionError, match="llhttp refuses"):
        assert_llhttp_agrees(
            parser_loop,
            refused,
            LeanRequest("PUT", "/v0/entity", "id=k1", 5, True, len(refused) - 5),
        )


def test_the_prefix_check_catches_a_planted_hand_off_or_early_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert_prefixes_wait(WRK_PUT)
    parse = LEAN.parse

    def hands_off_at_ten(data: bytes) -> LeanRequest | None:
        if len(data) == 10:
            raise NotLean
        return parse(data)

    monkeypatch.setattr(LEAN, "parse", hands_off_at_ten)
    with pytest.raises(AssertionError, match=r"first 10, .* give hand off"):
        assert_prefixes_wait(WRK_PUT)

    def takes_a_head_early(data: bytes) -> LeanRequest | None:
        if len(data) == 30:
            return LeanRequest("PUT", "/v0/entity", "id=k1", 5, True, 30)
        return parse(data)

    monkeypatch.setattr(LEAN, "parse", takes_a_head_early)
    with pytest.raises(AssertionError, match=r"first 30, .* give LeanRequest"):
        assert_prefixes_wait(WRK_PUT)
