"""Hash trees for anti-entropy (dht/model/merkle.py) and the tombstone collection rule
(dht/replication/collector.py): pure logic, no sockets (SPEC.md rules 9.9 and 9.10)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dht.conformance.rules import rule
from dht.model.clock import version_at
from dht.model.merkle import (
    LEAF_BITS,
    LEAVES,
    Digest,
    MerkleTrees,
    build_levels,
    differing_children,
    leaf_of,
    record_digest,
)
from dht.model.record import Record
from dht.model.ring import Ring
from dht.replication.collector import collectible

NODES = ["http://a:1", "http://b:2", "http://c:3"]
RING = Ring(NODES, 64)


def entry(key: bytes, record: Record) -> Digest:
    return Digest(record.version, record_digest(key, record), record.copies)


def test_leaves_spread_keys_and_stay_in_range() -> None:
    leaves = [leaf_of(f"key-{i}".encode()) for i in range(20_000)]
    assert min(leaves) >= 0 and max(leaves) < LEAVES
    assert len(set(leaves)) > LEAVES * 0.95


def test_a_digest_changes_with_every_part_of_a_record() -> None:
    base = Record.live(version_at(1_000), b"value", 0, 3)
    variants = [
        Record.live(version_at(1_001), b"value", 0, 3),
        Record.live(version_at(1_000), b"valuf", 0, 3),
        Record.live(version_at(1_000), b"value", 5_000, 3),
        Record.live(version_at(1_000), b"value", 0, 2),
        Record.deleted(version_at(1_000), 3),
    ]
    digests = {record_digest(b"k", record) for record in [base, *variants]}
    assert len(digests) == 6
    assert record_digest(b"k", base) != record_digest(b"j", base)


@rule("9.9")
@settings(max_examples=50)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=8), st.integers(1, 3)), max_size=60))
def test_trees_agree_whatever_the_order_of_writes(writes: list[tuple[bytes, int]]) -> None:
    """Two nodes that applied the same writes in any order have the same trees: XOR
    leaves do not depend on order, and replaced digests leave no trace."""
    first, second = MerkleTrees(RING, NODES[0]), MerkleTrees(RING, NODES[0])
    state: dict[bytes, Digest] = {}
    for version, (key, copies) in enumerate(writes, start=1):
        new = entry(key, Record.live(version_at(version), key, 0, copies))
        first.change(key, state.get(key), new)
        state[key] = new
    second.load(random.Random(1).sample(sorted(state.items()), len(state)))
    for peer in first.leaves:
        assert first.hashes(peer, 0, [0]) == second.hashes(peer, 0, [0])


@rule("9.9")
def test_a_record_counts_only_in_the_trees_of_peers_that_share_it() -> None:
    trees = MerkleTrees(RING, NODES[0])
    key = next(k for i in range(1000) if RING.replicas_for(k := f"k{i}".encode(), 1) == [NODES[0]])
    trees.change(key, None, entry(key, Record.live(version_at(1), b"v", 0, 1)))  # 1 copy: ours
    assert all(not any(leaves) for leaves in trees.leaves.values())
    trees.change(key, None, entry(key, Record.live(version_at(2), b"v", 0, 0)))  # every node
    assert all(leaves[leaf_of(key)] for leaves in trees.leaves.values())


def test_descending_finds_exactly_the_differing_leaves() -> None:
    ours, theirs = [0] * LEAVES, [0] * LEAVES
    for leaf in (3, 500, LEAVES - 1):
        theirs[leaf] = 0xABC + leaf
    a, b = build_levels(ours), build_levels(theirs)
    nodes, compared = [0], 0
    for level in range(LEAF_BITS + 1):
        differing = [n for n in nodes if a[level][n] != b[level][n]]
        compared += len(nodes)
        if level == LEAF_BITS:
            break
        nodes = differing_children(level, differing)
    assert differing == [3, 500, LEAVES - 1]
    assert compared <= 1 + 2 * 3 * LEAF_BITS  # O(differences x depth), not O(leaves)


WRITTEN = version_at(1_000_000)
GRACE = 10_000


@rule("9.10")
def test_a_tombstone_goes_only_past_the_grace_and_after_every_node_exchanged() -> None:
    tombstone = Record.deleted(WRITTEN)
    arrived = 1_000_000
    later = 1_000_000 + GRACE + 1
    assert collectible(tombstone, arrived, later, GRACE, [1_000_001, 1_000_002])
    assert not collectible(tombstone, arrived, 1_000_000 + GRACE, GRACE, [1_000_001])
    assert not collectible(tombstone, arrived, later, GRACE, [1_000_001, None])  # never
    assert not collectible(tombstone, arrived, later, GRACE, [1_000_001, 999_999])  # before
    assert collectible(tombstone, arrived, later, GRACE, [])  # a ring of one


@rule("9.10")
def test_a_tombstone_is_judged_by_its_arrival_here_not_its_version_time() -> None:
    """Issue 24, finding 4: a tombstone from a coordinator 30 s behind, which arrived
    after a node's last exchange, waits for the next one and for the grace from its
    arrival."""
    tombstone = Record.deleted(WRITTEN)
    arrived = 1_030_000
    exchanged = [1_020_000]  # after the version's time, before the arrival
    assert not collectible(tombstone, arrived, arrived + GRACE + 1, GRACE, exchanged)
    assert not collectible(tombstone, arrived, arrived + GRACE, GRACE, [arrived + 1])
    assert collectible(tombstone, arrived, arrived + GRACE + 1, GRACE, [arrived + 1])


@rule("9.10")
def test_an_expiring_record_is_dead_from_its_expiry_and_a_live_one_never() -> None:
    expiring = Record.live(WRITTEN, b"v", expires_at=2_000_000)
    arrived = 1_000_000
    assert not collectible(expiring, arrived, 2_000_000 + GRACE, GRACE, [1_000_001])
    assert collectible(expiring, arrived, 2_000_000 + GRACE + 1, GRACE, [1_000_001])
    assert not collectible(Record.live(WRITTEN, b"v"), arrived, 10**12, GRACE, [1_000_001])
