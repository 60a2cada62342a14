"""One client request -> fan-out to its replicas -> acks -> one merged answer.

The coordinator sends a request to all F replicas at once (itself through storage, the
others through `dht.transport.peers`), answers as soon as A succeeded or as soon as that became
impossible, and leaves the rest running in the background: writes go on to every
replica, reads go on to repair stale replicas. It returns outcomes; only the HTTP layer
turns them into status codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from dht.config import NodeConfig
from dht.coordination.cluster_range import local_range, open_cluster_range
from dht.coordination.tally import Counters, Tally, log_replica_failure
from dht.limits import RESTAMPS
from dht.model.clock import HybridClock, VersionAhead, version_ms
from dht.model.log_limits import RateLimitedLog
from dht.model.record import MAX_COPIES, Record, newest
from dht.model.replicas import ReplicaCount
from dht.model.topology import union
from dht.replication.hints import HintStore
from dht.storage.disk import DiskFull
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.peers import PeerError, Peers

log = logging.getLogger(__name__)

T = TypeVar("T")


class Status(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    STORED = "stored"
    DELETED = "deleted"
    NOT_ENOUGH_REPLICAS = "not enough replicas"
    INSUFFICIENT_STORAGE = "insufficient storage"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    value: bytes = b""
    retry_after: float = 0.0


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
        self._peers = peers
        self._clock = clock
        self.counters = Counters()
        self._refusals = RateLimitedLog(log)

    # -- client operations -------------------------------------------------------------

    async def get(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        """`replicas` None: the membership's default."""
        with self._running_in(self._membership.state.epoch):
            return await self._get(key, replicas)

    async def _get(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        quorums = self._quorums(key, replicas)
        targets = union([nodes for nodes, _ in quorums])
        if targets == [self._self_url]:
            return self._get_here(key)
        if (refusal := self._refuse_if_unavailable(quorums)) is not None:
            return refusal
        tally: Tally[Record | None] = Tally(quorums, self.counters, keeps_late=True)
        for url in targets:
            if url != self._self_url:
                tally.watch(url, self._peers[url].get(key), self._accept_remote)
        if self._self_url in targets:
            self._locally(tally, lambda: self._storage.get(key))
        await tally.decision()
        if not tally.quorum_met:
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        repair = _ReadRepair(self, key, tally.answers)
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
        with self._running_in(self._membership.state.epoch):
            return await self._write(key, record, replicas, Status.STORED, settled)

    async def delete(self, key: bytes, replicas: ReplicaCount | None) -> Outcome:
        try:
            version = self._clock.now()
        except DiskFull:
            return Outcome(Status.INSUFFICIENT_STORAGE)
        record = Record.deleted(version, self._copies(replicas))
        with self._running_in(self._membership.state.epoch):
            return await self._write(key, record, replicas, Status.DELETED)

    def _copies(self, replicas: ReplicaCount | None) -> int:
        """The `F` a record carries: the request's, or the default's (every node)."""
        copies = replicas.from_ if replicas else self._membership.topology.default_copies()
        return min(copies, MAX_COPIES)

    @property
    def cluster_size(self) -> int:
        """The most replicas a request may ask for."""
        return self._membership.topology.size

    @contextlib.contextmanager
    def _running_in(self, epoch: int) -> Iterator[None]:
        self._running[epoch] = self._running.get(epoch, 0) + 1
        try:
            yield
        finally:
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
            start,
            end,
            (self._self_url, local_range(self._storage, start, end)),
            list(self._peers.by_url.values()),
            topology,
            self._clock.wall_ms,
        )

    # -- fan-out -----------------------------------------------------------------------

    def _quorums(self, key: bytes, replicas: ReplicaCount | None) -> list[tuple[list[str], int]]:
        return self._membership.topology.quorums(key, replicas)  # None: the default

    def _refuse_if_unavailable(self, quorums: list[tuple[list[str], int]]) -> Outcome | None:
        """503 before sending anything when open circuits leave fewer than `ack`
        replicas in some replica set."""
        waits: list[float] = []
        for nodes, ack in quorums:
            reachable = [
                url for url in nodes if url == self._self_url or self._peers[url].available()
            ]
            if len(reachable) < ack:
                waits += [
                    self._peers[url].breaker.retry_after() for url in nodes if url not in reachable
                ]
        if not waits:
            return None
        return Outcome(Status.UNAVAILABLE, retry_after=min(waits))

    def _locally(self, tally: Tally[T], operation: Callable[[], T | asyncio.Future[T]]) -> None:
        """This node's own replica: a LevelDB point operation, on the loop, or a future
        when storage writes a large value in its thread."""
        try:
            value = operation()
            if isinstance(value, asyncio.Future):
                tally.watch(self._self_url, value)
                return
        except DiskFull as exc:
            self._refusals.warning("disk-full", "writes refused: %s", exc)
            tally.failed(self._self_url, no_space=True)
            return
        except Exception:
            log.exception("local replica operation failed")
            tally.failed(self._self_url)
            return
        tally.succeeded(self._self_url, value)

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
        """Sends `record` to every replica and answers once `ack` stored it or kept a
        newer record. A replica among those that kept a newer record means the version
        this node's clock gave the write is older than a write that may have been
        acknowledged before this one began (its clock is behind, or it restarted and has
        not heard its peers' newer versions yet): the write would be acknowledged and
        lost. So this node learns that replica's version and sends the write again
        with a newer one, up to RESTAMPS times (SPEC.md rule 9.13)."""
        quorums = self._quorums(key, replicas)
        targets = union([nodes for nodes, _ in quorums])
        if targets == [self._self_url]:
            return await self._write_here(key, record, success, settled)
        if (refusal := self._refuse_if_unavailable(quorums)) is not None:
            if settled is not None:
                settled()
            return refusal
        settling = _Settling(settled)
        # Whether this node's clock has passed every version of a write acknowledged
        # before this one began: once it heard every replica that kept a record in one
        # decision (each such write has a replica among those A, which either stored a
        # newer version of this one or kept one at least as new).
        caught_up = False
        # Replicas that kept a record further ahead than the drift bound, which this
        # node cannot pass (rule 8.4): such an answer is no acknowledgement of this write.
        beyond: set[str] = set()
        try:
            for round_ in range(RESTAMPS + 1):
                tally = self._send_write(key, record, targets, quorums)
                settling.watch(tally)
                await tally.decision()
                if not tally.quorum_met:
                    if tally.no_space:
                        return Outcome(Status.INSUFFICIENT_STORAGE)
                    return Outcome(Status.NOT_ENOUGH_REPLICAS)
                kept = [
                    url for url, stored in tally.answers.items() if not stored and url not in beyond
                ]
                if not kept or caught_up:
                    # Caught up, what a replica kept came from a write running at the
                    # same time as this one, and either order of two concurrent writes
                    # is right: sending it again newer would only make another write
                    # running meanwhile the one sent again (found by review: eight
                    # writers of one key, clocks in step, sent 0.9 rounds more a write).
                    return await self._acknowledged_without(tally, quorums, beyond, success)
                if round_ == RESTAMPS:
                    # Never caught up: a replica that kept a newer record was never
                    # heard, and that record may be an acknowledged write's. The write
                    # may or may not have taken effect: 504, not a false 201.
                    return Outcome(Status.NOT_ENOUGH_REPLICAS)
                heard, newly_beyond = await self._learn_versions(key, kept)
                beyond |= newly_beyond
                within = [url for url in kept if url not in beyond]
                if not within:
                    return await self._acknowledged_without(tally, quorums, beyond, success)
                if not heard:
                    return Outcome(Status.NOT_ENOUGH_REPLICAS)
                caught_up = len(heard) == len(within)
                try:
                    record = dataclasses.replace(record, version=self._clock.now())
                except DiskFull:
                    return Outcome(Status.INSUFFICIENT_STORAGE)
                self.counters.restamped_writes += round_ == 0  # writes, not rounds
            raise AssertionError("unreachable: the last round returns")
        finally:
            settling.close()

    async def _acknowledged_without(
        self,
        tally: Tally[bool],
        quorums: list[tuple[list[str], int]],
        beyond: set[str],
        success: Status,
    ) -> Outcome:
        """`success` once every replica set has `ack` answers from replicas other than
        those that kept a record past the drift bound, waiting for the round's calls
        still running if the decision counted one of them; 504 if too few come. Such a
        record is a forged one, or an acknowledged write's that this node, its clock
        far behind the majority's (a node not yet fenced, or a cluster of two), cannot
        pass: on one replica of three the write is acknowledged by the other two; on
        two it is not, and answering 201 would lose it (found by review).

        Once a replica kept a record past the bound, only "stored" counts: a replica
        that kept a record over the write and was not read (a late answer, or one of a
        round after the replicas were read) may have kept that same record, and a write
        acknowledged before this one that this node cannot pass is on a quorum, which
        every `A` replicas that stored this write share one with (found by review: such
        answers were counted, and the write acknowledged and lost)."""

        def acknowledges(stored: bool) -> bool:
            return stored or not beyond

        answered = {url for url, stored in tally.answers.items() if acknowledges(stored)}

        def late(url: str, stored: bool) -> None:
            if acknowledges(stored):
                answered.add(url)

        def met() -> bool:
            return all(len(answered & set(nodes)) >= ack for nodes, ack in quorums)

        tally.on_late(late)  # those that came since the decision, and those to come
        while not met() and tally.pending:
            await asyncio.wait(set(tally.pending), return_when=asyncio.FIRST_COMPLETED)
        return Outcome(success if met() else Status.NOT_ENOUGH_REPLICAS)

    def _send_write(
        self, key: bytes, record: Record, targets: list[str], quorums: list[tuple[list[str], int]]
    ) -> Tally[bool]:
        # Answers after the decision are kept for `_acknowledged_without`.
        tally: Tally[bool] = Tally(quorums, self.counters, keeps_late=True)
        for url in targets:
            if url != self._self_url:
                if (peer := self._peers.get(url)) is None:
                    # Retired by a membership step since this write was placed (a write
                    # sent again): a failed replica, as a node that left would be.
                    tally.failed(url)
                    continue
                future = peer.put(key, record)
                future.add_done_callback(functools.partial(self._hint_if_missed, url, key, record))
                tally.watch(url, future)
        if self._self_url in targets:
            self._locally(tally, lambda: self._storage.write(key, record))
        return tally

    async def _learn_versions(
        self, key: bytes, urls: list[str]
    ) -> tuple[dict[str, Record | None], set[str]]:
        """Moves this node's clock past the records of `key` that the replicas `urls`
        hold (they kept them over a write of this node's). Returns those heard, by
        replica, and the replicas whose record is further ahead than the drift bound
        (the clock does not move for it, rule 8.4); a replica in neither was not heard.
        Its own replica's record is read from storage: what it kept may have come by a
        handoff, which moves no clock."""
        heard: dict[str, Record | None] = {}
        beyond: set[str] = set()
        peers = [(url, self._peers.get(url)) for url in urls if url != self._self_url]
        remote = [(url, peer) for url, peer in peers if peer is not None]  # not retired
        reads = [peer.get(key) for _, peer in remote]
        answers: list[tuple[str, Record | BaseException | None]] = []
        if self._self_url in urls:
            try:
                answers.append((self._self_url, self._storage.get(key)))
            except Exception as exc:
                answers.append((self._self_url, exc))
        answers += zip(
            [url for url, _ in remote],
            await asyncio.gather(*reads, return_exceptions=True),
            strict=True,
        )
        for url, answer in answers:
            if isinstance(answer, BaseException):
                log_replica_failure(url, answer)
                continue
            try:
                if answer is not None:
                    self._clock.observe(answer.version)
            except VersionAhead as exc:
                self._refusals.warning("version-ahead", "%s kept a record: %s", url, exc)
                beyond.add(url)
                continue
            except DiskFull as exc:  # the ceiling (SPEC 8.7) not saved: the clock did not move
                self._refusals.warning("disk-full", "could not take %s's version: %s", url, exc)
                continue
            heard[url] = answer
        return heard, beyond

    async def _write_here(
        self,
        key: bytes,
        record: Record,
        success: Status,
        settled: Callable[[], None] | None,
    ) -> Outcome:
        """A write whose only replica is this node: stored, with no fan-out or tally (the
        outcomes are the tally's for one local replica: a full volume is 507, any other
        failure 504). Kept over a newer record, it is stored again past it, as `_write`
        does."""
        try:
            for round_ in range(RESTAMPS + 1):
                stored = self._storage.write(key, record)
                if isinstance(stored, asyncio.Future):
                    stored = await stored
                if stored or round_ == RESTAMPS:
                    break
                heard, _ = await self._learn_versions(key, [self._self_url])
                if not heard:  # past the drift bound, or not read: no replica stored it
                    return Outcome(Status.NOT_ENOUGH_REPLICAS)
                record = dataclasses.replace(record, version=self._clock.now())
                self.counters.restamped_writes += round_ == 0  # writes, not rounds
        except DiskFull as exc:
            self._refusals.warning("disk-full", "writes refused: %s", exc)
            return Outcome(Status.INSUFFICIENT_STORAGE)
        except Exception:
            log.exception("local replica operation failed")
            return Outcome(Status.NOT_ENOUGH_REPLICAS)
        finally:
            if settled is not None:
                settled()
        return Outcome(success)

    def _hint_if_missed(
        self, url: str, key: bytes, record: Record, future: asyncio.Future[bool]
    ) -> None:
        if not future.cancelled() and future.exception() is not None:
            # Hinted handoff delivers it later; the hint is as old as the write, not as
            # the call's deadline (HintStore.add).
            self._hints.add(url, key, record, version_ms(record.version))

    def holders(self, key: bytes, record: Record) -> list[str]:
        """The nodes that are to hold `record` of `key`: its replica sets for the `F` it
        was written with."""
        return self._membership.topology.targets(key, record.copies or self.cluster_size)

    def repair(self, url: str, key: bytes, record: Record) -> None:
        """Sends `record` to a replica that answered with an older one (put-if-newer, so
        it never undoes a newer write)."""
        if url == self._self_url:
            try:
                stored = self._storage.write(key, record)
            except DiskFull as exc:  # a repair is best effort: the read is answered anyway
                self._refusals.warning("disk-full", "read repair skipped: %s", exc)
                return
            if isinstance(stored, bool):
                self.counters.read_repairs += 1
                return
            stored.add_done_callback(functools.partial(self._repaired, url, key))
            return
        self._peers[url].put(key, record).add_done_callback(
            functools.partial(self._repaired, url, key)
        )

    def _repaired(self, url: str, key: bytes, future: asyncio.Future[bool]) -> None:
        if future.cancelled():
            return
        if (error := future.exception()) is not None:
            log_replica_failure(url, error)
            return
        self.counters.read_repairs += 1
        log.debug("read repair of %r on %s", key, url)


