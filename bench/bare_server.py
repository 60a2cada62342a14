"""The references: servers that answer every request with an empty 200 and do nothing
else, so dht's figures read as a share of what the stack allows on this machine.

- `aiohttp` (the default): a bare aiohttp + uvloop application, the stack dht's own
  HTTP edge is built on;
- `raw`: a uvloop `asyncio.Protocol` that reads HTTP/1.1 requests (keep-alive,
  pipelined, bodies by Content-Length) and writes a fixed answer: what Python on uvloop
  allows with no framework at all, the ceiling of any Python server here.

    python -m bench.bare_server --port 8099 [--kind raw]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

from aiohttp import web

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: bare\r\n\r\n"
HEAD_END = b"\r\n\r\n"
MAX_HEAD = 64 * 1024


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"")


class RawHttp(asyncio.Protocol):
    """HTTP/1.1 at its least: each request's head up to the blank line, its body skipped
    by Content-Length, one fixed answer each, in order. A request it cannot read (no
    blank line in 64 KiB, a chunked body, a bad length) closes the connection."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._body_left = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not registered as an asyncio.Transport: no isinstance.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        answers = 0
        while True:
            if self._body_left:
                taken = min(self._body_left, len(buffer))
                del buffer[:taken]
                self._body_left -= taken
                if self._body_left:
                    break
                answers += 1
                continue
            end = buffer.find(HEAD_END)
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._close()
                break
            length = _content_length(bytes(buffer[:end]))
            if length is None:
                self._close()
                return
            del buffer[: end + len(HEAD_END)]
            if length:
                self._body_left = length
            else:
                answers += 1
        if answers and self._transport is not None:
            self._transport.write(ANSWER * answers)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _content_length(head: bytes) -> int | None:
    """The body's length a request head announces (0 with none); None for a chunked
    body or a length that is not a number."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            if not value.strip().isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


async def serve_raw(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawHttp, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=("aiohttp", "raw"), default="aiohttp")
    args = parser.parse_args()
    import uvloop

    if args.kind == "raw":
        uvloop.run(serve_raw(args.port))
        return
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
