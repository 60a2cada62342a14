"""What a membership change moves, from the ring alone (issue 14's placement figures).

For the topologies `python -m dht cluster` builds (http://127.0.0.1:8080, :8081, ...) at
the default vnode count, grows 3 -> 4 -> 5 nodes and shrinks back to 3, and for each
change prints, over sampled keys:

- the share of keys whose first replica changes, against the ideal 1/(N+1) when a node
  joins (1/N when one leaves), with the issue's target: within 10% of it;
- the share whose replica set changes at F = 3 (what a handoff must copy at least once);
- that every moved key moved to the joining node (or away from the leaving one) only;
- the balance after the change: max/mean of the nodes' exact shares (`Ring.shares`),
  target <= 1.10.

    .venv/bin/python -m bench.membership [--keys 200000]
"""

from __future__ import annotations

import argparse
import itertools

from bench.ring_balance import cluster_urls
from dht.config import NodeConfig
from dht.model.ring import Ring

SIZES = (3, 4, 5, 4, 3)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.membership", description=__doc__)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--vnodes", type=int, default=NodeConfig.vnodes)
    parser.add_argument("--copies", type=int, default=3)
    args = parser.parse_args()
    keys = [f"key-{index}".encode() for index in range(args.keys)]
    print(
        f"{args.keys:,} keys, {args.vnodes} vnodes, replica sets of {args.copies}\n\n"
        "| change | first replica moved | ideal | within 10% | replica set changed "
        "| moved only to/from the changed node | max/mean after |\n"
        "| --- | --- | --- | --- | --- | --- | --- |"
    )
    for before, after in itertools.pairwise(SIZES):
        old, new = Ring(cluster_urls(before), args.vnodes), Ring(cluster_urls(after), args.vnodes)
        changed_node = set(old.nodes) ^ set(new.nodes)
        moved = changed = 0
        only_changed_node = True
        for key in keys:
            first_old, first_new = old.replicas_for(key, 1)[0], new.replicas_for(key, 1)[0]
            if first_old != first_new:
                moved += 1
                only_changed_node &= bool({first_old, first_new} & changed_node)
            if old.replicas_for(key, args.copies) != new.replicas_for(key, args.copies):
                changed += 1
        ideal = 1 / max(before, after)
        share = moved / len(keys)
        balance = max(new.shares().values()) * len(new)
        print(
            f"| {before} -> {after} | {share:.4f} | {ideal:.4f} | "
            f"{'yes' if abs(share - ideal) <= 0.10 * ideal else 'no'} | "
            f"{changed / len(keys):.4f} | {only_changed_node} | {balance:.3f} |"
        )


if __name__ == "__main__":
    main()
