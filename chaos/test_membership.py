"""Membership changes under load (SPEC.md section 13): nodes added and removed while
clients write, delete and read, with the history checker on.

- grow 3 -> 4 -> 5 and shrink back to 3 (removing one original node and one added one);
- kill -9 a node in the middle of its handoff, and restart it: its handoff resumes
  from the key it had reached, not from the first;
- cut every link into the receiving node in the middle of the stream, then heal.

Every case: 0 acknowledged writes lost, 0 stale reads, and after the change every key
sits on exactly its owners, checked on each node's own records (the internal range
stream, read from its LevelDB), and a removed node holds nothing. Records are preloaded
so the handoff has something to stream; DHT_MEMBERSHIP_RECORDS sets how many (default
3000) and DHT_HANDOFF_RATE the nodes' `--handoff-rate` (default 1500, low enough that
the faults land mid-stream). Run with -s to
see the figures.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chaos.flags import FAST_FAULTS
from dht.config import NodeConfig
from dht.conformance.http_client import expect, request, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.peer_tools import cluster_secret
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, final_read, key_space
from dht.history.checker import Op, check
from dht.history.run_folder import FaultWindow, Run, new_run_dir, write_run
from dht.membership.driver import ChangeReport, change_membership
from dht.model.ring import Ring
from dht.testbed.toxiproxy import Testbed, free_ports, ports_needed

RECORDS = int(os.environ.get("DHT_MEMBERSHIP_RECORDS", "3000"))
HANDOFF_RATE = int(os.environ.get("DHT_HANDOFF_RATE", "1500"))
KEYS = key_space(16)
SEED = 14
CLIENT_TIMEOUT = 5.0
SETTINGS = [*FAST_FAULTS, "--handoff-rate", str(HANDOFF_RATE)]
PRELOAD_DEADLINE = 10.0


class Change:
    """A membership change run by the driver in a thread, as an operator's command runs
    beside the traffic."""

    def __init__(
        self,
        via: Sequence[Node],
        new: Sequence[str],
        dead: Sequence[str] = (),
        accept_loss: bool = False,
    ) -> None:
        self.began = time.monotonic()
        self.ended: float | None = None
        self.report: ChangeReport | None = None
        self.error: BaseException | None = None
        secret = cluster_secret(via[0])
        coroutine = change_membership(
            [node.url for node in via],
            list(new),
            dead=list(dead),
            accept_loss=accept_loss,
            secret=secret,
        )
        self._thread = threading.Thread(target=self._run, args=(coroutine,), daemon=True)
        self._thread.start()

    def _run(self, coroutine: object) -> None:
        try:
            self.report = asyncio.run(coroutine)  # type: ignore[arg-type]
        except BaseException as exc:
            self.error = exc
        finally:
            self.ended = time.monotonic()

    def wait(self, deadline: float = 180.0) -> ChangeReport:
        self._thread.join(deadline)
        if self.error is not None:
            raise self.error
        assert self.report is not None, "the change did not end in time"
        return self.report


def preload(node: Node, count: int, replicas: str | None = None) -> None:
    """`count` records written through `node` at `replicas` (by default the default
    quorum), 8 at a time. Set-up, not the rule under test, so a PUT that was not taken
    is sent again, as a client would: FAST_FAULTS' --timeout (0.3 s) is shorter than a
    replica's group commit under this burst on a busy disk. It answers 504 when the
    calls time out (make test, 2026-11-26), and 503 while the breaker those time-outs
    opened cools down (two 4-node clusters preloading at once on two of make test's
    workers, 2026-12-05)."""

    def put(index: int) -> None:
        key = f"preload-{index:06d}"
        answer = wait_for(
            lambda: node.put(key, b"x" * 100, replicas),
            lambda response: response.status not in (503, 504),
            PRELOAD_DEADLINE,
        )
        expect(answer, 201)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))


def start(nodes: Sequence[Node]) -> None:
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_ready()


def start_first_three(cluster: Cluster) -> None:
    """Starts the cluster's first three nodes as a cluster of three; the others join."""
    for node in cluster.nodes[:3]:
        node.topology = cluster.urls[:3]
    start(cluster.nodes[:3])


