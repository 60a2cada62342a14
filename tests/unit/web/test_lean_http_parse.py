"""The lean HTTP path's parser and writer (dht.web.lean_parse, dht.web.lean_http), on
examples: the requests it takes and what it makes of them, the ones it hands to aiohttp
or waits for the rest of, and its answers as aiohttp's own client-side parsers read them
back.
tests/fuzz/test_lean_http.py compares the parser with llhttp on generated requests."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpResponseParser, HttpVersion11
from aiohttp.http_parser import HttpResponseParserPy, RawResponseMessage
from aiohttp.web_protocol import RequestHandler

from dht.config import NodeConfig, request_line_limit
from dht.limits import LEAN_MAX_BODY, LEAN_MAX_HEADER_BYTES, LEAN_MAX_HEADERS
from dht.model.machine import SYSTEM, Machine
from dht.web.admission import BodyPace
from dht.web.lean_http import SERVER, LeanHttp
from dht.web.lean_parse import LeanParser, LeanRequest, NotLean
from dht.web.server import Answer, Reply

# A node's: a key percent-encoded in the request line, and the rest (dht/node.py).
MAX_LINE = request_line_limit(NodeConfig.max_key_bytes)


async def _never_served(method: str, path: str, query: str, body: bytes) -> Answer:
    raise AssertionError("nothing is served here")


def _never_handed_off() -> RequestHandler:
    raise AssertionError("nothing is handed off here")


def lean(machine: Machine = SYSTEM) -> LeanHttp:
    return LeanHttp(
        {"/v0/entity": {"GET", "PUT", "DELETE"}},
        _never_served,
        _never_handed_off,
        MAX_LINE,
        BodyPace(NodeConfig.min_body_rate),
        machine=machine,
    )


PARSER = LeanParser({"/v0/entity": {"GET", "PUT", "DELETE"}}, MAX_LINE)


def taken(data: bytes) -> LeanRequest:
    request = PARSER.parse(data)
    assert request is not None, f"waits for more after {data!r}"
    return request


def get(*fields: bytes, target: bytes = b"/v0/entity?id=k1") -> bytes:
    return b"GET %s HTTP/1.1\r\n%s\r\n" % (target, b"".join(field + b"\r\n" for field in fields))


WRK_PUT = (
    b"PUT /v0/entity?id=key000123 HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8000\r\n"
    b"Content-Length: 16\r\n"
    b"\r\n"
    b"value-0000000123"
)
HOST = b"Host: 127.0.0.1:8000"

# -- what it takes --------------------------------------------------------------------------


def test_a_typical_wrk_put_is_taken_with_its_body_s_place() -> None:
    request = taken(WRK_PUT)
    assert (request.method, request.path, request.query) == ("PUT", "/v0/entity", "id=key000123")
    assert request.length == 16
    assert request.keep_alive
    assert request.head_size == len(WRK_PUT) - 16
    assert WRK_PUT[request.head_size : request.head_size + request.length] == b"value-0000000123"


def test_a_get_and_a_delete_are_taken_with_no_body() -> None:
    request = taken(get(HOST, b"User-Agent: wrk", target=b"/v0/entity?id=a%20b&x=%zz"))
    assert (request.method, request.path, request.query) == ("GET", "/v0/entity", "id=a%20b&x=%zz")
    assert (request.length, request.keep_alive) == (0, True)
    delete = b"DELETE /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"
    request = taken(delete)
    assert (request.method, request.query, request.length) == ("DELETE", "id=k", 0)
    assert request.head_size == len(delete)


@pytest.mark.parametrize(
    ("connection", "keep_alive"),
    [
        (b"close", False),
        (b"Close", False),
        (b"CLOSE", False),
        (b"keep-alive", True),
        (b"Keep-Alive", True),
        (None, True),
    ],
)
def test_connection_close_alone_ends_the_keep_alive(
    connection: bytes | None, keep_alive: bool
) -> None:
    fields = [HOST] if connection is None else [HOST, b"Connection: " + connection]
    assert taken(get(*fields)).keep_alive is keep_alive


def test_odd_but_valid_whitespace_is_taken() -> None:
    data = (
        b"PUT /v0/entity?id=k HTTP/1.1\r\nHost:h\r\nContent-Length:\t 3 \t\r\n"
        b"X-Empty:\r\nX-Inner: a  b\tc\r\n\r\nabc"
    )
    request = taken(data)
    assert (request.length, request.head_size) == (3, len(data) - 3)


def test_the_limits_themselves_are_taken() -> None:
    """The other side of the hand-offs at the limits below."""
    put = b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % LEAN_MAX_BODY
    assert taken(put).length == LEAN_MAX_BODY
    line = b"GET /v0/entity?id=" + b"k" * (MAX_LINE - 1 - len(b"GET /v0/entity?id= HTTP/1.1"))
    head = line + b" HTTP/1.1\r\nHost: h\r\n\r\n"
    assert head.index(b"\r\n") == MAX_LINE - 1
    assert taken(head).head_size == len(head)
    assert taken(get(HOST, *[b"X-%d: v" % number for number in range(LEAN_MAX_HEADERS - 1)]))
    pad = b"X-Pad: " + b"p" * (LEAN_MAX_HEADER_BYTES - len(b"Host: h\r\nX-Pad: \r\n"))
    head = get(b"Host: h", pad)
    assert head.index(b"\r\n\r\n") - head.index(b"\r\n") == LEAN_MAX_HEADER_BYTES
    assert taken(head).head_size == len(head)


# -- what it hands off ----------------------------------------------------------------------

HAND_OFFS = {
    "chunked": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"1\r\nv\r\n0\r\n\r\n",
    "chunked-and-length": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n1\r\nv\r\n0\r\n\r\n",
    "expect-100-continue": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
    b"Expect: 100-continue\r\n\r\n",
    "upgrade": get(HOST, b"Connection: Upgrade", b"Upgrade: websocket"),
    "upgrade-alone": get(HOST, b"Upgrade: h2c"),
    "content-encoding": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
    b"Content-Encoding: gzip\r\n\r\nv",
    "connection-list": get(HOST, b"Connection: keep-alive, Upgrade"),
    "http-1.0": b"GET /v0/entity?id=k HTTP/1.0\r\n\r\n",
    "absolute-form": b"GET http://127.0.0.1:8000/v0/entity?id=k HTTP/1.1\r\nHost: h\r\n\r\n",
    "put-without-length": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\n\r\n",
    "put-above-max-body": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n"
    % (LEAN_MAX_BODY + 1),
    "put-length-of-ten-digits": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\n"
    b"Content-Length: 0000000001\r\n\r\nv",
    "put-signed-length": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nv",
    "put-two-lengths": b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
    b"Content-Length: 1\r\n\r\nv",
    "get-with-a-body": get(HOST, b"Content-Length: 1") + b"v",
    "delete-with-a-body": b"DELETE /v0/entity?id=k HTTP/1.1\r\nHost: h\r\n"
    b"Content-Length: 2\r\n\r\nvv",
    "request-line-at-max_line": b"GET /v0/entity?id="
    + b"k" * (MAX_LINE - len(b"GET /v0/entity?id= HTTP/1.1"))
    + b" HTTP/1.1\r\nHost: h\r\n\r\n",
    "request-line-at-max_line-unfinished": b"GET /v0/entity?id=" + b"k" * MAX_LINE,
    "too-many-headers": get(HOST, *[b"X-%d: v" % number for number in range(LEAN_MAX_HEADERS)]),
    "header-block-above-its-limit": get(
        b"Host: h", b"X-Pad: " + b"p" * (LEAN_MAX_HEADER_BYTES + 1 - len(b"Host: h\r\nX-Pad: \r\n"))
    ),
    "header-block-above-its-limit-unfinished": b"GET /v0/entity?id=k HTTP/1.1\r\nX: "
    + b"p" * LEAN_MAX_HEADER_BYTES,
    "header-without-colon": get(HOST, b"X-No-Colon"),
    "space-before-colon": get(HOST, b"X-Space : v"),
    "obs-fold": get(HOST, b"X-Folded: a", b" b"),
    "cr-cr-lf": b"GET /v0/entity?id=k HTTP/1.1\r\r\nHost: h\r\n\r\n",
    "bare-lf-in-a-field": b"GET /v0/entity?id=k HTTP/1.1\r\nHost: h\nX: v\r\n\r\n",
    "nul-in-value": get(HOST, b"X: a\x00b"),
    "high-byte-in-value": get(HOST, b"X: caf\xc3\xa9"),
    "other-path": get(HOST, target=b"/v0/entityX?id=1"),
    "path-without-query": get(HOST, target=b"/v0/entity"),
    "fragment": get(HOST, target=b"/v0/entity?id=1#f"),
    "space-in-target": get(HOST, target=b"/v0/entity?id=a b"),
    "head": b"HEAD /v0/entity?id=k HTTP/1.1\r\nHost: h\r\n\r\n",
    "post": b"POST /v0/entity?id=k HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
    "lowercase-method": b"get /v0/entity?id=k HTTP/1.1\r\nHost: h\r\n\r\n",
    "tls-hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
}


@pytest.mark.parametrize("data", list(HAND_OFFS.values()), ids=list(HAND_OFFS))
def test_what_the_lean_path_does_not_take_is_handed_off(data: bytes) -> None:
    with pytest.raises(NotLean):
        PARSER.parse(data)


# -- what it waits for ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"P",
        b"DELE",
        b"GET /v0/ent",
        b"PUT /v0/entity?id=key000123 HTTP/1.",
        b"PUT /v0/entity?id=key000123 HTTP/1.1\r",
        b"PUT /v0/entity?id=key000123 HTTP/1.1\r\n",
        b"PUT /v0/entity?id=key000123 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Le",
        b"PUT /v0/entity?id=key000123 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 16\r\n",
        b"PUT /v0/entity?id=key000123 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: 16\r\n\r",
    ],
)
def test_an_unfinished_head_is_waited_for(data: bytes) -> None:
    assert PARSER.parse(data) is None


def test_an_unfinished_body_is_left_to_come() -> None:
    """The head is whole: the request is taken, with the length of the body on its way."""
    for cut in (len(WRK_PUT) - 16, len(WRK_PUT) - 1):
        request = taken(WRK_PUT[:cut])
        assert (request.length, request.head_size) == (16, len(WRK_PUT) - 16)


def test_a_second_request_behind_the_first_does_not_move_its_end() -> None:
    second = get(HOST, b"Connection: close")
    first = taken(WRK_PUT + second)
    assert (first.method, first.head_size + first.length) == ("PUT", len(WRK_PUT))
    rest = taken((WRK_PUT + second)[first.head_size + first.length :])
    assert (rest.method, rest.keep_alive, rest.head_size) == ("GET", False, len(second))


# -- its answers ----------------------------------------------------------------------------


class Recorder(asyncio.Transport):
    """A transport that keeps what it is given to send, call by call."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes | bytearray | memoryview] = []
        self.batches: list[list[bytes | bytearray | memoryview]] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.batches.append(list(list_of_data))

    def sent(self) -> bytes:
        return b"".join(self.writes) + b"".join(b"".join(batch) for batch in self.batches)


