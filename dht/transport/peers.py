"""Talking to other nodes: a replica channel per peer (`dht.transport.channel`) for record
reads and writes, an HTTP session per peer for its local range stream
(`dht.transport.range_stream`), a deadline on every call and a circuit breaker per
peer."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from dht.config import NodeConfig
from dht.limits import MESSAGE_OVERHEAD
from dht.model.keys import query_value
from dht.model.machine import SYSTEM, Machine
from dht.model.record import Record
from dht.transport.breaker import Breaker, State
from dht.transport.channel import PeerError, ReplicaChannel, ReplicaFull
from dht.transport.messages import (
    PROTOCOL_VERSION,
    Answer,
    GetRecord,
    Hello,
    PutRecord,
    Request,
)
from dht.transport.peer_call import (
    PendingCall,
    VersionRefused,
    is_large,
    record_of,
    stored_of,
)
from dht.transport.protocol import Budget
from dht.transport.range_stream import RecordStream
from dht.transport.wire import RECORDS_PATH, RING_HEADER, proving

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "Peer",
    "PeerError",
    "PeerUnavailable",
    "Peers",
    "ReplicaFull",
    "VersionRefused",
]


class PeerUnavailable(PeerError):
    """The peer's circuit is open: nothing was sent."""


# (outcome, seconds to the answer or None): one call to a peer ended, for the metrics.
CallObserver = Callable[[str, float | None], None]
# The same, for every peer: (the peer's URL, outcome, seconds or None).
PeerCallObserver = Callable[[str, str, float | None], None]


def _unobserved(outcome: str, seconds: float | None) -> None:
    pass