def joining(node: Node, members: Sequence[Node]) -> Node:
    """`node` set up to join the cluster of `members`."""
    node.topology = [member.url for member in members] + [node.url]
    node.extra_args.append("--join")
    return node


def placement_errors(members: Sequence[Node], removed: Sequence[Node]) -> list[str]:
    """Every record on a node that does not own it, every owner without the key, and
    every record a removed node still holds."""
    ring = Ring([node.url for node in members], NodeConfig.vnodes)
    held = {node.url: node.local_records() for node in members}
    errors = [f"{node.url} left {len(node.local_records())} records" for node in removed]
    errors = [error for error in errors if not error.endswith(" 0 records")]
    newest: dict[str, int] = {}
    for records in held.values():
        for key, record in records.items():
            newest[key] = max(newest.get(key, 0), record.copies or len(ring))
    for key, copies in newest.items():
        owners = ring.replicas_for(key.encode(), copies)
        errors += [f"{key} missing on {url}" for url in owners if key not in held[url]]
        errors += [
            f"{key} on {url}, not an owner"
            for url, records in held.items()
            if key in records and url not in owners
        ]
    return errors


def await_exact_placement(members: Sequence[Node], removed: Sequence[Node]) -> None:
    errors = wait_for(
        lambda: placement_errors(members, removed), lambda found: not found, deadline=30.0
    )
    assert not errors, errors[:20]


def p99_ms(ops: Sequence[Op]) -> float:
    latencies = [op.settled_by - op.invoked for op in ops if op.completed is not None]
    if len(latencies) < 2:
        return float("nan")
    return statistics.quantiles(latencies, n=100)[98] * 1000


def finish(
    scenario: str,
    clients: Clients,
    readers: Sequence[Node],
    changes: list[tuple[str, Change]],
    faults: list[FaultWindow],
) -> None:
    """Stops the traffic, checks the history, writes the run folder and prints figures."""
    history = clients.stop()
    reads = {key: final_read(readers[index % len(readers)], key) for index, key in enumerate(KEYS)}
    final = {key: value for key, (value, _) in reads.items()}
    final_at = {key: seen for key, (_, seen) in reads.items()}
    report = check(history, final, final_at=final_at)
    windows = [
        FaultWindow(name, change.began, change.ended or time.monotonic())
        for name, change in changes
    ]
    details = {"records": RECORDS, "handoff_rate": HANDOFF_RATE, "seed": SEED}
    folder = write_run(
        new_run_dir(scenario),
        Run(scenario, history, windows + faults, final, final_at, details),
    ).parent

    def during(op: Op) -> bool:
        return any(window.start <= op.invoked < window.end for window in windows)

    moving = [op for op in history if during(op)]
    still = [op for op in history if not during(op)]
    print(f"\n{scenario}: {report.summary()}\nrun folder: {folder}")
    print(
        f"foreground p99: {p99_ms(moving):.1f} ms during changes ({len(moving)} ops), "
        f"{p99_ms(still):.1f} ms outside them ({len(still)} ops)"
    )
    for name, change in changes:
        change_report = change.wait()
        handoff = change_report.step_seconds.get("handoff", 0.0)
        sent = sum(change_report.sent.values())
        steps = ", ".join(f"{step} {s:.1f} s" for step, s in change_report.step_seconds.items())
        print(
            f"  {name}: {change_report.seconds:.1f} s ({steps}); "
            f"{sent} records sent ({sent / handoff if handoff else 0:.0f}/s in the handoff "
            f"step), {sum(change_report.deleted.values())} deleted"
        )
    assert report.ok, report.details()


