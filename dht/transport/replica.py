"""A replica of a key, on this node or another: the one interface the coordinator's
fan-outs, write rounds, version learning, read repair and cluster-wide range call, so
that each is one loop over replicas whatever their place.

A call answers with a future in both places. A peer's (`dht.transport.peers.Peer`)
resolves when the channel answers or the deadline comes; this node's own
(`SelfReplica`) is a LevelDB point operation, so its future is done when returned, or
resolves when the storage lands a write (the group commit, a large value's thread). The
failures are the same few in both places, and named once here: `NO_SPACE`, a volume
below its reserve (`ReplicaFull` from a peer, `DiskFull` from this node's storage, even
when a batch fails at landing: so it is not translated, which would cost a future per
write), and `REPLICA_FAILURES`, those and any other `PeerError`; anything else is a
bug, logged with its traceback where it is counted (`dht.coordination.tally`). The
caller says what a refusal for space meant (a client's write, a read repair skipped).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol, TypeVar

from dht.model.record import Record
from dht.storage.disk import DiskFull
from dht.storage.store import Storage
from dht.transport.peers import Peer, PeerError, Peers, ReplicaFull

T = TypeVar("T")

# A replica's volume below its free-space reserve, from a peer or from this node.
NO_SPACE = (ReplicaFull, DiskFull)
# Every way a replica call fails that is not a bug of this node's.
REPLICA_FAILURES = (PeerError, DiskFull)


class RecordSource(Protocol):
    """One node's local range: sorted (key, record) pairs, closed when no longer read."""

    def __aiter__(self) -> AsyncIterator[tuple[bytes, Record]]: ...

    async def __anext__(self) -> tuple[bytes, Record]: ...

    async def aclose(self) -> None: ...


class Replica(Protocol):
    url: str

    @property
    def remote(self) -> bool:
        """Another node: the versions it answers with come from its clock (this node's
        clock learns them), and a write it missed is left to it as a hint."""

    def available(self) -> bool:
        """Whether a call may be sent now (False: its circuit is open)."""

    def retry_after(self) -> float:
        """Seconds until a call may be sent again, when not `available`."""

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        """The replica's record of `key` (None: it holds none)."""

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        """Whether the replica stored `record` (False: it held a newer one already)."""

    async def open_scan(self, start: bytes, end: bytes | None) -> RecordSource:
        """The replica's records in [start, end), tombstones included (a peer's raises
        PeerError when it does not answer in time)."""


class SelfReplica:
    """This node's own replica: its storage, answering as a peer does."""

    remote = False

    def __init__(self, url: str, storage: Storage) -> None:
        self.url = url
        self._storage = storage

    def available(self) -> bool:
        return True

    def retry_after(self) -> float:
        return 0.0

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        try:
            return _done(self._storage.get(key))
        except Exception as exc:
            return _failed(exc)

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        """Stored at once, or a future the storage resolves once the write landed."""
        try:
            stored = self._storage.write(key, record)
        except Exception as exc:  # DiskFull (NO_SPACE): below the reserve, nothing written
            return _failed(exc)
        if isinstance(stored, asyncio.Future):
            return stored
        return _done(stored)

    async def open_scan(self, start: bytes, end: bytes | None) -> RecordSource:
        return _local_range(self._storage, start, end)


async def _local_range(
    storage: Storage, start: bytes, end: bytes | None
) -> AsyncGenerator[tuple[bytes, Record], None]:
    """This node's stored records in [start, end), tombstones included."""
    for count, item in enumerate(storage.scan(start, end), start=1):
        yield item
        if count % 1024 == 0:
            await asyncio.sleep(0)  # let other requests in during a long local scan


class Replicas:
    """This node's replica and its peers', by URL: the one place that tells them apart."""

    def __init__(self, here: SelfReplica, peers: Peers) -> None:
        self.here = here
        self._peers = peers

    def get(self, url: str) -> Replica | None:
        """The replica of `url`, or None once a membership step retired its peer."""
        if url == self.here.url:
            return self.here
        peer: Peer | None = self._peers.get(url)
        return peer

    def __getitem__(self, url: str) -> Replica:
        replica = self.get(url)
        if replica is None:
            raise KeyError(url)
        return replica

    def all(self) -> list[Replica]:
        """This node's replica, then every peer's."""
        return [self.here, *self._peers.by_url.values()]


def _done(value: T) -> asyncio.Future[T]:
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _failed(error: Exception) -> asyncio.Future[Any]:
    """A future failed with `error`; a StopIteration (a bug) as a RuntimeError, which a
    future can hold."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if isinstance(error, StopIteration):
        wrapped = RuntimeError(f"storage raised StopIteration: {error!r}")
        wrapped.__cause__ = error
        error = wrapped
    future.set_exception(error)
    return future
