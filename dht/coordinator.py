"""One client request -> fan-out to its replicas -> acks -> one merged answer.

The coordinator sends a request to all F replicas at once (itself through storage, the
others through `dht.peers`), answers as soon as A succeeded or as soon as that became
impossible, and leaves the rest running in the background: writes go on to every
replica, reads go on to repair stale replicas. It returns outcomes; only the HTTP layer
turns them into status codes.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dht.clock import HybridClock, VersionAhead
from dht.config import NodeConfig
from dht.hints import HintStore
from dht.log_limits import RateLimitedLog
from dht.peers import PeerError, Peers
from dht.record import Record, newest
from dht.replicas import ReplicaCount, quorum
from dht.ring import Ring
from dht.storage import Storage

log = logging.getLogger(__name__)

T = TypeVar("T")


class Status(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    STORED = "stored"
    DELETED = "deleted"
    NOT_ENOUGH_REPLICAS = "not enough replicas"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    value: bytes = b""
    retry_after: float = 0.0


class RecordSource(Protocol):
    """One node's local range: sorted (key, record) pairs, closed when no longer read."""

    def __aiter__(self) -> AsyncIterator[tuple[bytes, Record]]: ...

    async def __anext__(self) -> tuple[bytes, Record]: ...

    async def aclose(self) -> None: ...


class RangeIncomplete(Exception):
    """A cluster-wide range lost too many sources after its first byte was sent."""


@dataclass(slots=True)
class Counters:
    read_repairs: int = 0
    background_failures: int = 0