class Peer:
    """Another node, as a replica (`dht.transport.replica.Replica`) and for the range
    and the internal JSON requests."""

    remote = True

    def __init__(
        self,
        url: str,
        config: NodeConfig,
        ring_identity: str,
        budget: Budget | None = None,
        tls: ssl.SSLContext | None = None,
        machine: Machine = SYSTEM,
        observe_call: CallObserver = _unobserved,
    ) -> None:
        """`budget`: the node's byte budget, which counts a large write given up on
        midway until its last fragments have left; `tls`: the context every connection
        to the peer is made with (`dht.transport.tls`), or None for plain TCP;
        `machine`: the clocks calls are timed by and the randomness of nonces;
        `observe_call`: told how each call ended (`dht.metrics.CALL_OUTCOMES`)."""
        self.url = url
        self.machine = machine
        self.observe_call = observe_call
        self.timeout = config.timeout
        # The longest key and record a range stream may carry: a frame claiming more is
        # not believed (nor its length allocated).
        self._longest = (config.max_key_bytes, config.max_value_bytes + MESSAGE_OVERHEAD)
        self.breaker = Breaker(config.breaker_threshold, config.breaker_cooldown, machine.monotonic)
        self._hello = Hello(PROTOCOL_VERSION, config.self_url, ring_identity, b"")
        self.channel = ReplicaChannel(
            url,
            config.dial_url(url),
            self._hello,
            config.secret,
            config.max_value_bytes + MESSAGE_OVERHEAD,
            config.timeout,
            budget,
            tls,
            machine.random_bytes,
        )
        base = URL(config.dial_url(url))
        self._base_url = base.with_scheme("https") if tls is not None else base
        # The name its certificate must bear: its own URL's host, not a proxy's.
        self._server_hostname = URL(url).host if tls is not None else None
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            headers={RING_HEADER: ring_identity},
            auto_decompress=False,
            middlewares=(proving(config.secret, machine, url),) if config.secret else (),
            connector=aiohttp.TCPConnector(ssl=tls if tls is not None else True),
        )
        self._was_open = False
        # Calls in the order they were sent, so in the order their deadlines come: one
        # timer, for the first of them, serves every call to this peer.
        self._deadlines: deque[PendingCall[Any]] = deque()
        self._sweep_timer: asyncio.TimerHandle | None = None
        # Bytes of the large requests sent to the peer, and of those not settled yet,
        # which a large call's deadline weighs (`PendingCall`); what waits for one of
        # them to settle.
        self.large_sent = 0
        self.large_unsettled = 0
        self.large_waiting = 0  # of the unsettled, bytes declined and waiting to go again
        self._after_large: list[Callable[[], None]] = []
        self.closed = False

    def set_identity(self, ring_identity: str) -> None:
        """The ring identity the next connections to this peer present (after a step of
        a membership change; connections already open keep theirs)."""
        self._hello = dataclasses.replace(self._hello, ring=ring_identity)
        self.channel.hello = self._hello
        self._session.headers[RING_HEADER] = ring_identity

    async def close(self) -> None:
        """Ends every call to the peer now: those on the channel, and the large writes
        it declined that wait to go again (on no connection, they fail here)."""
        self.closed = True
        await self.channel.close()
        waiting, self._after_large = self._after_large, []
        for callback in waiting:
            callback()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        await self._session.close()

    def available(self) -> bool:
        return self.breaker.available()

    def retry_after(self) -> float:
        return self.breaker.retry_after()

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        """The peer's record for `key` (None: it holds none). A large record gets time to
        travel on top of the deadline, by the bytes of it received (`PendingCall`)."""
        return self._call(lambda call_id: GetRecord(call_id, key), record_of)

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        """Whether the peer stored it (False: it held a newer record already). A large
        value gets time to travel on top of the deadline, and more when other large
        values to the peer travel with it; declined for the peer's byte budget, it is
        sent again within its deadline (`PendingCall`)."""
        return self._call(
            lambda call_id: PutRecord(call_id, key, record),
            stored_of,
            len(key) + len(record.value),
        )

    def after_large_settled(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once the next large request to the peer has settled."""
        self._after_large.append(callback)

    def _large_settled(self, size: int, result: asyncio.Future[Any]) -> None:
        self.large_unsettled -= size
        waiting, self._after_large = self._after_large, []
        for callback in waiting:
            callback()

    def _call(
        self,
        request_for: Callable[[int], Request],
        result_of: Callable[[Answer], T],
        size: int = 0,
    ) -> asyncio.Future[T]:
        """One call on the channel, under the breaker and the deadline (`--timeout`, plus
        more for a request of `size` bytes when it is large). A plain future, resolved
        from the channel's callback or the deadline's timer: no task, no coroutine per
        call. It fails with PeerError; cancelling it abandons the call."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()
        is_probe = self.breaker.state is not State.CLOSED
        if not self.breaker.allow():
            self.observe_call("circuit_open", None)
            result.set_exception(PeerUnavailable(f"{self.url}: circuit open"))
            return result
        if not is_large(size):
            size = 0
        else:
            self.large_sent += size
            self.large_unsettled += size
            result.add_done_callback(functools.partial(self._large_settled, size))
        call = PendingCall(self, result, result_of, is_probe, loop.time(), request_for, size)
        if size:  # a deadline of its own: the sweep relies on the plain ones' order
            call.time_itself(loop)
            return result
        self._deadlines.append(call)
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_at(call.sent + self.timeout, self._sweep)
        return result

    def _sweep(self) -> None:
        """Ends the wait of every call whose plain deadline has come (`PendingCall.expire`
        fails it, or moves a large answer under way to a timer of its own), then waits
        for the next deadline."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines:
            call = deadlines[0]
            if call.settled:
                deadlines.popleft()
            elif call.sent + self.timeout <= now:
                deadlines.popleft()
                call.expire()
            else:
                break
        self._sweep_timer = (
            loop.call_at(deadlines[0].sent + self.timeout, self._sweep) if deadlines else None
        )

    async def open_scan(self, start: bytes, end: bytes | None) -> RecordStream:
        """Opens the peer's local range (headers within the deadline) and returns it as a
        stream of records, tombstones included; every later read has the deadline too."""
        query = "start=" + query_value(start)
        if end is not None:
            query += "&end=" + query_value(end)
        # Encoded already: yarl must not encode the % of each escape a second time.
        url = URL(f"{self._base_url}{RECORDS_PATH}?{query}", encoded=True)

        async def request() -> aiohttp.ClientResponse:
            response = await self._session.get(url, server_hostname=self._server_hostname)
            if response.status != 200:
                response.release()
                raise PeerError(f"{self.url}: range answered {response.status}")
            return response

        return RecordStream(self.url, await self._guarded(request), self.timeout, *self._longest)

    async def get_json(self, path: str) -> tuple[Any, Mapping[str, str]]:
        """One GET of a peer's JSON and its headers (its membership step and clock, for
        the fences), within the deadline but outside the breaker: a peer not up yet when
        this node starts must not open a circuit that replication then waits on."""
        try:
            async with asyncio.timeout(self.timeout):
                async with self._session.get(
                    self._base_url.with_path(path), server_hostname=self._server_hostname
                ) as answer:
                    if answer.status != 200:
                        raise PeerError(f"{self.url}: {path} answered {answer.status}")
                    return await answer.json(), answer.headers
        except TimeoutError as exc:
            raise PeerError(f"{self.url}: no answer within {self.timeout}s") from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise PeerError(f"{self.url}: {exc!r}") from exc

    async def post_json(self, path: str, message: dict[str, Any]) -> dict[str, Any]:
        """One internal JSON request (anti-entropy's), under the breaker and deadline."""

        async def request() -> dict[str, Any]:
            async with self._session.post(
                self._base_url.with_path(path), json=message, server_hostname=self._server_hostname
            ) as answer:
                if answer.status != 200:
                    raise PeerError(f"{self.url}: {path} answered {answer.status}")
                result: dict[str, Any] = await answer.json()
                return result

        return await self._guarded(request)

    async def _guarded(self, call: Callable[[], Awaitable[T]]) -> T:
        """Runs one HTTP request (the range) under the breaker and the deadline, and
        records its outcome as `PendingCall` does for channel calls."""
        is_probe = self.breaker.state is not State.CLOSED
        if not self.breaker.allow():
            self.observe_call("circuit_open", None)
            raise PeerUnavailable(f"{self.url}: circuit open")
        started = self.machine.monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                result = await call()
        except asyncio.CancelledError:
            self.observe_call("cancelled", None)
            if is_probe:
                self.breaker.release_probe()
            raise
        except TimeoutError as exc:
            self.failed("timeout", None)
            raise PeerError(f"{self.url}: no answer within {self.timeout}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self.failed("error", None)
            raise PeerError(f"{self.url}: {exc!r}") from exc
        except PeerError:
            self.failed("error", self.machine.monotonic() - started)
            raise
        self.succeeded(self.machine.monotonic() - started)
        return result

    def succeeded(self, seconds: float) -> None:
        self.observe_call("ok", seconds)
        self.breaker.record_success()
        self._log_transition()

    def failed(self, outcome: str, seconds: float | None) -> None:
        self.observe_call(outcome, seconds)
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


class Peers:
    """Every other node of the membership, by URL."""

    def __init__(
        self,
        config: NodeConfig,
        nodes: Iterable[str],
        ring_identity: str,
        budget: Budget | None = None,
        tls: ssl.SSLContext | None = None,
        machine: Machine = SYSTEM,
        observe_calls: PeerCallObserver | None = None,
    ) -> None:
        """`tls`: the context connections to peers are made with, or None (plain);
        `observe_calls`: told how each call to each peer ended, its peers' included
        (the node's metrics)."""
        self._config = config
        self._budget = budget
        self._tls = tls
        self._machine = machine
        self._observe_calls = observe_calls
        self.by_url: dict[str, Peer] = {}
        self.ensure(nodes, ring_identity)

    def ensure(self, nodes: Iterable[str], ring_identity: str) -> list[Peer]:
        """A peer for every node of `nodes` but this one, all presenting `ring_identity`
        from now on; returns the peers it had to add."""
        added = []
        for url in nodes:
            if url != self._config.self_url and url not in self.by_url:
                observe = self._observe_calls
                peer = Peer(
                    url,
                    self._config,
                    ring_identity,
                    self._budget,
                    self._tls,
                    self._machine,
                    _unobserved if observe is None else functools.partial(observe, url),
                )
                self.by_url[url] = peer
                added.append(peer)
        for peer in self.by_url.values():
            peer.set_identity(ring_identity)
        return added

    async def retire(self, keep: Collection[str]) -> None:
        """Closes and forgets the peers not in `keep` (nodes that left the membership)."""
        gone = [self.by_url.pop(url) for url in list(self.by_url) if url not in keep]
        await asyncio.gather(*(peer.close() for peer in gone))

    async def close(self) -> None:
        await asyncio.gather(*(peer.close() for peer in self.by_url.values()))

    def __getitem__(self, url: str) -> Peer:
        return self.by_url[url]

    def get(self, url: str) -> Peer | None:
        """The peer of `url`, or None once a membership step retired it."""
        return self.by_url.get(url)