class StrictResponseParser(HttpResponseParserPy):
    """aiohttp's pure-Python response parser, without the leniency it allows servers."""

    lax = False


PARSERS = [
    pytest.param(HttpResponseParser, id="llhttp"),
    pytest.param(StrictResponseParser, id="python-strict"),
]


def read_back(
    parser_class: type[HttpResponseParserPy], data: bytes
) -> tuple[RawResponseMessage, bytes]:
    """The one response in `data`, as aiohttp's client reads it, and its body."""
    loop = asyncio.get_running_loop()
    parser = parser_class(BaseProtocol(loop), loop, 2**20, max_line_size=8190, max_field_size=8190)
    messages, upgraded, tail = parser.feed_data(data)
    assert (len(messages), upgraded, tail) == (1, False, b"")
    message, payload = messages[0]
    assert payload.is_eof()
    return message, payload.read_nowait()


REPLIES = {
    "value": Reply(200, b"the value", "application/octet-stream", (("X-Version", "17"),)),
    "stored": Reply(201, b"stored\n"),
    "empty": Reply(200, b"", "application/octet-stream"),
    "bad-request": Reply(400, b"Bad Request: no id\n"),
    "too-large": Reply(413, b"Payload Too Large\n"),
    "overloaded": Reply(503, b"Service Unavailable: overloaded\n", headers=(("Retry-After", "1"),)),
}


