"""The raw reference server (bench.bare_server, `--kind raw`) answers every request of
a keep-alive, pipelined connection once, its body skipped by length, and closes a
connection it cannot read."""

from __future__ import annotations

import asyncio

import uvloop

from bench.bare_server import ANSWER, RawHttp, _content_length


async def exchange(payload: list[bytes], expected_answers: int) -> bytes:
    """What the server answered to `payload`, sent in its pieces, once it answered
    `expected_answers` times; then that nothing more came (the connection kept open)."""
    server = await asyncio.get_running_loop().create_server(RawHttp, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for part in payload:  # in pieces: heads and bodies split anywhere
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)
        received = await asyncio.wait_for(
            reader.readexactly(len(ANSWER) * expected_answers), timeout=5
        )
        more = asyncio.ensure_future(reader.read(1))
        await asyncio.sleep(0.1)
        assert not more.done(), "answered more than once a request, or closed"
        more.cancel()
        writer.close()
        return received
    finally:
        server.close()
        await server.wait_closed()


def test_pipelined_requests_with_bodies_split_anywhere_get_one_answer_each() -> None:
    uvloop.run(pipelined())


async def pipelined() -> None:
    put = b"PUT /v0/entity?id=k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    get = b"GET /v0/entity?id=k HTTP/1.1\r\nHost: x\r\n\r\n"
    stream = put + get + put + get
    pieces = [stream[:7], stream[7:40], stream[40:61], stream[61:]]
    received = await exchange(pieces, 4)
    assert received == ANSWER * 4


def test_a_chunked_request_closes_the_connection_unanswered() -> None:
    uvloop.run(chunked_closed())


async def chunked_closed() -> None:
    chunked = b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    server = await asyncio.get_running_loop().create_server(RawHttp, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(chunked)
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_the_length_of_a_body_is_read_from_its_header_in_any_case() -> None:
    assert _content_length(b"PUT / HTTP/1.1\r\ncontent-LENGTH: 12") == 12
    assert _content_length(b"GET / HTTP/1.1\r\nHost: x") == 0
    assert _content_length(b"PUT / HTTP/1.1\r\nContent-Length: x") is None
