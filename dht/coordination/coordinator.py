"""One client request -> fan-out to its replicas -> acks -> one merged answer.

The coordinator sends a request to all F replicas at once (itself through storage, the
others through `dht.transport.peers`), answers as soon as A succeeded or as soon as that became
impossible, and leaves the rest running in the background: writes go on to every
replica, reads go on to repair stale replicas. It returns outcomes; only the HTTP layer
turns them into status codes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

from dht.config import NodeConfig
from dht.coordination.cluster_range import open_cluster_range
from dht.coordination.outcome import Outcome, Status
from dht.coordination.read_repair import ReadRepair, Repairer
from dht.coordination.tally import Counters, Tally
from dht.coordination.write import WriteRounds
from dht.model.clock import HybridClock, VersionAhead
from dht.model.log_limits import RateLimitedLog
from dht.model.record import MAX_COPIES, Record
from dht.model.replicas import ReplicaCount
from dht.model.topology import union
from dht.replication.hints import HintStore
from dht.storage.disk import DiskFull
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.peers import PeerError, Peers
from dht.transport.replica import Replicas, SelfReplica

log = logging.getLogger(__name__)

T = TypeVar("T")


class Coordinator:
    """Fans each client operation out to its replicas. Replica calls are futures resolved
    by callbacks (`dht.transport.peers`); a `Tally` (`dht.coordination.tally`) counts
    their answers, so a request costs no task per replica, and what happens after the
    client's answer (the rest of a write, hints for missed replicas, read repair of late
    answers) is callbacks too."""

    def __init__(
        self,
        config: NodeConfig,
        storage: Storage,
        membership: Membership,
        peers: Peers,
        clock: HybridClock,
        hints: HintStore,
    ) -> None:
        self._self_url = config.self_url
        self._hints = hints
        self._storage = storage
        self._membership = membership
        # Client operations under way, by the membership epoch they started in.
        self._running: dict[int, int] = {}
        self._clock = clock
        self.counters = Counters()
        self._refusals = RateLimitedLog(log)
        self._replicas = Replicas(SelfReplica(self._self_url, storage), peers)
        self._rounds = WriteRounds(self._replicas, clock, hints, self.counters, self._refusals)
        self._repairer = Repairer(self._replicas, self.counters, self._refusals)

    # -- client operations -------------------------------------------------------------

    async def get(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        """`replicas` None: the membership's default."""
        epoch = self._started()
        try:
            return await self._get(key, replicas)
        finally:
            self._ended(epoch)

    async def _get(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        quorums = self._quorums(key, replicas)
        targets = union([nodes for nodes, _ in quorums])
        if targets == [self._self_url]:
            return self._get_here(key)
        if (refusal := self._refuse_if_unavailable(quorums)) is not None:
            return refusal
        tally: Tally[Record | None] = Tally(quorums, self.counters, keeps_late=True)
        for url in targets:
            replica = self._replicas[url]
            tally.watch(url, replica.get(key), self._accept_remote if replica.remote else None)
        await tally.decision()
        if not tally.quorum_met:
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        repair = ReadRepair(self._repairer, self.holders, key, tally.answers)
        winner = repair.winner  # of the answers the decision was made on
        tally.on_late(repair.late)
        if winner is None or not winner.live_at(self._clock.wall_ms()):
            return Outcome(Status.NOT_FOUND)  # absent, deleted or expired
        return Outcome(Status.FOUND, winner.value)

    def _get_here(self, key: bytes) -> Outcome:
        """A read whose only replica is this node (a one-node ring, or `1/1` on the
        key's owner): its record, with no fan-out, tally or repair to make."""
        try:
            record = self._storage.get(key)
        except Exception:
            log.exception("local replica operation failed")
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        if record is None or not record.live_at(self._clock.wall_ms()):
            return Outcome(Status.NOT_FOUND)
        return Outcome(Status.FOUND, record.value)

    async def put(
        self,
        key: bytes,
        value: bytes,
        replicas: ReplicaCount | None,
        settled: Callable[[], None] | None = None,
        ttl_ms: int = 0,
    ) -> Outcome:
        """`settled` is called once no replica call holds the value any more, which may
        be after the answer (the rest of the replicas are written in the background).
        With `ttl_ms`, the record expires that long after now, by this node's clock; the
        expiry travels in the record. Every record carries the F it was written with."""
        expires_at = self._clock.wall_ms() + ttl_ms if ttl_ms else 0
        copies = self._copies(replicas)
        try:
            version = self._clock.now()
        except DiskFull:  # the clock could not save its ceiling (SPEC 8.7): no version
            if settled is not None:
                settled()  # nothing was sent: the value is held by no replica call
            return Outcome(Status.INSUFFICIENT_STORAGE)
        record = Record.live(version, value, expires_at, copies)
        epoch = self._started()
        try:
            return await self._write(key, record, replicas, Status.STORED, settled)
        finally:
            self._ended(epoch)

    async def delete(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        try:
            version = self._clock.now()
        except DiskFull:
            return Outcome(Status.INSUFFICIENT_STORAGE)
        record = Record.deleted(version, self._copies(replicas))
        epoch = self._started()
        try:
            return await self._write(key, record, replicas, Status.DELETED)
        finally:
            self._ended(epoch)

    def _copies(self, replicas: ReplicaCount | None) -> int:
        """The `F` a record carries: the request's, or the default's (every node)."""
        copies = replicas.from_ if replicas else self._membership.topology.default_copies()
        return min(copies, MAX_COPIES)

    @property
    def cluster_size(self) -> int:
        """The most replicas a request may ask for."""
        return self._membership.topology.size

    def _started(self) -> int:
        """Counts a client operation running in the membership's epoch now, and returns
        that epoch for `_ended` (a pair of calls, not a context manager: contextlib's
        costs about 3 µs a request, measured with py-spy on the one-node PUT path)."""
        epoch = self._membership.state.epoch
        self._running[epoch] = self._running.get(epoch, 0) + 1
        return epoch

    def _ended(self, epoch: int) -> None:
        left = self._running[epoch] - 1
        if left:
            self._running[epoch] = left
        else:
            del self._running[epoch]

    async def drain(self, epoch: int, deadline: float) -> bool:
        """Waits (up to `deadline` seconds) until no client operation that started before
        `epoch` is still running; says whether none is. A membership step is acknowledged
        only then, so its driver knows that no operation placed by the old step is left."""
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        while any(started < epoch for started in self._running):
            if loop.time() >= until:
                return False
            await asyncio.sleep(0.01)
        return True

    async def scan(
        self, start: bytes, end: bytes | None
    ) -> AsyncGenerator[tuple[bytes, bytes], None]:
        """The live records of the whole cluster in [start, end), merged, newest version
        per key (`dht.coordination.cluster_range`). Raises NotEnoughSources (before
        anything is sent) when too few nodes answer: N - quorum(N) + 1 of each node list
        in use (`Topology.range_shortfall`); the iterator raises RangeIncomplete when too
        few are left mid-stream."""
        topology = self._membership.topology  # the one the range is counted by throughout
        return await open_cluster_range(
            start, end, self._replicas.all(), topology, self._clock.wall_ms
        )

    # -- fan-out -----------------------------------------------------------------------

    def _quorums(self, key: bytes, replicas: ReplicaCount | None) -> list[tuple[list[str], int]]:
        return self._membership.topology.quorums(key, replicas)  # None: the default

    def _refuse_if_unavailable(self, quorums: list[tuple[list[str], int]]) -> Outcome | None:
        """503 before sending anything when open circuits leave fewer than `ack`
        replicas in some replica set."""
        waits: list[float] = []
        for nodes, ack in quorums:
            refused = [url for url in nodes if not self._replicas[url].available()]
            if len(nodes) - len(refused) < ack:
                waits += [self._replicas[url].retry_after() for url in refused]
        if not waits:
            return None
        return Outcome(Status.UNAVAILABLE, retry_after=min(waits))

    def _accept_remote(self, url: str, record: Record | None) -> None:
        """A replica's answer moves the clock, unless its version is too far ahead or
        the clock cannot save its ceiling (a full volume): then the answer counts as that
        replica's failure (and is not repaired onto this node past the ceiling)."""
        if record is not None:
            try:
                self._clock.observe(record.version)
            except VersionAhead as exc:
                self._refusals.warning("version-ahead", "ignored %s's answer: %s", url, exc)
                raise PeerError(f"{url}: {exc}") from None
            except DiskFull as exc:  # the ceiling (SPEC 8.7) not saved: the clock did not move
                self._refusals.warning("disk-full", "ignored %s's answer: %s", url, exc)
                raise PeerError(f"{url}: this node could not take its version: {exc}") from None

    async def _write(
        self,
        key: bytes,
        record: Record,
        replicas: ReplicaCount | None,
        success: Status,
        settled: Callable[[], None] | None = None,
    ) -> Outcome:
        """Sends `record` to every replica, or stores it here when this node is the only
        one; refuses at once when open breakers leave too few. The rounds, and the write
        sent again past a newer record a replica kept (SPEC.md rule 9.13), are
        `WriteRounds`'s (`dht.coordination.write`)."""
        quorums = self._quorums(key, replicas)
        targets = union([nodes for nodes, _ in quorums])
        if targets == [self._self_url]:
            return await self._rounds.write_here(key, record, success, settled)
        if (refusal := self._refuse_if_unavailable(quorums)) is not None:
            if settled is not None:
                settled()
            return refusal
        return await self._rounds.write(key, record, targets, quorums, success, settled)

    def holders(self, key: bytes, record: Record) -> list[str]:
        """The nodes that are to hold `record` of `key`: its replica sets for the `F` it
        was written with."""
        return self._membership.topology.targets(key, record.copies or self.cluster_size)
