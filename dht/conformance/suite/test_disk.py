"""SPEC.md section 20: one node's volume full on a 3-node cluster at the default
`replicas`. Each node's data folder is a volume of fixed size in a mount namespace of
its own (dht/testbed/small_disk.py); the kit fills one with a ballast file under load,
then frees it. The nodes know nothing of it. The scenario is recorded and judged by its
history, as section 14's are (dht/conformance/faults.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.conformance.faults import (
    BOUND,
    CLIENT_TIMEOUT,
    RESUME_SECONDS,
    VOLUME_BYTES,
    Recorder,
    describe,
    during,
    first_failure,
    seconds,
    stored,
    took,
    write_until_stored,
)
from dht.conformance.http_client import status_code
from dht.conformance.launcher import Cluster, node_workdir
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.operation import Kind, Op
from dht.testbed.small_disk import SmallDisk, small_disk_unavailable

pytestmark = pytest.mark.disk

KEYS = key_space(16)
CLIENTS = 6
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
FULL = 2


def answered_read(op: Op) -> bool:
    """A read is not refused for a full volume: a 2xx, or 404 for an absent key."""
    return op.status in (200, 404) and (took(op) or 0.0) <= BOUND


def answered_at_all(op: Op) -> bool:
    """A write may be refused while a volume is full, with any status, but in time."""
    return op.status is not None and (took(op) or 0.0) <= BOUND


@pytest.fixture
def small_disks(tmp_path: Path) -> Iterator[tuple[Cluster, list[SmallDisk]]]:
    """3 nodes, each on a volume of its own of VOLUME_BYTES; skips, saying why, where
    one cannot be made (not root, not Linux)."""
    reason = small_disk_unavailable()
    if reason is not None:
        pytest.skip(f"a full disk needs a volume of fixed size per node: {reason}")
    cluster = Cluster(tmp_path / "cluster", 3)
    disks: list[SmallDisk] = []
    try:
        for node in cluster:
            disks.append(SmallDisk(node.data_dir, VOLUME_BYTES))
            node.prefix = disks[-1].prefix(node_workdir())
        yield cluster.start(), disks
    finally:
        cluster.stop()
        for disk in disks:
            disk.close()


@rule("20.1")
def test_a_node_whose_volume_fills_under_load_keeps_answering_and_loses_nothing(
    small_disks: tuple[Cluster, list[SmallDisk]],
) -> None:
    cluster, disks = small_disks
    victim, disk = cluster[FULL], disks[FULL]
    recorder = Recorder("disk-full", cluster.nodes)
    clients = Clients(cluster.nodes, KEYS, CLIENTS, seed=201, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    time.sleep(seconds(4.0, 1.5))
    with recorder.fault(f"volume of {recorder.name(victim)} full"):
        taken = disk.fill()
        time.sleep(seconds(10.0, 3.0))
        alive = victim.running and status_code(victim.url) == 200
        disk.free()
    freed = time.monotonic()
    first = write_until_stored(recorder, victim, KEYS, RESUME_SECONDS)
    restarted = ""
    if not stored(first):
        with recorder.fault(f"restart {recorder.name(victim)} on its data"):
            victim.kill()
            victim.start()
        first = write_until_stored(recorder, victim, KEYS, BOUND)
        restarted = " and a restart"
    after = time.monotonic() - freed
    time.sleep(seconds(3.0, 1.0))
    ops = clients.stop()
    recorder.add(ops)
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    window = recorder.faults[0]
    while_full = during(ops, window)
    reads = [op for op in while_full if op.kind is Kind.GET]
    writes = [op for op in while_full if op.is_write]
    assert reads and writes, "no read or no write ran while the volume was full"
    problems = [
        judged.failure(),
        "" if alive else f"{recorder.name(victim)} stopped answering /v0/status while full",
        first_failure(reads, answered_read, "a 2xx, or 404 for an absent key"),
        first_failure(writes, answered_at_all, "an answer (a refusal is fine)"),
        ""
        if stored(first)
        else (
            f"{describe(first)} {after:.1f} s after the volume was freed{restarted}; expected a 2xx"
        ),
    ]
    found = "; ".join(problem for problem in problems if problem)
    assert not found, f"the ballast took {taken:,} bytes: {found}"
