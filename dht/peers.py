"""Talking to other nodes: one keep-alive session per peer, a deadline on every request,
a circuit breaker per peer, and the internal record protocol (`dht.wire`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from dht.breaker import Breaker, State
from dht.config import NodeConfig
from dht.record import CorruptRecord, Record, decode, encode
from dht.wire import (
    FRAME_LENGTH,
    RECORD_CONTENT_TYPE,
    RECORD_PATH,
    RECORDS_PATH,
    SECRET_HEADER,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class PeerError(Exception):
    """A replica request to a peer failed (time-out, refused, 5xx, bad answer)."""


class PeerUnavailable(PeerError):
    """The peer's circuit is open: nothing was sent."""


class Peer:
    def __init__(self, url: str, config: NodeConfig) -> None:
        self.url = url
        self._timeout = config.timeout
        self.breaker = Breaker(config.breaker_threshold, config.breaker_cooldown, time.monotonic)
        self._headers = {SECRET_HEADER: config.secret} if config.secret else {}
        self._session = aiohttp.ClientSession(
            base_url=config.dial_url(url),
            connector=aiohttp.TCPConnector(limit=config.peer_connections, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None),
            headers=self._headers,
            auto_decompress=False,
        )
        self._was_open = False

    async def close(self) -> None:
        await self._session.close()

    def available(self) -> bool:
        return self.breaker.available()

    async def get_record(self, key: bytes) -> Record | None:
        async def request() -> Record | None:
            async with self._session.get(RECORD_PATH, params=_id_param(key)) as response:
                if response.status == 404:
                    return None
                _check(response, 200)
                return _decode(await response.read())

        return await self._guarded(request)

    async def put_record(self, key: bytes, record: Record) -> None:
        async def request() -> None:
            async with self._session.put(
                RECORD_PATH,
                params=_id_param(key),
                data=encode(record),
                headers={"Content-Type": RECORD_CONTENT_TYPE},
            ) as response:
                _check(response, 200, 201)
                await response.read()

        await self._guarded(request)

    async def open_scan(self, start: bytes, end: bytes | None) -> RecordStream:
        """Opens the peer's local range (headers within the deadline) and returns it as a
        stream of records, tombstones included; every later read has the deadline too."""
        params = {"start": start.decode()}
        if end is not None:
            params["end"] = end.decode()

        async def request() -> aiohttp.ClientResponse:
            response = await self._session.get(RECORDS_PATH, params=params)
            try:
                _check(response, 200)
            except PeerError:
                response.release()
                raise
            return response

        return RecordStream(self.url, await self._guarded(request), self._timeout)

    async def _guarded(self, request: Callable[[], Awaitable[T]]) -> T:
        """Runs one replica request under the breaker and the deadline, and records its
        outcome: a time-out, a refused or reset connection, a 5xx or a bad answer is a
        failure; a cancellation (the coordinator no longer needs the answer) is neither."""
        is_probe = self.breaker.state is not State.CLOSED
        if not self.breaker.allow():
            raise PeerUnavailable(f"{self.url}: circuit open")
        try:
            async with asyncio.timeout(self._timeout):
                result = await request()
        except asyncio.CancelledError:
            if is_probe:
                self.breaker.release_probe()
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, PeerError) as exc:
            self.breaker.record_failure()
            self._log_transition()
            if isinstance(exc, PeerError):
                raise
            raise PeerError(f"{self.url}: {exc!r}") from exc
        self.breaker.record_success()
        self._log_transition()
        return result

    def status(self) -> dict[str, Any]:
        return {
            "breaker": self.breaker.state.value,
            "retry_after": round(self.breaker.retry_after(), 3),
        }

    def _log_transition(self) -> None:
        is_open = self.breaker.state is not State.CLOSED
        if is_open != self._was_open:
            self._was_open = is_open
            if is_open:
                log.warning("circuit to %s opened", self.url)
            else:
                log.info("circuit to %s closed", self.url)


class RecordStream:
    """A peer's local range being read: async-iterates (key, record) frames; `aclose`
    releases the connection, even when iteration never started."""

    def __init__(self, url: str, response: aiohttp.ClientResponse, timeout: float) -> None:
        self._url = url
        self._response = response
        self._timeout = timeout

    def __aiter__(self) -> RecordStream:
        return self

    async def __anext__(self) -> tuple[bytes, Record]:
        content = self._response.content
        try:
            async with asyncio.timeout(self._timeout):
                try:
                    header = await content.readexactly(FRAME_LENGTH.size)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise
                    await self.aclose()  # a clean end between frames
                    raise StopAsyncIteration from None
                (key_length,) = FRAME_LENGTH.unpack(header)
                key = await content.readexactly(key_length)
                (data_length,) = FRAME_LENGTH.unpack(await content.readexactly(FRAME_LENGTH.size))
                data = await content.readexactly(data_length)
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            await self.aclose()
            raise PeerError(f"{self._url}: range stream failed: {exc!r}") from exc
        return key, _decode(data)

    async def aclose(self) -> None:
        self._response.close()


def _id_param(key: bytes) -> dict[str, str]:
    return {"id": key.decode()}


def _check(response: aiohttp.ClientResponse, *expected: int) -> None:
    if response.status not in expected:
        raise PeerError(f"{response.url}: answered {response.status}")


def _decode(data: bytes) -> Record:
    try:
        return decode(data)
    except CorruptRecord as exc:
        raise PeerError(f"bad record from peer: {exc}") from exc


class Peers:
    """Every other node of the cluster, by URL."""

    def __init__(self, config: NodeConfig) -> None:
        self.by_url = {url: Peer(url, config) for url in config.cluster if url != config.self_url}

    async def close(self) -> None:
        await asyncio.gather(*(peer.close() for peer in self.by_url.values()))

    def __getitem__(self, url: str) -> Peer:
        return self.by_url[url]
