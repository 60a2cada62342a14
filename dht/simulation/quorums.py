"""The `replicas=A/F` a simulated client sends, and which of its reads must see which
writes.

A client draws each request's `replicas` from the seed: one request in two at the
default (no `replicas`), the other at an explicit `A/F`, any that SPEC rule 3.3 accepts
(`1 <= A <= F <= N`, N the cluster's size as the client knows it: its list of members,
so during a shrink a node already at the smaller ring may answer 400, SPEC 13.3). With
membership changes only majorities (`2A > F`): SPEC 13.3 promises that a write and a
read in neighbouring steps meet only for those and for each list's default.

A read must see a write when their quorums meet on every ring the run had: the write's
`A_w` of the key's first `F_w` nodes and the read's `A_r` of its first `F_r` share a node
whenever `A_w + A_r > max(F_w, F_r)`, since a smaller `F`'s nodes are the first of a
larger one's (SPEC 8.1); on a ring of N nodes a default is `N // 2 + 1` of `N`, and an
`F` above N takes all N nodes and needs them all (SPEC 13.3). A read at `1/3` after a
write at `2/3` may miss it and is not stale; it is still held to inventing nothing.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from dht.model.replicas import ReplicaCount, default_replicas, parse_replicas


def choose(rng: random.Random, size: int, majorities_only: bool) -> str | None:
    """A request's `replicas` (None: the default) on a cluster of `size` nodes."""
    if rng.random() < 0.5:
        return None
    counts = [
        ReplicaCount(ack, copies)
        for copies in range(1, size + 1)
        for ack in range(1, copies + 1)
        if not majorities_only or 2 * ack > copies
    ]
    return str(rng.choice(counts))


def meet(read: str | None, write: str | None, size: int) -> bool:
    """Whether a read and an acknowledged write at these `replicas` share a replica of
    every key on a ring of `size` nodes."""
    first, second = _on_ring(read, size), _on_ring(write, size)
    return first.ack + second.ack > max(first.from_, second.from_)


def _on_ring(replicas: str | None, size: int) -> ReplicaCount:
    if replicas is None:
        return default_replicas(size)
    count = parse_replicas(replicas, 1 << 30)
    if count.from_ > size:  # all of the ring's nodes, each needed
        return ReplicaCount(size, size)
    return count


class Replicas:
    """One client's choices, from a random stream of their own: with or without them, a
    seed draws the same nodes, kinds and keys in the same order."""

    def __init__(self, rng: random.Random, majorities_only: bool) -> None:
        self._rng = rng
        self._majorities_only = majorities_only

    def choose(self, size: int) -> str | None:
        return choose(self._rng, size, self._majorities_only)


class Overlap:
    """`dht.history.checker.Overlaps` for a run whose rings had these sizes: a read
    must see a write when their quorums meet on each."""

    def __init__(self, sizes: Iterable[int]) -> None:
        self._sizes = sorted(set(sizes))

    def __call__(self, read: str | None, write: str | None) -> bool:
        return all(meet(read, write, size) for size in self._sizes)