@pytest.mark.parametrize("parser_class", PARSERS)
@pytest.mark.parametrize("reply", list(REPLIES.values()), ids=list(REPLIES))
@pytest.mark.parametrize("keep_alive", [True, False], ids=["keep-alive", "close"])
async def test_an_answer_reads_back_as_aiohttp_s_client_reads_it(
    parser_class: type[HttpResponseParserPy], reply: Reply, keep_alive: bool
) -> None:
    transport = Recorder()
    lean().write(transport, reply, keep_alive)
    assert (len(transport.writes), transport.batches) == (1, [])  # a small answer: one call
    message, body = read_back(parser_class, transport.sent())
    assert message.version == HttpVersion11
    assert (message.code, message.reason) == (reply.status, HTTPStatus(reply.status).phrase)
    assert body == reply.body
    headers = message.headers
    assert headers["Content-Type"] == reply.content_type
    assert headers["Content-Length"] == str(len(reply.body))
    assert headers["Server"] == SERVER
    for name, value in reply.headers:
        assert headers.getall(name) == [value]
    assert message.should_close is not keep_alive
    assert headers.getall("Connection", []) == ([] if keep_alive else ["close"])
    expected = {"Content-Type", "Content-Length", "Server", "Date"}
    expected |= {name for name, _ in reply.headers} | (set() if keep_alive else {"Connection"})
    assert {name for name, _ in message.raw_headers} == {name.encode() for name in expected}
    assert len(message.raw_headers) == len(expected)


