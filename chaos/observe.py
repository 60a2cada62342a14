"""What the chaos tests look at besides client answers: a node's /v0/status counters and
the records each node itself stores (versions included), read without coordination."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from dht.conformance.launcher import Node
from dht.model.record import Record


def read_repairs(node: Node) -> int:
    return int(node.status()["read_repairs"])


def pending_hints(node: Node, target: Node) -> int:
    """Hints `node` holds for `target` (keyed by the target's cluster URL)."""
    return int(node.status()["peers"][target.cluster_url]["pending_hints"])


def breaker_towards(node: Node, target: Node) -> str:
    """The state of `node`'s circuit to `target`: "closed", "open" or "half-open"."""
    return str(node.status()["peers"][target.cluster_url]["breaker"])


def record_of(node: Node, key: str) -> Record | None:
    """The record `node` itself stores for `key` (None: it holds none)."""
    return node.local_records(key, key + "\x00").get(key)


def holds(value: bytes) -> Callable[[Record | None], bool]:
    """A condition on a replica's record: a live one with `value`."""

    def check(record: Record | None) -> bool:
        return record is not None and not record.tombstone and record.value == value

    return check


def records_by_node(nodes: Sequence[Node]) -> list[dict[str, Record]]:
    return [node.local_records() for node in nodes]


def differences(snapshots: Sequence[dict[str, Record]]) -> dict[str, list[Record | None]]:
    """Keys whose record differs between nodes: key -> each node's record (or None)."""
    keys = sorted(set().union(*snapshots))
    return {
        key: [snapshot.get(key) for snapshot in snapshots]
        for key in keys
        if len({snapshot.get(key) for snapshot in snapshots}) > 1
    }


def wall_ms() -> int:
    """This machine's wall clock in milliseconds, the clock a node judges expiry by."""
    return time.time_ns() // 1_000_000


def describe(record: Record | None, now_ms: int) -> str:
    """A replica's record as a report shows it: version, and live, expired or deleted."""
    if record is None:
        return "none"
    if record.tombstone:
        state = "tombstone"
    elif record.live_at(now_ms):
        state = f"live {record.value!r}"
    else:
        state = f"expired {record.value!r}"
    expiry = f" expires {record.expires_at}" if record.expires_at else ""
    return f"{record.version} {state}{expiry}"


def live_differences(
    snapshots: Sequence[dict[str, Record]], now_ms: int
) -> dict[str, list[Record | None]]:
    """Keys on which the replicas disagree about live data at wall-clock `now_ms`: some
    node holds a live record and another does not hold that very record live (it holds
    none, an older one, or a newer tombstone or expired record: then the live value is a
    zombie that must not win). Dead records (tombstones, expired records) may differ
    otherwise, and be gone from some nodes: tombstone collection removes them one node
    at a time (SPEC.md rule 9.10). Key -> each node's record (or None)."""
    keys = sorted(set().union(*snapshots))
    diverging: dict[str, list[Record | None]] = {}
    for key in keys:
        records = [snapshot.get(key) for snapshot in snapshots]
        live = {record for record in records if record is not None and record.live_at(now_ms)}
        if live and (len(live) > 1 or any(record not in live for record in records)):
            diverging[key] = records
    return diverging


def zombies(records: Sequence[Record | None], now_ms: int) -> list[Record]:
    """The live records among one key's replicas that another replica holds a newer
    dead record (tombstone or expired) for."""
    dead = [r for r in records if r is not None and not r.live_at(now_ms)]
    newest_dead = max((r.order() for r in dead), default=None)
    return [
        r
        for r in records
        if r is not None
        and r.live_at(now_ms)
        and newest_dead is not None
        and r.order() < newest_dead
    ]
