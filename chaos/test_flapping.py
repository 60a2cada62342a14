"""Flapping faults under concurrent quorum traffic (SPEC.md rules 3.5 and 9.8).

One run per module: a 3-node cluster behind Toxiproxy, 4 client threads writing, deleting
and reading a 16-key space at the default quorum (2/3) straight to the nodes, while one
fault at a time (links into a node cut, answers slower than the deadline, connections
reset, a node partitioned both ways), each 0.5-2 s long, flaps for DHT_FLAP_SECONDS
(default 20) seconds, chosen with the seed DHT_FLAP_SEED. Then every fault is healed and
two rules are checked on the outcome. Run with -s to see the figures.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos.flags import FAST_FAULTS, TIMEOUT
from chaos.flapping import Fault, flap
from chaos.history import Op, Report, check
from chaos.observe import differences, records_by_node, status
from chaos.traffic import Clients, key_space
from dht import testbed as test_bed  # a module import: pytest would collect the class
from dht.record import Record
from tests.launcher import Cluster, Node, wait_for
from tests.spec.rules import rule

FLAP_SECONDS = float(os.environ.get("DHT_FLAP_SECONDS", "20"))
FLAP_SEED = int(os.environ.get("DHT_FLAP_SEED", "2020"))
CLIENTS = 4
KEYS = key_space(16)
CLIENT_TIMEOUT = 1.0
# From the heal: breakers close after their cooldown (0.5 s), hints go out every 0.2 s.
CONVERGE_DEADLINE = 10.0
FINAL_READ_DEADLINE = 10.0


@dataclass(frozen=True)
class FlappingRun:
    cluster: Cluster
    history: list[Op]
    faults: list[Fault]
    healed_at: float


@pytest.fixture(scope="module")
def flapping_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlappingRun]:
    """Runs the traffic and the faults once for the module, heals, and hands over the
    cluster (still running) with the recorded history."""
    root: Path = tmp_path_factory.mktemp("flapping")
    cluster = Cluster(root, 3, FAST_FAULTS)
    testbed = test_bed.Testbed(cluster.urls, root / "toxiproxy.log").start()
    try:
        for index, node in enumerate(cluster):
            node.extra_args += testbed.route_args(index)
        cluster.start()
        clients = Clients(cluster.nodes, KEYS, CLIENTS, FLAP_SEED, CLIENT_TIMEOUT).start()
        try:
            faults = flap(testbed, FLAP_SECONDS, FLAP_SEED, TIMEOUT)
        finally:
            history = clients.stop()
        healed_at = time.monotonic()  # flap() heals every link on its way out
        kinds = Counter(fault.kind for fault in faults)
        print(
            f"\nflapped {FLAP_SECONDS:g}s (seed {FLAP_SEED}): {len(faults)} faults: "
            + ", ".join(f"{kind} a node: {count}" for kind, count in sorted(kinds.items()))
        )
        yield FlappingRun(cluster, history, faults, healed_at)
    finally:
        cluster.stop()
        testbed.stop()


@rule("9.8")
def test_every_replica_converges_to_the_same_records_after_the_faults_stop(
    flapping_run: FlappingRun,
) -> None:
    """Every node's own records (versions and tombstones included) become identical
    within a deadline of the heal, by hinted handoff alone: nothing reads the keys
    before this check (so no read repair helps), and it runs before the final reads."""
    nodes = flapping_run.cluster.nodes
    snapshots: list[dict[str, Record]] = []
    while True:
        snapshots = records_by_node(nodes)
        diverging = differences(snapshots)
        waited = time.monotonic() - flapping_run.healed_at
        if not diverging or waited > CONVERGE_DEADLINE:
            break
        time.sleep(0.05)
    print(
        f"\nconverged: {not diverging}, {waited:.2f}s after heal; "
        f"{len(snapshots[0])} keys per node; "
        f"hints delivered {[status(node)['hints_delivered'] for node in nodes]}, "
        f"dropped {[status(node)['hints_dropped'] for node in nodes]}, "
        f"read repairs {[status(node)['read_repairs'] for node in nodes]}"
    )
    assert not diverging, "\n".join(
        f"{key!r}: {records}" for key, records in list(diverging.items())[:10]
    )
    assert {op.key for op in flapping_run.history if op.acknowledged} <= set(snapshots[0])


def final_read(node: Node, key: str) -> bytes | None:
    """A quorum GET, retried while it fails (a breaker may still be open just after the
    heal): the value, or None for 404."""
    response = wait_for(
        lambda: node.get(key),
        lambda response: response.status in (200, 404),
        deadline=FINAL_READ_DEADLINE,
    )
    return response.body if response.status == 200 else None


@pytest.fixture(scope="module")
def report(flapping_run: FlappingRun) -> Report:
    """The checker's verdict on the run: one quorum read per key after the heal (through
    each node in turn) gives the final state."""
    nodes = flapping_run.cluster.nodes
    final = {key: final_read(nodes[index % len(nodes)], key) for index, key in enumerate(KEYS)}
    report = check(flapping_run.history, final)
    print(f"\nhistory: {report.summary()}")
    return report


@rule("9.8")
def test_flapping_faults_lose_no_acknowledged_write(report: Report) -> None:
    assert report.acked > 0, "no write was acknowledged at all"
    assert report.final_state_ok, report.details()


@rule("3.5", "9.8")
def test_quorum_reads_during_flapping_faults_see_every_acknowledged_write(
    report: Report,
) -> None:
    """SPEC.md rule 3.5: GET 2/3 sees a PUT 2/3 and a DELETE 2/3, faults or not."""
    assert report.reads_ok, report.details()
