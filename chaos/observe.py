"""What the chaos tests look at besides client answers: a node's /v0/status counters and
the records each node itself stores (versions included), read without coordination."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from dht.record import Record
from tests.launcher import Node, request


def status(node: Node) -> dict[str, Any]:
    response = request("GET", node.url + "/v0/status", timeout=5.0)
    if response.status != 200:
        raise RuntimeError(f"{node.url} status: {response.status} {response.text}")
    answer: dict[str, Any] = json.loads(response.body)
    return answer


def read_repairs(node: Node) -> int:
    return int(status(node)["read_repairs"])


def pending_hints(node: Node, target: Node) -> int:
    """Hints `node` holds for `target` (keyed by the target's cluster URL)."""
    return int(status(node)["peers"][target.cluster_url]["pending_hints"])


def breaker_towards(node: Node, target: Node) -> str:
    """The state of `node`'s circuit to `target`: "closed", "open" or "half-open"."""
    return str(status(node)["peers"][target.cluster_url]["breaker"])


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
