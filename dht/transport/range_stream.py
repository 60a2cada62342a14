"""A peer's local range as the cluster-wide range reads it: the HTTP answer to
`RECORDS_PATH` (`dht.transport.wire`), one (key, record) frame at a time.

Every read has the peer's deadline, and a frame's lengths are believed only up to the
longest key and record a node may hold, so a broken or hostile peer costs a PeerError,
never a hang or a 4 GiB allocation.
"""

from __future__ import annotations

import asyncio

import aiohttp

from dht.model.record import CorruptRecord, Record, decode
from dht.transport.channel import PeerError
from dht.transport.messages import RemoteTransportError
from dht.transport.wire import FRAME_LENGTH


class OversizedFrame(RemoteTransportError, ValueError):
    """A range stream frame claims a key or record longer than any node may hold."""


class RecordStream:
    """A peer's local range being read: async-iterates (key, record) frames; `aclose`
    releases the connection, even when iteration never started. A frame's lengths are
    checked against `max_key` and `max_record` before anything of that length is read."""

    def __init__(
        self,
        url: str,
        response: aiohttp.ClientResponse,
        timeout: float,
        max_key: int,
        max_record: int,
    ) -> None:
        self._url = url
        self._response = response
        self.timeout = timeout
        self._max_key = max_key
        self._max_record = max_record

    def __aiter__(self) -> RecordStream:
        return self

    async def __anext__(self) -> tuple[bytes, Record]:
        content = self._response.content
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    header = await content.readexactly(FRAME_LENGTH.size)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise
                    await self.aclose()  # a clean end between frames
                    raise StopAsyncIteration from None
                key_length = _length(header, self._max_key, "key")
                key = await content.readexactly(key_length)
                raw_length = await content.readexactly(FRAME_LENGTH.size)
                data = await content.readexactly(_length(raw_length, self._max_record, "record"))
                record = decode(data)
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            await self.aclose()
            raise PeerError(f"{self._url}: range stream failed: {exc!r}") from exc
        except (CorruptRecord, OversizedFrame) as exc:
            await self.aclose()
            raise PeerError(f"{self._url}: bad record in range stream: {exc}") from exc
        return key, record

    async def aclose(self) -> None:
        self._response.close()


def _length(raw: bytes, longest: int, what: str) -> int:
    length: int = FRAME_LENGTH.unpack(raw)[0]
    if length > longest:
        raise OversizedFrame(f"a {what} of {length} bytes, over the largest possible ({longest})")
    return length
