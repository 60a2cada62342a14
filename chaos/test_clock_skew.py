"""A node whose wall clock runs ahead (SPEC.md rules 8.4 and 9.13), through `--clock-skew`,
the test-only offset of one process' clock: what last-write-wins then does.

Versions are hybrid-clock time, so writes are ordered by their versions, not by real
time. The history checker assumes clocks agree within 10 ms.

- Within `--max-clock-drift`: a write through a node that has not heard the skewed clock
  (a 1/1 write forwarded to the skewed node) is stamped older than an earlier write
  from it; the replica keeps the earlier one and says so, and the coordinator sends the
  write again past that version (rule 9.13), so the later write wins. Under concurrent
  traffic at the default quorum the checker, with its usual 10 ms slack, finds nothing
  lost or stale. (Before rule 9.13 re-stamped such writes, the later write was
  acknowledged and lost.)
- Past the bound: the skewed node's clock is off from the majority's, so it is fenced
  (503 for every client request) and coordinates nothing; reads through the other nodes
  keep every acknowledged write, and no read through any node, at any A/F, returns a
  write the peers refused (before the fence, reads through the skewed node did).

Run with -s for the figures; DHT_SKEW_SECONDS (default 6) is how long each traffic run
lasts. Each traffic run leaves a run folder with its plot.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.flags import FAST_FAULTS
from dht.config import NodeConfig
from dht.conformance.http_client import expect, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, attempt, final_read, key_space
from dht.history.checker import Kind, Op, Report, Window, check
from dht.history.run_folder import Run, new_run_dir, write_run
from dht.model.ring import Ring
from dht.testbed.toxiproxy import node_name

TRAFFIC_SECONDS = float(os.environ.get("DHT_SKEW_SECONDS", "6"))
SEED = 13
KEYS = key_space(16)
CLIENT_TIMEOUT = 2.0


def skewed_cluster(root: Path, skew: float, extra: list[str] | None = None) -> Cluster:
    """Three nodes (not started) whose first runs `skew` seconds ahead."""
    cluster = Cluster(root, 3, [*FAST_FAULTS, *(extra or [])])
    cluster[0].extra_args += ["--clock-skew", str(skew)]
    return cluster


def not_fenced(cluster: Cluster) -> bool:
    """No node fenced for its clock (SPEC.md rule 9.13), once each has measured every
    peer: a clock off by less than the bound is not off."""
    for node in cluster:
        fence = wait_for(
            lambda node=node: node.status()["clock_fence"],
            lambda fence: None not in fence["offsets"].values(),
        )
        if fence["fenced"] is not None:
            return False
    return True


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[list[Cluster]]:
    """Clusters a test appends (started by it), all stopped at teardown."""
    started: list[Cluster] = []
    yield started
    for cluster in started:
        cluster.stop()


@rule("8.4", "9.13")
def test_within_the_bound_a_later_write_wins_over_an_earlier_one_from_a_clock_ahead(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    skew = 1.0
    cluster = skewed_cluster(tmp_path, skew)
    clusters.append(cluster)
    cluster.start()
    ahead, other = cluster[0], cluster[1]
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    # A key held by the skewed node alone at 1/1, so the other coordinator never hears
    # its clock before it writes.
    alone = next(
        key
        for key in (f"k{index}" for index in range(1000))
        if ring.replicas_for(key.encode(), 1)[0] == ahead.url
    )
    restamped = other.status()["restamped_writes"]

    first = attempt(ahead, Kind.PUT, alone, b"earlier, from the clock ahead", 5.0, replicas="1/1")
    time.sleep(0.05)  # past the checker's 10 ms: the writes are ordered in real time
    second = attempt(other, Kind.PUT, alone, b"later, from the right clock", 5.0, replicas="1/1")
    read = attempt(other, Kind.GET, alone, None, 5.0, replicas="1/1")
    assert (first.status, second.status) == (201, 201)
    assert read.value == second.value, "the later write lost to the clock ahead"
    report = check([first, second, read], {alone: read.value})
    assert report.ok, report.details()
    assert other.status()["restamped_writes"] == restamped + 1

    # A coordinator that has heard the clock ahead orders its writes after it (rule 8.4)
    # without sending them again.
    expect(ahead.put("heard", b"from the clock ahead", "3/3"), 201)
    expect(other.put("heard", b"after hearing it", "3/3"), 201)
    expect(other.get("heard", "3/3"), 200, b"after hearing it")
    assert other.status()["restamped_writes"] == restamped + 1
    assert not_fenced(cluster)


def traffic_run(
    cluster: Cluster, scenario: str, skew: float
) -> tuple[list[Op], Report, Path, tuple[dict[str, bytes | None], dict[str, Window]]]:
    """Clients through every node for TRAFFIC_SECONDS, then one quorum read per key
    through the nodes whose clocks are right; checked with the usual 10 ms slack, and
    saved as a run folder."""
    clients = Clients(cluster.nodes, KEYS, 4, SEED, CLIENT_TIMEOUT).start()
    try:
        time.sleep(TRAFFIC_SECONDS)  # the traffic's lifetime
    finally:
        history = clients.stop()
    right = cluster.nodes[1:]
    reads = {key: final_read(right[index % 2], key) for index, key in enumerate(KEYS)}
    final = {key: value for key, (value, _) in reads.items()}
    final_at = {key: seen for key, (_, seen) in reads.items()}
    report = check(history, final, final_at=final_at)
    details = {"skew_seconds": skew, "seconds": TRAFFIC_SECONDS, "seed": SEED}
    plot = write_run(new_run_dir(scenario), Run(scenario, history, [], final, final_at, details))
    return history, report, plot, (final, final_at)


@rule("9.13")
def test_concurrent_writers_lose_nothing_to_a_clock_ahead_within_the_bound(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """The checker with its usual 10 ms slack: a write acknowledged after another wins,
    whichever node's clock stamped either."""
    skew = 0.5
    cluster = skewed_cluster(tmp_path, skew)
    clusters.append(cluster)
    cluster.start()
    _, report, plot, _ = traffic_run(cluster, "clock-skew-within-bound", skew)
    restamped = sum(node.status()["restamped_writes"] for node in cluster)
    print(
        f"\nclock +{skew:g}s on node1, {TRAFFIC_SECONDS:g}s of traffic: {report.summary()}"
        f"\nwrites sent again with a newer version: {restamped}\nrun folder: {plot.parent}"
    )
    assert report.acked > 0
    assert report.ok, report.details()
    assert not_fenced(cluster)


