"""Read repair: after a GET, every replica that answered with an older record (or none)
is sent the newest, those heard before the client's answer at once and the late ones as
they answer; put-if-newer, so a repair never undoes a newer write."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from dht.coordination.tally import Counters, log_replica_failure, refused_for_space
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record, newest
from dht.transport.replica import Replicas

log = logging.getLogger(__name__)


class Repairer:
    """Sends one record to one replica, counted in `read_repairs` once it is stored."""

    def __init__(self, replicas: Replicas, counters: Counters, refusals: RateLimitedLog) -> None:
        self._replicas = replicas
        self.counters = counters
        self._refusals = refusals

    def repair(self, url: str, key: bytes, record: Record) -> None:
        """Sends `record` to a replica that answered with an older one (put-if-newer, so
        it never undoes a newer write)."""
        replica = self._replicas.get(url)
        if replica is None:  # a step retired it since the read: it is no one's replica now
            log.debug("read repair of %r skipped: %s left the membership", key, url)
            return
        repaired = replica.put(key, record)
        if refused_for_space(repaired):  # a repair is best effort: the read is answered
            self._refusals.warning("disk-full", "read repair skipped: %s", repaired.exception())
            return
        repaired.add_done_callback(functools.partial(self._repaired, url, key))

    def _repaired(self, url: str, key: bytes, future: asyncio.Future[bool]) -> None:
        if future.cancelled():
            return
        if (error := future.exception()) is not None:
            log_replica_failure(url, error)
            return
        self.counters.read_repairs += 1
        log.debug("read repair of %r on %s", key, url)


class ReadRepair:
    """Brings every replica of one key that answered a GET with an older record (or
    none) up to the newest: those heard before the client's answer at once, the late
    ones as they answer. A late answer newer than the winner makes it the winner, and
    every replica heard before it stale."""

    def __init__(
        self,
        repairer: Repairer,
        holders: Callable[[bytes, Record], list[str]],
        key: bytes,
        heard: dict[str, Record | None],
    ) -> None:
        """`holders` names the nodes that are to hold a record of a key
        (`Coordinator.holders`)."""
        self._repairer = repairer
        self._holders = holders
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
                holders = holders or self._holders(self._key, winner)
                if url not in holders:
                    continue
            self._repairer.repair(url, self._key, winner)
            self._heard[url] = winner
