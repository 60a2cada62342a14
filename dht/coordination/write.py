"""One client write, sent to its replicas in rounds (SPEC.md rule 9.13).

A replica among those whose answers decided a write that kept a newer record means the
version this node's clock gave the write is older than a write that may have been
acknowledged before this one began (its clock is behind, or it restarted and has not
heard its peers' newer versions yet): the write would be acknowledged and lost. So this
node learns that replica's version (`_learn_versions`) and sends the write again with a
newer one, up to RESTAMPS times; a replica that kept a record past the drift bound is no
acknowledgement (`_acknowledged_without`). `_Settling` tells the caller when no round
holds the value any more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable

from dht.coordination.outcome import Outcome, Status
from dht.coordination.tally import Counters, Tally, log_replica_failure, refused_for_space
from dht.limits import RESTAMPS
from dht.model.clock import HybridClock, VersionAhead, version_ms
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.replication.hints import HintStore
from dht.storage.disk import DiskFull
from dht.transport.replica import Replicas

log = logging.getLogger(__name__)


class WriteRounds:
    def __init__(
        self,
        replicas: Replicas,
        clock: HybridClock,
        hints: HintStore,
        counters: Counters,
        refusals: RateLimitedLog,
    ) -> None:
        self._replicas = replicas
        self._clock = clock
        self._hints = hints
        self.counters = counters
        self._refusals = refusals

    async def write(
        self,
        key: bytes,
        record: Record,
        targets: list[str],
        quorums: list[tuple[list[str], int]],
        success: Status,
        settled: Callable[[], None] | None,
    ) -> Outcome:
        """Sends `record` to `targets` in rounds, a newer version each, until `ack` of
        every replica set stored it or kept a newer record it need not pass."""
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
            if (replica := self._replicas.get(url)) is None:
                # Retired by a membership step since this write was placed (a write
                # sent again): a failed replica, as a node that left would be.
                tally.failed(url)
                continue
            future = replica.put(key, record)
            if refused_for_space(future):  # this node's own volume, below its reserve
                self._refusals.warning("disk-full", "writes refused: %s", future.exception())
            if replica.remote:
                future.add_done_callback(functools.partial(self._hint_if_missed, url, key, record))
            tally.watch(url, future)
        return tally

    async def _learn_versions(
        self, key: bytes, urls: list[str]
    ) -> tuple[dict[str, Record | None], set[str]]:
        """Moves this node's clock past the records of `key` that the replicas `urls`
        hold (they kept them over a write of this node's). Returns those heard, by
        replica, and the replicas whose record is further ahead than the drift bound
        (the clock does not move for it, rule 8.4); a replica in neither was not heard.
        Its own replica's record is learned too: what it kept may have come by a handoff,
        which moves no clock."""
        heard: dict[str, Record | None] = {}
        beyond: set[str] = set()
        calls = [
            (url, replica.get(key))
            for url in urls
            if (replica := self._replicas.get(url)) is not None  # None: retired
        ]
        running = [call for _, call in calls if not call.done()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        answers = [(url, _outcome(call)) for url, call in calls]
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

    async def write_here(
        self,
        key: bytes,
        record: Record,
        success: Status,
        settled: Callable[[], None] | None,
    ) -> Outcome:
        """A write whose only replica is this node: stored, with no fan-out or tally (the
        outcomes are the tally's for one local replica: a full volume is 507, any other
        failure 504). Kept over a newer record, it is stored again past it, as `write`
        does."""
        try:
            for round_ in range(RESTAMPS + 1):
                stored = await self._replicas.here.put(key, record)
                if stored or round_ == RESTAMPS:
                    break
                heard, _ = await self._learn_versions(key, [self._replicas.here.url])
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


def _outcome(call: asyncio.Future[Record | None]) -> Record | BaseException | None:
    """A call's answer, or what ended it (as `gather(return_exceptions=True)` gives)."""
    if call.cancelled():
        return asyncio.CancelledError()
    return call.exception() or call.result()


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
