"""The anti-entropy benchmark's cluster: its nodes' flags, polling their status until a
condition holds (in sync above all), restarting and wiping nodes, and what their data
folders and logs show (LevelDB's size and compactions, warnings)."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.exchange_status import Status, Statuses, in_sync
from dht.config import NodeConfig

INTERVAL = 1.0
DEFAULT_GRACE = NodeConfig.tombstone_grace
POLL = 0.1
QUIET_LOG = "no --secret"  # the one warning every node logs at start, by design


def node_flags(rate: float, grace: float = DEFAULT_GRACE) -> list[str]:
    """The nodes' flags. A short grace comes with a drift bound of a quarter of it (the
    nodes share one clock): exchanges hand a tombstone to a node without it until it is
    dead for half the grace plus twice the drift (SPEC.md rule 9.10), so a larger bound
    would keep collected tombstones going round for two minutes."""
    drift = min(NodeConfig.max_clock_drift, grace / 4)
    return [
        "--log-level",
        "WARNING",
        "--hint-max-bytes",
        "0",
        "--anti-entropy-interval",
        f"{INTERVAL:g}",
        "--anti-entropy-rate",
        f"{rate:g}",
        "--tombstone-grace",
        f"{grace:g}",
        "--max-clock-drift",
        f"{drift:g}",
    ]


def status(node: Any) -> Status:
    from dht.conformance.http_client import request

    answer = request("GET", node.url + "/v0/status", timeout=5)
    if answer.status != 200:
        raise RuntimeError(f"{node.url}/v0/status: {answer.status} {answer.text}")
    result: Status = json.loads(answer.body)
    return result


def statuses(cluster: Any) -> Statuses:
    return {node.cluster_url: status(node) for node in cluster}


def wait(
    probe: Callable[[], Statuses], done: Callable[[Statuses], bool], what: str, deadline: float
) -> Statuses:
    started = time.monotonic()
    while True:
        now = probe()
        if done(now):
            return now
        if time.monotonic() - started > deadline:
            raise TimeoutError(f"{what}: not within {deadline:g} s")
        time.sleep(POLL)


def wait_in_sync(cluster: Any, deadline: float) -> Statuses:
    """Until every node's trees are loaded and every pair has exchanged, finding nothing
    to copy, since now."""
    before = wait(
        lambda: statuses(cluster),
        lambda s: all(n["anti_entropy"]["trees_ready"] for n in s.values()),
        "trees loaded",
        deadline,
    )
    return wait(lambda: statuses(cluster), lambda s: in_sync(before, s), "in sync", deadline)


def wait_in_sync_from(cluster: Any, probe: Callable[[], Statuses], deadline: float) -> Statuses:
    before = probe()
    return wait(probe, lambda s: in_sync(before, s), "in sync", deadline)


def restart_all(cluster: Any, flags: list[str]) -> None:
    cluster.stop()
    for node in cluster:
        node.extra_args = list(flags)
    cluster.start()


def wipe_and_restart(node: Any) -> float:
    """Stops `node`, deletes its data folder, starts it; returns when it started (the
    monotonic clock just before the start) after it answers."""
    node.stop()
    shutil.rmtree(node.data_dir)
    started = time.monotonic()
    node.start()
    return started


def same_records(a: Any, b: Any) -> bool:
    return bool(a.local_records() == b.local_records())


def compaction_starts(log: Iterable[str]) -> list[datetime.datetime]:
    """When LevelDB began each compaction, from its LOG file: lines
    `2026/11/23-13:36:53.057... Compacting 1@1 + 7@2 files` (its local time)."""
    starts = []
    for line in log:
        if " Compacting " in line:
            with contextlib.suppress(ValueError):
                starts.append(datetime.datetime.strptime(line[:26], "%Y/%m/%d-%H:%M:%S.%f"))
    return starts


def compactions_between(node: Any, began: datetime.datetime, ended: datetime.datetime) -> int:
    log = node.data_dir / "leveldb" / "LOG"
    if not log.exists():
        return 0
    lines = log.read_text(errors="replace").splitlines()
    return sum(began <= start <= ended for start in compaction_starts(lines))


def leveldb_bytes(node: Any) -> int:
    """`du -sb` of the node's LevelDB folder: its files' sizes."""
    total = 0
    for folder, _, files in os.walk(node.data_dir / "leveldb"):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += (Path(folder) / name).stat().st_size
    return total


def compact(node: Any) -> None:
    """LevelDB's CompactRange over every key of a stopped node. Bounds are given: plyvel
    1.5's `compact_range()` without them passes empty keys, not "unbounded", and compacts
    nothing. Every stored key starts with a one-byte prefix below 0xff (dht.storage.store)."""
    import plyvel

    db = plyvel.DB(str(node.data_dir / "leveldb"))
    try:
        db.compact_range(start=b"", stop=b"\xff" * 8)
    finally:
        db.close()


def log_problems(lines: Iterable[str]) -> list[str]:
    """The lines of a node's log that report something wrong: warnings, errors and
    tracebacks, but the no-secret warning every node gives at start."""
    markers = ("WARNING", "ERROR", "CRITICAL", "Traceback")
    return [
        line.rstrip()
        for line in lines
        if any(marker in line for marker in markers) and QUIET_LOG not in line
    ]


def node_log_problems(cluster: Any, name: str = "node") -> list[str]:
    problems = []
    for index, node in enumerate(cluster):
        if node.log_path and node.log_path.exists():
            lines = node.log_path.read_text(errors="replace").splitlines()
            problems += [f"{name} {index + 1}: {line}" for line in log_problems(lines)]
    return problems
