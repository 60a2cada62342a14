"""The anti-entropy benchmark's tombstone figure: the disk space of deleted keys, from
the deletes until every tombstone is collected, then with the nodes stopped and after an
explicit compaction."""

from __future__ import annotations

import time
from typing import Any

from bench.anti_entropy_cluster import (
    INTERVAL,
    compact,
    leveldb_bytes,
    node_flags,
    restart_all,
    statuses,
    wait_in_sync,
)
from bench.anti_entropy_load import deletes, send
from bench.anti_entropy_report import Tombstones, progress
from bench.exchange_status import copied


def tombstones(cluster: Any, keys: int, deadline: float, rate: float) -> Tombstones:
    """On a cluster holding the keys: restarts it with `--tombstone-grace 1`, deletes every
    key and measures the LevelDB folders until every tombstone is gone (or `deadline`
    passed, which is reported), then stops the nodes and compacts their databases."""
    restart_all(cluster, node_flags(rate, grace=1.0))
    progress("tombstones: waiting for the cluster to be in sync")
    wait_in_sync(cluster, deadline)

    def sizes() -> list[int]:
        return [leveldb_bytes(node) for node in cluster]

    before_deletes = sizes()
    progress(f"tombstones: deleting {keys:,} keys")
    delete_s = send(cluster[0].url, deletes(range(keys)), 202)
    deleted_at = time.monotonic()
    after_deletes = sizes()
    before = copied(statuses(cluster))
    progress("tombstones: waiting for the collection")
    collect_s: float | None = None
    gone_s: float | None = None
    left = [-1] * len(cluster)
    while time.monotonic() - deleted_at < deadline:
        now = statuses(cluster)
        if collect_s is None and all(n["tombstones"]["collected"] >= keys for n in now.values()):
            collect_s = time.monotonic() - deleted_at
        if collect_s is not None:
            # `collected` counts a tombstone again each time it is collected (after it was
            # copied back): only the records themselves say that every one is gone.
            left = [len(node.local_records()) for node in cluster]
            if not any(left):
                gone_s = time.monotonic() - deleted_at
                break
        time.sleep(1.0)
    else:
        left = [len(node.local_records()) for node in cluster]
    time.sleep(2 * INTERVAL)  # a little time for LevelDB's own compactions
    settled = statuses(cluster)
    after = copied(settled)
    after_collection = sizes()
    collected = [settled[node.cluster_url]["tombstones"]["collected"] for node in cluster]
    cluster.stop()
    after_stop = sizes()
    for node in cluster:
        compact(node)
    after_compaction = sizes()
    return Tombstones(
        keys,
        len(cluster),
        before_deletes,
        after_deletes,
        after_collection,
        after_stop,
        after_compaction,
        collected,
        left,
        collect_s,
        gone_s,
        sum(after) - sum(before),
        delete_s,
        deadline,
    )
