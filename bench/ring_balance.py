"""How evenly the ring spreads keys, by vnode count: the measurement behind the default.

For each topology of `python -m dht cluster` (http://127.0.0.1:8080, :8081, ...) and each
vnode count, counts the primary owner of N sampled keys and prints max/mean and min/mean
of the per-node load. Placement depends on node names, so it also computes each node's
exact share of the hash space (the arcs its tokens own) for many other name sets (other
base ports) and reports the median and worst max/mean and how often it stays within the
target.

    .venv/bin/python bench/ring_balance.py [--keys 1000000] [--vnodes 32 64 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

from dht.model.ring import Ring


def cluster_urls(count: int, base_port: int = 8080, host: str = "127.0.0.1") -> list[str]:
    return [f"http://{host}:{base_port + i}" for i in range(count)]


def sampled_load(nodes: list[str], vnodes: int, keys: list[bytes]) -> tuple[float, float]:
    """(max/mean, min/mean) of the primary-owner counts of `keys`."""
    ring = Ring(nodes, vnodes)
    load = Counter(ring.replicas_for(key, 1)[0] for key in keys)
    mean = len(keys) / len(nodes)
    counts = [load.get(node, 0) for node in nodes]
    return max(counts) / mean, min(counts) / mean


def exact_max_over_mean(nodes: list[str], vnodes: int) -> float:
    """max/mean of the nodes' shares of the hash space (`Ring.shares`)."""
    return max(Ring(nodes, vnodes).shares().values()) * len(nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--vnodes", type=int, nargs="+", default=[32, 64, 128, 256, 512, 1024])
    parser.add_argument("--name-sets", type=int, default=100, help="other base ports tried")
    parser.add_argument("--target", type=float, default=1.10, help="acceptable max/mean")
    args = parser.parse_args()

    keys = [f"key-{i}".encode() for i in range(args.keys)]
    bases = [20_000 + 400 * i for i in range(args.name_sets)]
    print(
        f"{args.keys} keys on http://127.0.0.1:8080...; exact shares over "
        f"{args.name_sets} other name sets (base ports 20000, 20400, ...)"
    )
    print(
        f"{'nodes':>5} {'vnodes':>6} {'max/mean':>9} {'min/mean':>9} "
        f"{'median*':>8} {'worst*':>7} {'<=' + str(args.target) + '*':>8} {'secs':>5}"
    )
    for nodes in args.nodes:
        for vnodes in args.vnodes:
            started = time.perf_counter()
            high, low = sampled_load(cluster_urls(nodes), vnodes, keys)
            spread = [exact_max_over_mean(cluster_urls(nodes, base), vnodes) for base in bases]
            within = sum(value <= args.target for value in spread) / len(spread)
            print(
                f"{nodes:>5} {vnodes:>6} {high:>9.4f} {low:>9.4f} "
                f"{statistics.median(spread):>8.4f} {max(spread):>7.4f} {within:>8.0%} "
                f"{time.perf_counter() - started:>5.1f}"
            )
    print("* exact max/mean of hash-space share across the other name sets")


if __name__ == "__main__":
    main()
