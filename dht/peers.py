"""Talking to other nodes: a replica channel per peer (`dht.replica_channel`) for record
reads and writes, an HTTP session per peer for its local range stream, a deadline on
every call and a circuit breaker per peer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from dht.breaker import Breaker, State
from dht.config import NodeConfig
from dht.keys import query_value
from dht.record import CorruptRecord, Record, decode
from dht.replica_channel import PeerError, ReplicaChannel
from dht.replica_protocol import MESSAGE_OVERHEAD, PROTOCOL_VERSION, Hello
from dht.wire import FRAME_LENGTH, RECORDS_PATH, RING_HEADER, SECRET_HEADER

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["Peer", "PeerError", "PeerUnavailable", "Peers", "RecordStream"]


class PeerUnavailable(PeerError):
    """The peer's circuit is open: nothing was sent."""


class Peer:
    def __init__(self, url: str, config: NodeConfig, ring_identity: str) -> None:
        self.url = url
        self._timeout = config.timeout
        self.breaker = Breaker(config.breaker_threshold, config.breaker_cooldown, time.monotonic)
        hello = Hello(PROTOCOL_VERSION, config.self_url, ring_identity, config.secret or "")
        self.channel = ReplicaChannel(
            url,
            config.dial_url(url),
            hello,
            config.max_value_bytes + MESSAGE_OVERHEAD,
            config.timeout,
        )
        headers = {RING_HEADER: ring_identity}
        if config.secret:
            headers[SECRET_HEADER] = config.secret
        self._base_url = URL(config.dial_url(url))
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), headers=headers, auto_decompress=False
        )
        self._was_open = False

    async def close(self) -> None:
        await self.channel.close()
        await self._session.close()

    def available(self) -> bool:
        return self.breaker.available()

    async def get_record(self, key: bytes) -> Record | None:
        return await self._guarded(lambda: self.channel.get(key))

    async def put_record(self, key: bytes, record: Record) -> bool:
        """Whether the peer stored it (False: it held a newer record already)."""
        return await self._guarded(lambda: self.channel.put(key, record))

    async def open_scan(self, start: bytes, end: bytes | None) -> RecordStream:
        """Opens the peer's local range (headers within the deadline) and returns it as a
        stream of records, tombstones included; every later read has the deadline too."""
        query = "start=" + query_value(start)
        if end is not None:
            query += "&end=" + query_value(end)
        url = self._base_url.with_path(RECORDS_PATH).with_query(query)

        async def request() -> aiohttp.ClientResponse:
            response = await self._session.get(URL(str(url), encoded=True))
            if response.status != 200:
                response.release()
                raise PeerError(f"{self.url}: range answered {response.status}")
            return response

        return RecordStream(self.url, await self._guarded(request), self._timeout)

    async def _guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        """Runs one call under the breaker and the deadline, and records its outcome: a
        time-out, a refused or reset connection, a refusal or a bad answer is a failure;
        a cancellation (the coordinator no longer needs the answer) is neither."""
        is_probe = self.breaker.state is not State.CLOSED
        if not self.breaker.allow():
            raise PeerUnavailable(f"{self.url}: circuit open")
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._timeout):
                result = await call()
        except asyncio.CancelledError:
            if is_probe:
                self.breaker.release_probe()
            raise
        except TimeoutError as exc:
            self.channel.deadline_missed(started)
            self._failed()
            raise PeerError(f"{self.url}: no answer within {self._timeout}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self._failed()
            raise PeerError(f"{self.url}: {exc!r}") from exc
        except PeerError:
            self._failed()
            raise
        self.breaker.record_success()
        self._log_transition()
        return result

    def _failed(self) -> None:
        self.breaker.record_failure()
        self._log_transition()

    def status(self) -> dict[str, Any]:
        return {
            "breaker": self.breaker.state.value,
            "retry_after": round(self.breaker.retry_after(), 3),
            "channel_refused": self.channel.refusal,
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
                record = decode(data)
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            await self.aclose()
            raise PeerError(f"{self._url}: range stream failed: {exc!r}") from exc
        except CorruptRecord as exc:
            await self.aclose()
            raise PeerError(f"{self._url}: bad record in range stream: {exc}") from exc
        return key, record

    async def aclose(self) -> None:
        self._response.close()


class Peers:
    """Every other node of the cluster, by URL."""

    def __init__(self, config: NodeConfig, ring_identity: str) -> None:
        self.by_url = {
            url: Peer(url, config, ring_identity)
            for url in config.cluster
            if url != config.self_url
        }

    async def close(self) -> None:
        await asyncio.gather(*(peer.close() for peer in self.by_url.values()))

    def __getitem__(self, url: str) -> Peer:
        return self.by_url[url]