class Coordinator:
    def __init__(
        self,
        config: NodeConfig,
        storage: Storage,
        ring: Ring,
        peers: Peers,
        clock: HybridClock,
        hints: HintStore,
    ) -> None:
        self._self_url = config.self_url
        self._hints = hints
        self._storage = storage
        self._ring = ring
        self._peers = peers
        self._clock = clock
        self._background: set[asyncio.Task[Any]] = set()
        self.counters = Counters()
        self._refusals = RateLimitedLog(log)

    async def close(self) -> None:
        """Cancels and awaits every background task this coordinator started."""
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- client operations -------------------------------------------------------------

    async def get(self, key: bytes, replicas: ReplicaCount) -> Outcome:
        targets = self._ring.replicas_for(key, replicas.from_)
        if (refusal := self._refuse_if_unavailable(targets, replicas.ack)) is not None:
            return refusal
        answers, pending = await self._quorum(targets, replicas.ack, self._read_one(key))
        if len(answers) < replicas.ack:
            self._drain_later(pending)
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        winner = newest(list(answers.values()))
        stale = winner is not None and any(winner.supersedes(r) for r in answers.values())
        if stale or pending:
            self._own(self._repair(key, answers, pending))
        if winner is None or winner.tombstone:
            return Outcome(Status.NOT_FOUND)
        return Outcome(Status.FOUND, winner.value)

    async def put(self, key: bytes, value: bytes, replicas: ReplicaCount) -> Outcome:
        record = Record.live(self._clock.now(), value)
        return await self._write(key, record, replicas, Status.STORED)

    async def delete(self, key: bytes, replicas: ReplicaCount) -> Outcome:
        record = Record.deleted(self._clock.now())
        return await self._write(key, record, replicas, Status.DELETED)

    async def scan(
        self, start: bytes, end: bytes | None
    ) -> AsyncGenerator[tuple[bytes, bytes], None]:
        """The live records of the whole cluster in [start, end), merged, newest version
        per key. Raises NotEnoughSources (before anything is sent) when fewer than
        N - quorum(N) + 1 nodes answer; the iterator raises RangeIncomplete when that
        many are no longer left mid-stream."""
        needed = len(self._ring) - quorum(len(self._ring)) + 1
        opened = await asyncio.gather(
            *(peer.open_scan(start, end) for peer in self._peers.by_url.values()),
            return_exceptions=True,
        )
        sources: list[RecordSource] = [self._local_scan(start, end)]
        for result in opened:
            if isinstance(result, PeerError):
                log.info("range: a source is missing: %s", result)
            elif isinstance(result, BaseException):
                raise result
            else:
                sources.append(result)
        if len(sources) < needed:
            for source in sources:
                await source.aclose()
            raise NotEnoughSources(f"{len(sources)} of {needed} nodes answered")
        return _merge_newest(sources, needed)

    # -- fan-out -----------------------------------------------------------------------

    def _refuse_if_unavailable(self, targets: list[str], ack: int) -> Outcome | None:
        """503 before sending anything when open circuits leave fewer than `ack` replicas."""
        reachable = [
            url for url in targets if url == self._self_url or self._peers[url].available()
        ]
        if len(reachable) >= ack:
            return None
        waits = [self._peers[url].breaker.retry_after() for url in targets if url not in reachable]
        return Outcome(Status.UNAVAILABLE, retry_after=min(waits, default=1.0))

    async def _quorum(
        self,
        targets: list[str],
        ack: int,
        call: Callable[[str], Coroutine[Any, Any, T]],
    ) -> tuple[dict[str, T], dict[asyncio.Task[T], str]]:
        """Calls every target at once and returns as soon as `ack` calls succeeded or as
        soon as that became impossible: (answers by target, calls still running)."""
        remote = [url for url in targets if url != self._self_url]
        pending = {asyncio.ensure_future(call(url)): url for url in remote}
        answers: dict[str, T] = {}
        failures = 0
        if self._self_url in targets:
            try:
                answers[self._self_url] = await call(self._self_url)
            except Exception:
                log.exception("local replica operation failed")
                failures += 1
        tolerable = len(targets) - ack
        while len(answers) < ack and failures <= tolerable and pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                url = pending.pop(task)
                error = task.exception()
                if error is None:
                    answers[url] = task.result()
                else:
                    failures += 1
                    _log_replica_failure(url, error)
        return answers, pending

    def _read_one(self, key: bytes) -> Callable[[str], Coroutine[Any, Any, Record | None]]:
        async def read(url: str) -> Record | None:
            if url == self._self_url:
                return self._storage.get(key)
            record = await self._peers[url].get_record(key)
            if record is not None:
                try:
                    self._clock.observe(record.version)
                except VersionAhead as exc:
                    self._refusals.warning("version-ahead", "ignored %s's answer: %s", url, exc)
                    raise PeerError(f"{url}: {exc}") from None
            return record

        return read

    async def _write(
        self, key: bytes, record: Record, replicas: ReplicaCount, success: Status
    ) -> Outcome:
        targets = self._ring.replicas_for(key, replicas.from_)
        if (refusal := self._refuse_if_unavailable(targets, replicas.ack)) is not None:
            return refusal

        async def write(url: str) -> None:
            try:
                await self._write_to(url, key, record)
            except PeerError:
                self._hints.add(url, key, record)  # hinted handoff delivers it later
                raise

        answers, pending = await self._quorum(targets, replicas.ack, write)
        self._drain_later(pending)
        if len(answers) < replicas.ack:
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        return Outcome(success)

    async def _write_to(self, url: str, key: bytes, record: Record) -> None:
        if url == self._self_url:
            self._storage.put_if_newer(key, record)
        else:
            await self._peers[url].put_record(key, record)

    # -- background work ---------------------------------------------------------------

    def _own(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("background replica work failed", exc_info=error)

    def _drain_later(self, pending: dict[asyncio.Task[T], str]) -> None:
        if pending:
            self._own(self._drain(pending))

    async def _drain(self, pending: dict[asyncio.Task[T], str]) -> None:
        """Lets calls the client no longer waits for finish (each has its deadline)."""
        for task, url in pending.items():
            try:
                await task
            except PeerError as error:
                self.counters.background_failures += 1
                _log_replica_failure(url, error)

    async def _repair(
        self,
        key: bytes,
        answers: dict[str, Record | None],
        pending: dict[asyncio.Task[Record | None], str],
    ) -> None:
        """Read repair: brings every replica that answered with an older record (or none)
        up to the newest one, first those already heard, then the late ones."""
        winner = newest(list(answers.values()))
        if winner is not None:
            await self._repair_stale(key, winner, answers.items())
        late: dict[str, Record | None] = {}
        for task, url in pending.items():
            try:
                late[url] = await task
            except PeerError as error:
                _log_replica_failure(url, error)
        if not late:
            return
        final = newest([winner, *late.values()])
        if final is None:
            return
        # A late answer newer than the winner makes every replica heard before stale too.
        heard = late.items() if final is winner else [*answers.items(), *late.items()]
        await self._repair_stale(key, final, heard)

    async def _repair_stale(
        self, key: bytes, winner: Record, heard: Iterable[tuple[str, Record | None]]
    ) -> None:
        stale = [url for url, record in heard if winner.supersedes(record)]
        if not stale:
            return
        results = await asyncio.gather(
            *(self._write_to(url, key, winner) for url in stale), return_exceptions=True
        )
        for url, result in zip(stale, results, strict=True):
            if isinstance(result, PeerError):
                _log_replica_failure(url, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                self.counters.read_repairs += 1
                log.debug("read repair of %r on %s", key, url)

    async def _local_scan(
        self, start: bytes, end: bytes | None
    ) -> AsyncGenerator[tuple[bytes, Record], None]:
        for count, item in enumerate(self._storage.scan(start, end), start=1):
            yield item
            if count % 1024 == 0:
                await asyncio.sleep(0)  # let other requests in during a long local scan


class NotEnoughSources(Exception):
    """Fewer nodes than a cluster-wide range needs answered before its first byte."""


async def _merge_newest(
    sources: list[RecordSource], needed: int
) -> AsyncGenerator[tuple[bytes, bytes], None]:
    """k-way merge of sorted record streams: one entry per key, the newest version,
    tombstones dropped. Holds one record per source, whatever the size of the range."""
    heap: list[tuple[bytes, int, Record]] = []
    live = len(sources)

    async def advance(index: int) -> None:
        nonlocal live
        try:
            key, record = await anext(sources[index])
        except StopAsyncIteration:
            return
        except PeerError as error:
            live -= 1
            log.warning("range: a source failed mid-stream: %s", error)
            if live < needed:
                raise RangeIncomplete(f"only {live} of {needed} sources left") from error
            return
        heapq.heappush(heap, (key, index, record))

    try:
        for index in range(len(sources)):
            await advance(index)
        while heap:
            key, index, best = heapq.heappop(heap)
            await advance(index)
            while heap and heap[0][0] == key:
                _, other, record = heapq.heappop(heap)
                if record.supersedes(best):
                    best = record
                await advance(other)
            if not best.tombstone:
                yield key, best.value
    finally:
        for source in sources:
            await source.aclose()


def _log_replica_failure(url: str, error: BaseException) -> None:
    if isinstance(error, PeerError):
        log.debug("replica %s failed: %s", url, error)
    else:
        log.error("replica call to %s raised", url, exc_info=error)
