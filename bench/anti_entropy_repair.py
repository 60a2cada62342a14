"""The anti-entropy benchmark's repair figures: rebuilding a replica whose data folder
was wiped, and bringing back in sync one that missed a share of the writes while down."""

from __future__ import annotations

import random
import shutil
import time
from typing import Any

from bench.anti_entropy_cluster import (
    POLL,
    node_flags,
    same_records,
    status,
    statuses,
    wait,
    wait_in_sync_from,
)
from bench.anti_entropy_load import puts, send
from bench.anti_entropy_report import Divergence, Rebuild
from bench.exchange_status import Pair, Statuses, busiest, copied, exchange_stats, landed


def rebuild(cluster: Any, keys: int, rate: float, deadline: float) -> Rebuild:
    """Restarts nodes 1 and 2 at `rate` and waits for their trees, then starts node 3 on
    an empty data folder and times until every record was copied into it."""
    wiped = cluster[2]
    target = wiped.cluster_url
    cluster.stop()
    for node in cluster:
        node.extra_args = node_flags(rate)
    shutil.rmtree(wiped.data_dir)
    peers = cluster.nodes[:2]
    for node in peers:
        node.start(wait=False)
    for node in peers:
        node.wait_ready()
    wait(
        lambda: {node.cluster_url: status(node) for node in peers},
        lambda s: all(n["anti_entropy"]["trees_ready"] for n in s.values()),
        "trees loaded",
        deadline,
    )
    started = time.monotonic()
    wiped.start()
    ready = time.monotonic() - started
    first_copy: float | None = None
    while True:
        now = statuses(cluster)
        count = landed(now, target)
        elapsed = time.monotonic() - started
        if count and first_copy is None:
            first_copy = elapsed
        if count >= keys:
            break
        if elapsed > deadline:
            raise TimeoutError(f"rebuild: {count:,} of {keys:,} records after {deadline:g} s")
        time.sleep(POLL)
    pulled = sum(p["anti_entropy"]["records_received"] for p in now[target]["peers"].values())
    pushed = {
        node: status["peers"][target]["anti_entropy"]["records_sent"]
        for node, status in now.items()
        if node != target
    }
    verified = same_records(wiped, cluster[0])
    return Rebuild(keys, ready, elapsed, first_copy or elapsed, pulled, pushed, verified, rate)


def divergence(cluster: Any, keys: int, share: float, deadline: float, seed: int) -> Divergence:
    down = cluster[2]
    changed = sorted(random.Random(seed).sample(range(keys), max(1, round(keys * share))))
    down.stop()
    send(cluster[0].url, puts(changed, round_=1), 201)
    before = {node.cluster_url: status(node) for node in cluster if node is not down}
    sent_before, received_before = copied(before)
    baseline = {pair: s["exchanges"] for pair, s in exchange_stats(before).items()}
    started = time.monotonic()
    down.start()
    seen: dict[Pair, tuple[int, int]] = {}

    def probe() -> Statuses:
        now = statuses(cluster)
        busiest(seen, now, baseline)
        return now

    wait(probe, lambda s: landed(s, down.cluster_url) >= len(changed), "divergence", deadline)
    converged = time.monotonic() - started
    settled = wait_in_sync_from(cluster, probe, deadline)
    sent, received = copied(settled)
    verified = all(same_records(cluster[0], node) for node in cluster.nodes[1:])
    names = {node.cluster_url: f"node {i + 1}" for i, node in enumerate(cluster)}
    return Divergence(
        keys,
        len(changed),
        converged,
        sent - sent_before,
        received - received_before,
        {pair: figures for pair, figures in seen.items() if figures[1]},
        verified,
        names,
    )