class _ReadRepair:
    """Brings every replica of one key that answered a GET with an older record (or
    none) up to the newest: those heard before the client's answer at once, the late
    ones as they answer. A late answer newer than the winner makes it the winner, and
    every replica heard before it stale."""

    def __init__(
        self, coordinator: Coordinator, key: bytes, heard: dict[str, Record | None]
    ) -> None:
        self._coordinator = coordinator
        self._key = key
        self._heard = dict(heard)
        self.winner = newest(list(heard.values()))
        self._repair_stale(list(self._heard))

    def late(self, url: str, record: Record | None) -> None:
        self._heard[url] = record
        if record is not None and record.supersedes(self.winner):
            self.winner = record
            self._repair_stale(list(self._heard))
        else:
            self._repair_stale([url])

    def _repair_stale(self, urls: list[str]) -> None:
        winner = self.winner
        if winner is None:
            return
        holders: list[str] | None = None
        for url in urls:
            heard = self._heard[url]
            if not winner.supersedes(heard):
                continue
            if heard is None:
                # A node with no record of the key gets one only if it is to hold it: a
                # read that asked more replicas than the record's `F` (or a node a
                # handoff emptied) must not spread it. An older record is replaced
                # wherever it is.
                holders = holders or self._coordinator.holders(self._key, winner)
                if url not in holders:
                    continue
            self._coordinator.repair(url, self._key, winner)
            self._heard[url] = winner


class _Settling:
    """Calls `settled` once every round's replica calls have ended and no round is to
    come (`close`): a write sent again holds its value in more than one round."""

    def __init__(self, settled: Callable[[], None] | None) -> None:
        self._settled = settled
        self._open = 1  # the write itself, until `close`

    def watch(self, tally: Tally[bool]) -> None:
        self._open += 1
        tally.when_settled(self._one_ended)

    def close(self) -> None:
        self._one_ended()

    def _one_ended(self) -> None:
        self._open -= 1
        if self._open == 0 and self._settled is not None:
            self._settled()
