"""The consistent-hash ring (SPEC.md rule 8.1: placement of keys on replicas)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dht.config import NodeConfig
from dht.model.ring import Ring

DEFAULT_VNODES = NodeConfig(port=0, data_dir=Path("."), cluster=(), self_url="").vnodes
BALANCE_KEYS = 1_000_000
MAX_OVER_MEAN = 1.10


def cluster_urls(count: int, host: str = "127.0.0.1", base_port: int = 8080) -> list[str]:
    """The topology `python -m dht cluster --nodes COUNT` builds with its defaults."""
    return [f"http://{host}:{base_port + i}" for i in range(count)]


def sample_keys(count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [f"key-{i}".encode() for i in range(count // 2)] + [
        rng.randbytes(rng.randrange(1, 40)) for _ in range(count - count // 2)
    ]


@pytest.fixture(scope="module")
def balance_keys() -> list[bytes]:
    return [f"key-{i}".encode() for i in range(BALANCE_KEYS)]


def test_replicas_do_not_depend_on_the_order_of_the_node_list() -> None:
    nodes = cluster_urls(5)
    shuffled = nodes[:]
    random.Random(7).shuffle(shuffled)
    rings = [
        Ring(nodes, 64),
        Ring(reversed(nodes), 64),
        Ring(shuffled, 64),
        Ring(nodes + nodes[:2], 64),  # a name listed twice is one node
    ]
    for key in sample_keys(2_000):
        expected = rings[0].replicas_for(key, 5)
        assert all(ring.replicas_for(key, 5) == expected for ring in rings[1:]), key


_CHILD = """
import json, sys
from dht.model.ring import Ring
nodes, vnodes, keys = json.load(sys.stdin)
ring = Ring(nodes, vnodes)
json.dump([ring.replicas_for(key.encode("latin-1"), len(nodes)) for key in keys], sys.stdout)
"""


@pytest.mark.parametrize("hash_seed", ["0", "1", "4242"])
def test_replicas_are_the_same_in_another_process(hash_seed: str) -> None:
    nodes = [*cluster_urls(5, host="localhost"), "http://10.0.0.7:9000"]
    keys = [key.decode("latin-1") for key in sample_keys(500, seed=3)]
    ring = Ring(nodes, DEFAULT_VNODES)
    here = [ring.replicas_for(key.encode("latin-1"), len(nodes)) for key in keys]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([nodes[::-1], DEFAULT_VNODES, keys]),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert json.loads(child.stdout) == here


@pytest.mark.parametrize("node_count", [1, 2, 3, 5, 10])
def test_replicas_are_distinct_nodes_of_the_ring_and_as_many_as_asked(node_count: int) -> None:
    nodes = cluster_urls(node_count)
    ring = Ring(nodes, 32)
    for key in sample_keys(300):
        for count in range(1, node_count + 3):
            found = ring.replicas_for(key, count)
            assert len(found) == min(count, node_count), (key, count)
            assert len(set(found)) == len(found)
            assert set(found) <= set(nodes)


def test_zero_replicas_is_an_empty_list() -> None:
    ring = Ring(cluster_urls(3), 32)
    assert ring.replicas_for(b"key", 0) == []


@pytest.mark.parametrize("node_count", [2, 3, 5, 10])
def test_the_replicas_for_fewer_copies_are_a_prefix_of_those_for_more(node_count: int) -> None:
    ring = Ring(cluster_urls(node_count), DEFAULT_VNODES)
    for key in sample_keys(2_000):
        full = ring.replicas_for(key, node_count)
        for count in range(1, node_count + 1):
            assert ring.replicas_for(key, count) == full[:count], (key, count)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
@pytest.mark.parametrize("node_count", [3, 5, 10])
def test_primary_owners_are_balanced_at_the_default_vnode_count(
    balance_keys: list[bytes], node_count: int, host: str
) -> None:
    ring = Ring(cluster_urls(node_count, host), DEFAULT_VNODES)
    load = Counter(ring.replicas_for(key, 1)[0] for key in balance_keys)
    mean = len(balance_keys) / node_count
    assert len(load) == node_count
    worst = max(load.values()) / mean
    assert worst <= MAX_OVER_MEAN, (
        f"{node_count} nodes on {host}, {DEFAULT_VNODES} vnodes: max/mean {worst:.4f}"
    )


@pytest.mark.parametrize("old_count", [3, 5, 9])
def test_adding_a_node_moves_about_one_in_n_keys_and_only_to_the_new_node(
    old_count: int,
) -> None:
    old_nodes = cluster_urls(old_count + 1)
    added = old_nodes.pop(len(old_nodes) // 2)
    before = Ring(old_nodes, DEFAULT_VNODES)
    after = Ring([*old_nodes, added], DEFAULT_VNODES)
    keys = sample_keys(100_000)
    moved = 0
    for key in keys:
        old_owner = before.replicas_for(key, 1)[0]
        new_owner = after.replicas_for(key, 1)[0]
        if new_owner != old_owner:
            assert new_owner == added, (key, old_owner, new_owner)
            moved += 1
    expected = 1 / (old_count + 1)
    assert moved / len(keys) == pytest.approx(expected, rel=0.25)


@pytest.mark.parametrize("old_count", [3, 5])
def test_adding_a_node_changes_a_replica_set_only_by_the_new_node_entering_it(
    old_count: int,
) -> None:
    old_nodes = cluster_urls(old_count + 1)
    added = old_nodes.pop(1)
    before = Ring(old_nodes, DEFAULT_VNODES)
    after = Ring([*old_nodes, added], DEFAULT_VNODES)
    entered = 0
    for key in sample_keys(5_000):
        for count in range(1, old_count + 1):
            old_set = before.replicas_for(key, count)
            new_set = after.replicas_for(key, count)
            if new_set == old_set:
                continue
            assert added in new_set, (key, count, old_set, new_set)
            kept = [node for node in new_set if node != added]
            assert kept == old_set[: len(kept)], (key, count, old_set, new_set)
            entered += 1
    assert entered > 0


@pytest.mark.parametrize("size", [1, 3, 5])
def test_shares_are_the_hash_space_each_node_is_first_for(size: int) -> None:
    """`Ring.shares` (shown in /v0/status and /metrics) is the fraction of keys whose
    first replica each node is: computed from the tokens, checked against keys placed."""
    ring = Ring(cluster_urls(size), vnodes=64)
    shares = ring.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    keys = sample_keys(200_000, seed=3)
    firsts = Counter(ring.replicas_for(key, 1)[0] for key in keys)
    for node in ring.nodes:
        assert firsts[node] / len(keys) == pytest.approx(shares[node], abs=0.005)


def test_shares_count_the_arc_that_wraps_past_the_top_of_the_hash_space() -> None:
    """Keys hashing above the last token belong to the first token's node."""
    ring = Ring(["http://a:1", "http://b:1"], vnodes=1)
    tokens = ring._tokens
    first, last = ring._owners[0], ring._owners[-1]
    space = 1 << 64
    assert ring.shares()[first] == pytest.approx((space - tokens[-1] + tokens[0]) / space)
    assert ring.shares()[last] == pytest.approx((tokens[-1] - tokens[0]) / space)
