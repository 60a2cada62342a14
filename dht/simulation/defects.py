"""Known defects the reviews found, put back one at a time for the simulator's own test
(`--defect NAME`): a simulator that cannot find them is missing a fault or a check.

Each is a context manager that swaps one function or value for the run's duration, in
the simulator's wiring or in a module of the node, and puts it back after; the node's
code has no switch of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from dht.model import topology
from dht.model.clock import version_ms
from dht.model.record import Record
from dht.model.replicas import ReplicaCount, default_replicas
from dht.replication import collector
from dht.simulation import sim_node
from dht.storage import store


@contextlib.contextmanager
def _swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def clock_from_zero() -> contextlib.AbstractContextManager[None]:
    """A restarted node's clock starts from its wall clock, not from the ceiling it
    saved: versions it issued before a crash, while its clock was ahead, outrank what it
    issues after (SPEC 8.7)."""
    return _swapped(sim_node.SimNode, "clock_floor", lambda self: 0)


def ack_before_sync() -> contextlib.AbstractContextManager[None]:
    """The group commit writes its batches unsynced: a write is acknowledged before it
    is on the disk, and a crash takes it back (SPEC 10.2)."""
    write = store.write_or_disk_full

    def unsynced(db: Any, puts: Any, deletes: Any, sync: bool = False) -> None:
        write(db, puts, deletes, False)

    return _swapped(store, "write_or_disk_full", unsynced)


def _collectible_with(
    change: Callable[[Record, int, list[int | None]], tuple[int, list[int | None]]],
) -> contextlib.AbstractContextManager[None]:
    rule = collector.collectible

    def collectible(
        record: Record,
        arrived_ms: int,
        now_ms: int,
        grace_ms: int,
        exchanged_since: list[int | None],
    ) -> bool:
        arrived_ms, exchanged_since = change(record, arrived_ms, exchanged_since)
        return rule(record, arrived_ms, now_ms, grace_ms, exchanged_since)

    return _swapped(collector, "collectible", collectible)


def tombstone_by_version_time() -> contextlib.AbstractContextManager[None]:
    """Collection judges a tombstone by its version's time, not by when it arrived: a
    coordinator's clock behind makes it look older than an exchange that never carried
    it."""
    return _collectible_with(lambda record, _, since: (version_ms(record.version), since))


def collect_without_exchanges() -> contextlib.AbstractContextManager[None]:
    """Collection waits for the grace only, not for an exchange with every other node
    since the tombstone arrived: a replica that missed the delete brings the value
    back."""
    return _collectible_with(lambda record, arrived, since: (arrived, [arrived + 1] * len(since)))


def collect_waiting_for_its_replicas() -> contextlib.AbstractContextManager[None]:
    """Collection waits for exchanges with the tombstone's own `F` replicas only, not
    every node of the ring: a value written to more nodes than the DELETE went to
    (a PUT at 3/3, then a DELETE at 2/2) comes back from a node outside them. The rule
    of `Collector._collect` as it was, but for the nodes it waits for."""

    def _collect(self: collector.Collector, dead: list[tuple[bytes, Record]]) -> int:
        now = self._wall_ms()
        collected = 0
        for key, record in dead:
            entry = self._storage.digest(key)
            if entry is None or entry.version != record.version:
                continue
            since = [self._exchanged_since(url) for url in self._trees.sharing(key, record.copies)]
            if collector.collectible(
                record, entry.arrived_ms, now, self._grace_ms, since
            ) and self._storage.collect(key, record):
                collected += 1
        self.collected += collected
        return collected

    return _swapped(collector.Collector, "_collect", _collect)


def joint_default_of_the_smaller_list() -> contextlib.AbstractContextManager[None]:
    """During a change, a request without `replicas` needs the smaller list's default
    quorum in both lists (and its record says `F` = that list's size): shrinking 5 -> 3,
    2 of 3 in joint, while a node a step behind reads 3 of all 5 in stable(old), and the
    two miss each other (SPEC 13.3, each list its own default). Found at seed 48 of
    1..60 (5 nodes) before changes were closed (SPEC 13.3, issue 48); since then, none of
    seeds 1..700 finds it, so no test pins it: `tests/unit/model/test_topology.py`
    checks the overlap of every pair of neighbouring steps exhaustively instead."""

    def quorums(
        self: topology.Topology, key: bytes, replicas: ReplicaCount | None
    ) -> list[tuple[list[str], int]]:
        smaller = min(len(ring) for ring in self.rings)
        count = replicas or default_replicas(smaller)
        plan = []
        for ring in self.rings:
            nodes = ring.replicas_for(key, count.from_)
            plan.append((nodes, min(count.ack, len(nodes))))
        return plan

    def default_copies(self: topology.Topology) -> int:
        return min(len(ring) for ring in self.rings)

    return _swapped_both(quorums, default_copies)


@contextlib.contextmanager
def _swapped_both(quorums: Any, default_copies: Any) -> Iterator[None]:
    with (
        _swapped(topology.Topology, "quorums", quorums),
        _swapped(topology.Topology, "default_copies", default_copies),
    ):
        yield


DEFECTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "clock-from-zero": clock_from_zero,
    "ack-before-sync": ack_before_sync,
    "tombstone-by-version-time": tombstone_by_version_time,
    "collect-without-exchanges": collect_without_exchanges,
    "collect-waiting-for-its-replicas": collect_waiting_for_its_replicas,
    "joint-default-of-the-smaller-list": joint_default_of_the_smaller_list,
}


def put_back(name: str | None) -> contextlib.AbstractContextManager[None]:
    """The defect `name` put back for a run (None: none)."""
    if name is None:
        return contextlib.nullcontext()
    if name not in DEFECTS:
        raise ValueError(f"unknown defect {name!r}: one of {', '.join(DEFECTS)}")
    return DEFECTS[name]()