async def test_the_date_is_the_second_s_and_follows_the_clock() -> None:
    clock = SimpleNamespace(now=784111777.25)  # RFC 9110's example date
    http = lean(Machine(wall=lambda: clock.now))
    dates = []
    for now in (784111777.25, 784111777.9, 784111778.1):
        clock.now = now
        transport = Recorder()
        http.write(transport, Reply(200, b"v"), True)
        message, _ = read_back(HttpResponseParser, transport.sent())
        dates.append(message.headers["Date"])
    assert dates == [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:38 GMT",
    ]
    assert dates[0] == formatdate(784111777, usegmt=True)


async def test_a_large_body_goes_in_a_call_of_its_own_without_a_copy() -> None:
    body = bytes(range(256)) * 80  # 20 KiB
    reply = Reply(200, body, "application/octet-stream")
    transport = Recorder()
    lean().write(transport, reply, False)
    assert transport.writes == []
    assert len(transport.batches) == 1
    assert transport.batches[0][-1] is body
    for parser_class in (HttpResponseParser, StrictResponseParser):
        message, read = read_back(parser_class, transport.sent())
        assert (message.code, read) == (200, body)
        assert message.headers["Content-Length"] == "20480"
        assert message.should_close


async def test_answers_of_a_kind_share_their_head_and_differ_in_keep_alive() -> None:
    http = lean()
    sent = []
    for keep_alive in (True, True, False):
        transport = Recorder()
        http.write(transport, Reply(404, b"Not Found\n"), keep_alive)
        sent.append(transport.sent())
    assert sent[0].split(b"Date: ")[0] == sent[1].split(b"Date: ")[0]
    assert b"Connection: close\r\n" not in sent[0]
    assert b"Connection: close\r\n" in sent[2]


def test_the_server_header_names_this_python_and_aiohttp() -> None:
    assert (
        SERVER
        == f"Python/{sys.version_info[0]}.{sys.version_info[1]} aiohttp/{aiohttp.__version__}"
    )