@rule("13.1", "13.2", "13.3", "13.4")
def test_grow_from_3_to_5_and_shrink_back_to_3_under_load(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 5, SETTINGS)
    nodes = cluster.nodes
    try:
        start_first_three(cluster)
        preload(nodes[1], RECORDS)
        # Clients go through the two nodes that stay members throughout.
        clients = Clients(nodes[1:3], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        changes: list[tuple[str, Change]] = []
        members = list(nodes[:3])
        for added in (nodes[3], nodes[4]):
            start([joining(added, members)])
            members.append(added)
            change = Change(members, [node.url for node in members])
            changes.append((f"add {added.url}", change))
            change.wait()
            await_exact_placement(members, [])
        for removed in (nodes[0], nodes[3]):
            members.remove(removed)
            change = Change(members, [node.url for node in members])
            changes.append((f"remove {removed.url}", change))
            change.wait()
            await_exact_placement(members, [removed])
            removed.stop()
        finish("membership-grow-shrink", clients, nodes[1:3], changes, [])
        await_exact_placement(members, [])
        assert {node.status()["membership"]["phase"] for node in members} == {"stable"}
    finally:
        cluster.stop()


@rule("13.2", "13.5")
def test_a_node_killed_mid_handoff_resumes_where_it_stopped(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        start_first_three(cluster)
        preload(nodes[0], RECORDS)
        clients = Clients([nodes[0], nodes[2]], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        start([joining(nodes[3], nodes[:3])])
        victim = nodes[1]
        change = Change(nodes[:3], cluster.urls)

        def handoff() -> dict[str, int | bool | str]:
            state: dict[str, int | bool | str] = victim.status()["membership"]["handoff"]
            return state

        mid = wait_for(
            handoff,
            lambda h: h["state"] == "streaming" and int(h["scanned"]) > RECORDS // 4,
            deadline=60.0,
        )
        killed_at = time.monotonic()
        victim.kill()
        scanned_at_kill = int(mid["scanned"])
        time.sleep(1.0)
        victim.start()
        restarted_at = time.monotonic()
        resumed = handoff()
        report = change.wait()
        fault = FaultWindow("kill -9 node2 (mid-handoff) and restart", killed_at, restarted_at)
        print(
            f"\nkilled with {scanned_at_kill} records scanned; after the restart the handoff "
            f"went on from {resumed['scanned']} scanned ({resumed['state']})"
        )
        assert int(resumed["scanned"]) >= scanned_at_kill > 0, resumed
        assert report.sent
        finish("membership-kill", clients, [nodes[0], nodes[2]], [("add node4", change)], [fault])
        await_exact_placement(nodes, [])
    finally:
        cluster.stop()


@rule("13.2", "13.6")
def test_cutting_the_links_into_the_receiving_node_mid_stream_delays_the_handoff(
    tmp_path: Path,
) -> None:
    ports = free_ports(4 + ports_needed(4))
    cluster = Cluster(tmp_path, 4, SETTINGS, ports[:4])
    testbed = Testbed(cluster.urls, tmp_path / "toxiproxy.log", ports[4:]).start()
    nodes = cluster.nodes
    for index, node in enumerate(nodes):
        node.extra_args += testbed.route_args(index)
    try:
        start_first_three(cluster)
        preload(nodes[0], RECORDS)
        clients = Clients(nodes[:3], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        receiver = nodes[3]
        start([joining(receiver, nodes[:3])])
        change = Change(nodes[:3], cluster.urls)
        wait_for(
            lambda: [n.status()["membership"]["handoff"]["scanned"] for n in nodes[:3]],
            lambda scanned: sum(scanned) > 0,
            deadline=60.0,
        )
        cut_at = time.monotonic()
        testbed.cut(testbed.links_into(3))
        time.sleep(2.0)
        failures = [
            n.status()["membership"]["handoff"]["targets"].get(receiver.url, {}).get("failures", 0)
            for n in nodes[:3]
        ]
        testbed.heal()
        healed_at = time.monotonic()
        change.wait()
        print(f"\nwhile the links were cut, handoff calls to the receiver failed: {failures}")
        assert sum(failures) > 0, "the cut did not land mid-stream"
        fault = FaultWindow("cut every link into node4", cut_at, healed_at)
        finish("membership-cut", clients, nodes[:3], [("add node4", change)], [fault])
        await_exact_placement(nodes, [])
        body = request("GET", receiver.url + "/v0/entity?id=preload-000000")
        assert body.status == 200
    finally:
        cluster.stop()
        testbed.stop()