def fenced(node: Node) -> str:
    """The node's clock fence (SPEC.md rule 9.13), once it holds: a node started with its
    peers is fenced within a look (0.1 s) of their start; restarted while they run, from
    its first answer."""
    reason: str = wait_for(lambda: node.status()["clock_fence"]["fenced"], bool)
    return reason


@rule("8.4", "9.13")
def test_past_the_bound_the_skewed_node_is_fenced_and_nothing_is_lost(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    skew = 120.0
    cluster = skewed_cluster(tmp_path, skew, ["--max-clock-drift", "60"])
    clusters.append(cluster)
    cluster.start()
    reason = fenced(cluster[0])
    history, report, plot, _ = traffic_run(cluster, "clock-skew-past-bound", skew)
    through_skewed = [op for op in history if op.node == "node1"]
    print(
        f"\nclock +{skew:g}s on node1 (bound 60 s), {TRAFFIC_SECONDS:g}s of traffic: "
        f"{report.summary()}\noperations through node1: {len(through_skewed)}, answered "
        f"503: {sum(op.status == 503 for op in through_skewed)}; its fence: {reason}"
        f"\nrun folder: {plot.parent}"
    )
    # Ahead of the majority, or, at a look before its second peer listened, ahead of
    # the one that answered (rule 9.13): fenced either way, from its first answer.
    assert "~120 s ahead of" in reason
    assert through_skewed and all(op.status == 503 for op in through_skewed)
    for node in cluster.nodes[1:]:
        assert node.status()["clock_fence"]["fenced"] is None
    assert report.acked > 0
    assert report.ok, report.details()


# Every `replicas=A/F` a read can ask for on three nodes.
EVERY_REPLICA_COUNT = ("1/1", "1/2", "2/2", "1/3", "2/3", "3/3")
OVERWRITTEN = [f"overwritten-{index:02d}" for index in range(30)]


def converged(cluster: Cluster, keys: list[str]) -> bool:
    """Every node holds, for every key, a version at least as new as the newest that a
    node whose clock is right holds: the writes that went on after their answers have
    landed (a version refused as too far ahead lands nowhere else)."""
    held = [node.local_records() for node in cluster]
    return all(
        key in records and records[key].version >= newest
        for key in keys
        for newest in [max(records[key].version for records in held[1:] if key in records)]
        for records in held
    )


@rule("9.13")
def test_past_the_bound_no_read_through_any_node_sees_a_refused_write(
    tmp_path: Path, clusters: list[Cluster]
) -> None:
    """Issue 29's case, as a user meets it, with the default flags: 30 keys written at
    2/3 through a right node, overwritten through the node 120 s ahead (refused by its
    peers), then written again or deleted through the other right node; then every key
    read through every node at every A/F. A node that answered from its own refused
    writes would read them back instead of the acknowledged ones: stale reads and
    resurrections, which the checker counts (before the fence, in four runs: 8 to 17 of
    the 180 reads through node1, at 1/1, 1/2, 1/3 and once 2/2; none through the two
    others)."""
    skew = 120.0
    cluster = Cluster(tmp_path, 3)  # the default flags: --max-clock-drift 60 s
    cluster[0].extra_args += ["--clock-skew", str(skew)]
    clusters.append(cluster)
    cluster.start()
    fenced(cluster[0])
    names = {node.url: node_name(index) for index, node in enumerate(cluster)}
    ahead, first, second = cluster

    def write(node: Node, kind: Kind, key: str, value: bytes | None) -> Op:
        return attempt(node, kind, key, value, 5.0, node_name=names[node.url], replicas="2/3")

    history = [write(first, Kind.PUT, key, f"{key} from node2".encode()) for key in OVERWRITTEN]
    refused = [write(ahead, Kind.PUT, key, f"{key} from node1".encode()) for key in OVERWRITTEN]
    history += refused
    for index, key in enumerate(OVERWRITTEN):  # acknowledged after the refused ones
        if index % 2:
            history.append(write(second, Kind.PUT, key, f"{key} again from node3".encode()))
        else:
            history.append(write(second, Kind.DELETE, key, None))
    wait_for(lambda: converged(cluster, OVERWRITTEN), bool, deadline=10.0)
    for node in cluster:
        for replicas in EVERY_REPLICA_COUNT:
            history += [
                attempt(
                    node, Kind.GET, key, None, 5.0, node_name=names[node.url], replicas=replicas
                )
                for key in OVERWRITTEN
            ]
    reads = {key: final_read(first, key) for key in OVERWRITTEN}
    final = {key: value for key, (value, _) in reads.items()}
    final_at = {key: seen for key, (_, seen) in reads.items()}
    report = check(history, final, final_at=final_at)
    refused_values = {op.value for op in refused}
    seen_refused, wrong, unavailable = {}, {}, {}
    for name in names.values():
        through = [op for op in history if op.is_write or op.node == name]
        alone = check(through, final, final_at=final_at)
        wrong[name] = len(alone.stale_reads) + len(alone.resurrected)
        gets = [op for op in through if not op.is_write]
        seen_refused[name] = sum(op.value in refused_values for op in gets)
        unavailable[name] = sum(op.status == 503 for op in gets)
    print(
        f"\nclock +{skew:g}s on node1 (bound 60 s): {report.summary()}"
        f"\nwrites through node1 acknowledged: {sum(op.acknowledged for op in refused)} of "
        f"{len(refused)}; reads returning a refused write, by node: {seen_refused}"
        f"\nstale reads and resurrections, by node: {wrong}; reads answered 503: {unavailable}"
    )
    assert all(op.status == 503 for op in refused)  # fenced: not even tried
    assert report.ok, report.details()
    assert sum(wrong.values()) == 0 and sum(seen_refused.values()) == 0
    assert unavailable == {"node1": 180, "node2": 0, "node3": 0}
