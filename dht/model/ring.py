"""The consistent-hash ring: virtual nodes on mmh3, key -> ordered replica list. Pure.

Each physical node owns `vnodes` tokens, the 64-bit mmh3 hashes of "node#i". A key's
replica set for F copies is the first F distinct nodes met walking clockwise from the
key's hash. Tokens depend only on node names, so the ring is the same whatever the order
of the topology list, in every process, on every platform.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Iterator

import mmh3


def key_hash(key: bytes) -> int:
    """Position of a key on the ring (unsigned 64-bit)."""
    return int(mmh3.hash64(key, 0, False)[0])


def token(node: str, index: int) -> int:
    return key_hash(f"{node}#{index}".encode())


def ring_identity(nodes: Iterable[str], vnodes: int) -> str:
    """A fingerprint of everything that places keys: two nodes whose identities differ
    would put the same key on different replicas, so they must not replicate for each
    other. Hex, 16 characters (64 bits of SHA-256)."""
    placement = "\n".join([f"vnodes={vnodes}", *sorted(set(nodes))])
    return hashlib.sha256(placement.encode()).hexdigest()[:16]


class Ring:
    def __init__(self, nodes: Iterable[str], vnodes: int) -> None:
        self.nodes: tuple[str, ...] = tuple(sorted(set(nodes)))
        if not self.nodes:
            raise ValueError("a ring needs at least one node")
        if vnodes < 1:
            raise ValueError("vnodes must be at least 1")
        points = sorted((token(node, i), node) for node in self.nodes for i in range(vnodes))
        self._tokens = [t for t, _ in points]
        self._owners = [node for _, node in points]
        self.identity = ring_identity(self.nodes, vnodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def shares(self) -> dict[str, float]:
        """Each node's share of the hash space as a key's first replica (so of the keys,
        for uniform hashes), summing to 1. A token owns the arc from the token before it
        (exclusive) to itself; the first token also owns the arc that wraps past 2**64."""
        space = 1 << 64
        arcs = dict.fromkeys(self.nodes, 0)
        previous = self._tokens[-1] - space
        for point, owner in zip(self._tokens, self._owners, strict=True):
            arcs[owner] += point - previous
            previous = point
        return {node: arc / space for node, arc in arcs.items()}

    def replicas_for(self, key: bytes, count: int) -> list[str]:
        """The first `count` distinct nodes clockwise from the key's hash."""
        count = min(count, len(self.nodes))
        if count <= 0:
            return []
        start = bisect.bisect_left(self._tokens, key_hash(key))
        found: list[str] = []
        size = len(self._owners)
        for step in range(size):
            owner = self._owners[(start + step) % size]
            if owner not in found:
                found.append(owner)
                if len(found) == count:
                    break
        return found

    def arcs(self) -> Iterator[tuple[float, list[str]]]:
        """Every arc of the hash space that places keys alike: its share of the space and
        its preference list (every node, in the order a key in it meets them; a key's
        replica set of F copies is the first F)."""
        space = 1 << 64
        previous = self._tokens[-1] - space
        size = len(self._owners)
        for index, point in enumerate(self._tokens):
            order: list[str] = []
            for step in range(size):
                owner = self._owners[(index + step) % size]
                if owner not in order:
                    order.append(owner)
                    if len(order) == len(self.nodes):
                        break
            yield (point - previous) / space, order
            previous = point
