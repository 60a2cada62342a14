"""A client's HTTP request to a simulated node, through the node's real HTTP edge.

The request crosses the simulated network as bytes on a connection of its own (a new
connection per request, as the kit's clients make), and the node answers it with the
code a real node runs: its lean HTTP path (`dht.web.lean_http`), `HttpServer`'s in-flight
bound and fence, and `ClientApi`'s handlers. The answer is read back as bytes: its
status and, by its Content-Length, its body.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast
from urllib.parse import quote

from dht.simulation.network import Network

_HEAD_END = b"\r\n\r\n"


class _Answer(asyncio.Protocol):
    """Reads one HTTP answer: (status, body) once its body has come whole."""

    def __init__(self) -> None:
        self.done: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        head_end = self._buffer.find(_HEAD_END)
        if head_end < 0 or self.done.done():
            return
        lines = bytes(self._buffer[:head_end]).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = bytes(self._buffer[head_end + len(_HEAD_END) :])
        if len(body) >= length:
            self.done.set_result((status, body[:length]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionResetError("closed before the answer"))


def request_bytes(
    method: str, key: bytes, value: bytes | None, replicas: str | None, host: str
) -> bytes:
    """The request a client sends for `method` of /v0/entity?id=`key`."""
    target = f"/v0/entity?id={quote(key)}"
    if replicas is not None:
        target += f"&replicas={quote(replicas, safe='/')}"
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"
    if value is not None:
        head += f"Content-Length: {len(value)}\r\n"
    return (head + "\r\n").encode() + (value or b"")


async def http_request(
    network: Network,
    src: str,
    port: int,
    method: str,
    key: bytes,
    value: bytes | None,
    replicas: str | None,
) -> tuple[int, bytes]:
    """One client request from `src` to the node on `port`: (status, body). Raises
    OSError when the node refuses the connection or resets it before it answers; the
    caller's deadline ends a silence."""
    answer = _Answer()
    transport, _ = await network.connect(src, port, lambda: answer, accept=_http_protocol)
    try:
        transport.write(request_bytes(method, key, value, replicas, f"127.0.0.1:{port}"))
        return await answer.done
    finally:
        transport.close()


def _http_protocol(node: Any) -> asyncio.Protocol:
    """The protocol a node's shared port gives a connection whose first byte is not the
    replica channel's: its lean HTTP path."""
    return cast(asyncio.Protocol, node.http_protocol())
