"""A peer that half-closes its replica channel gets every answer, and the connection
closes once none is left to give (dht/transport/channel_server.py): also when the
write it waited for ends with no answer at all (its future cancelled)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.transport.channel_server import ServerConnection
from dht.transport.messages import Hello, PutRecord
from dht.transport.proof import Side, new_nonce


class Transport:
    """What the server end uses of a TCP transport, writes kept."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.written += part

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Service:
    """Every write lands later, when the test says."""

    def __init__(self) -> None:
        self.landing: list[asyncio.Future[bool]] = []

    def admit(self, hello: Hello) -> str | None:
        return None

    def nonce(self) -> bytes:
        return new_nonce()

    def proof(self, side: Side, hello: Hello, server_nonce: bytes) -> bytes:
        return b""

    def rpc_get(self, key: bytes) -> Record | None:
        return None

    def rpc_put(self, key: bytes, record: Record, sender: str) -> asyncio.Future[bool]:
        landing: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.landing.append(landing)
        return landing


def half_closed_with_a_write_landing() -> tuple[ServerConnection, Transport, Service]:
    service = Service()
    connection = ServerConnection(
        service, 1 << 20, set(), RateLimitedLog(logging.getLogger("test"))
    )
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection._answer(PutRecord(1, b"k", Record.live(1, b"v")), 0)
    assert connection.eof_received()  # kept open: a write is landing
    return connection, transport, service


async def test_a_half_closed_connection_closes_once_its_write_is_answered() -> None:
    _, transport, service = half_closed_with_a_write_landing()
    service.landing[0].set_result(True)
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.written  # the answer
    assert transport.closing


async def test_a_half_closed_connection_closes_when_its_write_is_cancelled() -> None:
    """Nothing is sent for a cancelled write, so no flush followed, and the connection
    the peer had half-closed stayed open for ever."""
    _, transport, service = half_closed_with_a_write_landing()
    service.landing[0].cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.closing
