"""Flapping faults under concurrent quorum traffic (SPEC.md rules 3.5, 9.8, 9.9, 9.10,
9.12).

One run per module: a 3-node cluster behind Toxiproxy, 4 client threads writing (a
quarter of the PUTs with a ttl of 1-3 s), deleting and reading a 16-key space at the
default quorum (2/3) straight to the nodes, while one fault at a time (links into a node
cut, answers slower than the deadline, connections reset, a node partitioned both ways,
a node paused, a node killed with SIGKILL and started again; at least one kill, past
half of the run), each 0.5-2 s long, flaps for DHT_FLAP_SECONDS (default 20) seconds,
chosen with the seed DHT_FLAP_SEED. Then every fault is healed and two rules are checked
on the outcome. Each run leaves a run folder (`dht.history.run_folder`): history, faults,
final state and a plot, under artifacts/chaos-runs or $DHT_CHAOS_RUNS.

A second scenario runs the faults that together once lost acknowledged writes and undid
deletes (issue 24): hints off, anti-entropy every 0.5 s and a 2 s tombstone grace, one
node's clock running ahead within the drift bound, pauses and kill -9 restarts (of that
node too), and deletes at a smaller `F` than the writes (2/2 against 2/3). With no read
after the heal, anti-entropy alone must bring the replicas together, and no collected
tombstone or expiry may let a dead value back. Run with -s to see the figures.
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
from chaos.flapping import CRASH, Fault, flap
from chaos.observe import describe, differences, live_differences, records_by_node, wall_ms, zombies
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, final_read, key_space
from dht.history.checker import CLOCK_SLACK, Op, Report, Window, check
from dht.history.run_folder import Run, new_run_dir, write_run
from dht.model.record import Record, newest
from dht.testbed import toxiproxy as test_bed  # a module import: pytest would collect the class
from dht.testbed.toxiproxy import node_name
from tests.fixtures import ChaosClusterFactory

FLAP_SECONDS = float(os.environ.get("DHT_FLAP_SECONDS", "20"))
FLAP_SEED = int(os.environ.get("DHT_FLAP_SEED", "2020"))
CLIENTS = 4
KEYS = key_space(16)
CLIENT_TIMEOUT = 1.0
# From the heal: breakers close after their cooldown (0.5 s), hints go out every 0.2 s.
CONVERGE_DEADLINE = 10.0


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
            faults = flap(testbed, FLAP_SECONDS, FLAP_SEED, TIMEOUT, nodes=cluster.nodes)
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
        f"hints delivered {[node.status()['hints_delivered'] for node in nodes]}, "
        f"dropped {[node.status()['hints_dropped'] for node in nodes]}, "
        f"read repairs {[node.status()['read_repairs'] for node in nodes]}"
    )
    assert not diverging, "\n".join(
        f"{key!r}: {records}" for key, records in list(diverging.items())[:10]
    )
    assert {op.key for op in flapping_run.history if op.acknowledged} <= set(snapshots[0])


@pytest.fixture(scope="module")
def report(flapping_run: FlappingRun) -> Report:
    """The checker's verdict on the run: one quorum read per key after the heal (through
    each node in turn) gives the final state."""
    nodes = flapping_run.cluster.nodes
    reads = {key: final_read(nodes[index % len(nodes)], key) for index, key in enumerate(KEYS)}
    final = {key: value for key, (value, _) in reads.items()}
    final_at = {key: seen for key, (_, seen) in reads.items()}
    report = check(flapping_run.history, final, final_at=final_at)
    plot = write_run(
        new_run_dir("flapping"),
        Run(
            "flapping",
            flapping_run.history,
            [fault.window() for fault in flapping_run.faults],
            final,
            final_at,
            {"seconds": FLAP_SECONDS, "seed": FLAP_SEED, "client_timeout": CLIENT_TIMEOUT},
        ),
    )
    print(f"\nhistory: {report.summary()}\nrun folder: {plot.parent}")
    return report


@rule("9.8", "9.12")
def test_flapping_faults_lose_no_acknowledged_write(
    flapping_run: FlappingRun, report: Report
) -> None:
    """Link faults, pauses and at least one kill -9 with a restart on the same data."""
    assert any(fault.kind == CRASH for fault in flapping_run.faults), "no crash was applied"
    assert report.acked > 0, "no write was acknowledged at all"
    assert report.final_state_ok, report.details()


@rule("3.5", "9.8")
def test_quorum_reads_during_flapping_faults_see_every_acknowledged_write(
    report: Report,
) -> None:
    """SPEC.md rule 3.5: GET 2/3 sees a PUT 2/3 and a DELETE 2/3, faults or not."""
    assert report.reads_ok, report.details()


# -- hints off, anti-entropy on, tombstones collected (SPEC.md rules 9.9 and 9.10) -------

ANTI_ENTROPY_FLAGS = [
    *FAST_FAULTS,
    "--hint-max-bytes",
    "0",
    "--anti-entropy-interval",
    "0.5",
    "--tombstone-grace",
    "2",
]
# From the heal: breakers close after their cooldown (0.5 s), then one exchange per pair
# every 0.5 s; generous for a shared machine.
ANTI_ENTROPY_DEADLINE = 30.0
# More keys than the first scenario, so that a key now and then goes unwritten for longer
# than the grace and its tombstone or expired record is collected while faults go on.
SPREAD_KEYS = key_space(512)
# The node whose clock runs ahead, and by how much: within --max-clock-drift, so its
# versions carry the others forward, and a restart must not carry them back (SPEC.md
# rule 8.7).
AHEAD = 1
SKEW_SECONDS = 1.0
# The history checker's clock slack: the skew and the usual 10 ms on top (as in
# chaos/test_clock_skew), never the skew alone. A record through another coordinator
# reads as expired through the node ahead a whole skew early (SPEC.md rule 8.6), and
# both clocks read whole milliseconds: with the skew alone as slack, a read a hair under
# `ttl - skew` after the write's invocation is judged stale though dht answered right.
CHECKER_SLACK = SKEW_SECONDS + CLOCK_SLACK
# Deletes at a smaller F than the writes' (3, the cluster's): collection must still wait
# for the replica the delete did not go to (SPEC.md rule 9.10).
SMALLER_FROM_DELETES = Mix(delete_replicas="2/2")


def converged_records(
    nodes: list[Node], deadline: float
) -> tuple[list[dict[str, Record]], int, Window]:
    """Polls every node's own records until they agree on live data (see
    `live_differences`), for at most `deadline` seconds. Returns the last snapshots, the
    wall-clock moment they were judged at (ms), and when they were observed on the
    history's clock: from the first node's read to that moment. Fails naming the keys
    that still differ."""
    started = time.monotonic()
    while True:
        read_from = time.monotonic()
        snapshots = records_by_node(nodes)
        now_ms = wall_ms()
        judged_at = time.monotonic()
        diverging = live_differences(snapshots, now_ms)
        if not diverging:
            return snapshots, now_ms, (read_from, judged_at)
        if time.monotonic() - started > deadline:
            lines = [
                f"{key!r}: "
                + ", ".join(describe(record, now_ms) for record in records)
                + (" (a zombie: a newer dead record elsewhere)" if zombies(records, now_ms) else "")
                for key, records in list(diverging.items())[:10]
            ]
            raise AssertionError(
                f"replicas still disagree on {len(diverging)} keys {deadline:g}s after the "
                f"heal (at {now_ms} ms):\n" + "\n".join(lines)
            )
        time.sleep(0.1)


@rule("9.9", "9.10")
def test_with_hints_off_anti_entropy_converges_flapping_replicas_losing_and_resurrecting_nothing(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """Deletes (at 2/2) and expiring writes under flapping link faults, pauses and
    crashes, one node's clock ahead, with nothing but anti-entropy to carry a write to a
    replica that missed it (no hints, and no read once the faults stop, so no read
    repair either), and tombstones and expired records collected 2 s after they die.
    The replicas must come to agree on every live record, with no live value anywhere
    that another replica holds a newer tombstone or expiry for; then that state, taken
    as the final one, must keep every acknowledged write (0 lost) and bring back no
    deleted or expired value (0 resurrected)."""
    started = time.monotonic()
    cluster, testbed = start_chaos_cluster(3, ANTI_ENTROPY_FLAGS)
    ahead = cluster[AHEAD]
    ahead.stop()
    ahead.extra_args += ["--clock-skew", str(SKEW_SECONDS)]
    ahead.start()
    flapping = time.monotonic()
    clients = Clients(
        cluster.nodes, SPREAD_KEYS, CLIENTS, FLAP_SEED, CLIENT_TIMEOUT, SMALLER_FROM_DELETES
    ).start()
    try:
        faults = flap(testbed, FLAP_SECONDS, FLAP_SEED, TIMEOUT, nodes=cluster.nodes)
    finally:
        history = clients.stop()
    healed_at = time.monotonic()

    snapshots, now_ms, observed = converged_records(cluster.nodes, ANTI_ENTROPY_DEADLINE)
    converged_after = observed[1] - healed_at
    final: dict[str, bytes | None] = {}
    for key in SPREAD_KEYS:
        record = newest([snapshot.get(key) for snapshot in snapshots])
        final[key] = record.value if record is not None and record.live_at(now_ms) else None
    report = check(history, final, final_at=observed, clock_slack=CHECKER_SLACK)
    plot = write_run(
        new_run_dir("flapping-anti-entropy"),
        Run(
            "flapping, hints off, anti-entropy, a clock ahead, deletes at 2/2",
            history,
            [fault.window() for fault in faults],
            final,
            observed,
            {
                "seconds": FLAP_SECONDS,
                "seed": FLAP_SEED,
                "client_timeout": CLIENT_TIMEOUT,
                "clock_skew": {node_name(AHEAD): SKEW_SECONDS},
                "clock_slack": CHECKER_SLACK,  # `python -m dht.history.report --clock-slack`
                "delete_replicas": SMALLER_FROM_DELETES.delete_replicas,
            },
        ),
    )

    statuses = [node.status() for node in cluster]
    exchanges = [
        sum(peer["anti_entropy"]["exchanges"] for peer in node_status["peers"].values())
        for node_status in statuses
    ]
    received = [
        sum(peer["anti_entropy"]["records_received"] for peer in node_status["peers"].values())
        for node_status in statuses
    ]
    collected = [node_status["tombstones"]["collected"] for node_status in statuses]
    live = sum(value is not None for value in final.values())
    kinds = Counter(fault.kind for fault in faults)
    print(
        f"\nanti-entropy flapping {FLAP_SECONDS:g}s (seed {FLAP_SEED}): {len(faults)} faults "
        f"({', '.join(f'{kind}: {count}' for kind, count in sorted(kinds.items()))}); "
        f"cluster up in {flapping - started:.2f}s, faults and traffic for "
        f"{healed_at - flapping:.2f}s; "
        f"converged {converged_after:.2f}s after heal ({live} live keys of {len(SPREAD_KEYS)}); "
        f"exchanges {exchanges}, records received {received}, "
        f"tombstones collected {collected}, read repairs "
        f"{[node_status['read_repairs'] for node_status in statuses]}, "
        f"hints delivered {[node_status['hints_delivered'] for node_status in statuses]}"
        f"\nhistory: {report.summary()}\nrun folder: {plot.parent}"
    )
    assert any(fault.kind == CRASH for fault in faults), "no crash was applied"
    assert report.acked > 0 and report.deletes > 0 and report.expiring > 0
    assert not report.lost and not report.resurrected, report.details()
    assert report.ok, report.details()
    assert sum(collected) > 0, "no tombstone or expired record was ever collected"
