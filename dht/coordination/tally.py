"""One fan-out's tally: the answers of a request's replica calls as they arrive, and the
moment the request is decided (its quorum met, or out of reach).

A tally costs no task per replica: each call is a future, and its done callback counts
it. What comes after the decision (the rest of a write, a read's late answers for read
repair) is counted, or handed on, the same way.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dht.transport.replica import NO_SPACE, REPLICA_FAILURES

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class Counters:
    read_repairs: int = 0
    background_failures: int = 0
    # Client writes sent again with a newer version after a replica kept a newer record.
    restamped_writes: int = 0


def log_replica_failure(url: str, error: BaseException) -> None:
    if isinstance(error, REPLICA_FAILURES):
        log.debug("replica %s failed: %s", url, error)
    else:
        log.error("replica call to %s raised", url, exc_info=error)


def refused_for_space(call: asyncio.Future[Any]) -> bool:
    """Whether `call` ended at once on this node's volume below its reserve: a refusal
    its caller logs, saying what was refused."""
    return call.done() and not call.cancelled() and isinstance(call.exception(), NO_SPACE)


class Tally(Generic[T]):
    """The answers of one fan-out as they arrive. `decision()` returns once `ack` of the
    targets succeeded, or once that became impossible; calls still running then stay in
    `pending`, and their later successes go to the `on_late` callback (read repair)."""

    __slots__ = (
        "_ack",
        "_counters",
        "_decided",
        "_failed_urls",
        "_late",
        "_quorums",
        "_settled",
        "_tolerable",
        "_unclaimed",
        "answers",
        "failures",
        "no_space",
        "pending",
    )

    def __init__(
        self, quorums: list[tuple[list[str], int]], counters: Counters, keeps_late: bool = False
    ) -> None:
        """`quorums`: (replica set, acks needed in it), one per ring; the decision needs
        every one met. `keeps_late`: successes after the decision are kept for `on_late`
        (a read's repair); a write's are only counted."""
        self.answers: dict[str, T] = {}
        self.failures = 0
        self.no_space = 0  # failures that were a replica below its disk reserve
        self.pending: dict[asyncio.Future[T], str] = {}
        self._late: Callable[[str, T], None] | None = None
        self._unclaimed: list[tuple[str, T]] | None = [] if keeps_late else None
        # One replica set (no membership change under way): plain counts will do.
        self._quorums = quorums if len(quorums) > 1 else None
        self._failed_urls: list[str] = []
        nodes, self._ack = quorums[0]
        self._tolerable = len(nodes) - self._ack
        self._counters = counters
        self._decided: asyncio.Future[None] | None = None
        self._settled: Callable[[], None] | None = None

    @property
    def quorum_met(self) -> bool:
        if self._quorums is None:
            return len(self.answers) >= self._ack
        return all(sum(url in self.answers for url in nodes) >= ack for nodes, ack in self._quorums)

    @property
    def is_decided(self) -> bool:
        if self._quorums is None:
            return len(self.answers) >= self._ack or self.failures > self._tolerable
        return self.quorum_met or any(
            sum(url in self._failed_urls for url in nodes) > len(nodes) - ack
            for nodes, ack in self._quorums
        )

    async def decision(self) -> None:
        if not self.is_decided:
            self._decided = asyncio.get_running_loop().create_future()
            await self._decided

    def watch(
        self,
        url: str,
        future: asyncio.Future[T],
        accept: Callable[[str, T], None] | None = None,
    ) -> None:
        """Counts `future`'s outcome; `accept` may turn an answer into a PeerError. An
        outcome already known (this node's own replica, a call its breaker refused) is
        counted now, not a loop turn later."""
        if future.done():
            self._count(url, accept, future)
            return
        self.pending[future] = url
        future.add_done_callback(functools.partial(self._done, url, accept))

    def when_settled(self, callback: Callable[[], None]) -> None:
        """`callback` runs once every call watched has ended (at once if they have)."""
        if self.pending:
            self._settled = callback
        else:
            callback()

    def on_late(self, callback: Callable[[str, T], None]) -> None:
        """`callback` gets every success that comes after the decision, including those
        that came between the decision and this call."""
        self._late = callback
        unclaimed, self._unclaimed = self._unclaimed or [], None
        for url, value in unclaimed:
            callback(url, value)

    def succeeded(self, url: str, value: T) -> None:
        if self.is_decided:
            if self._late is not None:
                self._late(url, value)
            elif self._unclaimed is not None:  # late before on_late was called
                self._unclaimed.append((url, value))
            return
        self.answers[url] = value
        self._check()

    def failed(self, url: str, no_space: bool = False) -> None:
        if self.is_decided:
            self._counters.background_failures += 1
        self.failures += 1
        if self._quorums is not None:
            self._failed_urls.append(url)
        self.no_space += no_space
        self._check()

    def _done(
        self, url: str, accept: Callable[[str, T], None] | None, future: asyncio.Future[T]
    ) -> None:
        del self.pending[future]
        try:
            self._count(url, accept, future)
        finally:
            if not self.pending and self._settled is not None:
                settled, self._settled = self._settled, None
                settled()

    def _count(
        self, url: str, accept: Callable[[str, T], None] | None, future: asyncio.Future[T]
    ) -> None:
        if future.cancelled():
            self.failed(url)
            return
        error = future.exception()
        if error is None:
            value = future.result()
            try:
                if accept is not None:
                    accept(url, value)
            except Exception as refused:
                # Whatever stops this node taking an answer (a version too far ahead, a
                # ceiling it cannot save, a bug) is that replica's failure: counted
                # neither way, the request would never be answered.
                error = refused
            else:
                self.succeeded(url, value)
                return
        log_replica_failure(url, error)
        self.failed(url, no_space=isinstance(error, NO_SPACE))

    def _check(self) -> None:
        if self._decided is not None and not self._decided.done() and self.is_decided:
            self._decided.set_result(None)
