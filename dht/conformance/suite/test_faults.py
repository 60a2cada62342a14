"""SPEC.md section 14: a 3-node cluster at the default `replicas` under faults applied
from outside (signals; Toxiproxy on the links in the network-namespace mode). Each test
records its operations and faults, leaves a run folder with the checker's summary, what
became of each write and the plot (dht/conformance/faults.py), and is judged by its
history as well as by its answers: a write lost, a stale read, a delete undone or a
value invented fails the scenario's rule."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from dht.conformance.faults import (
    BOUND,
    CLIENT_TIMEOUT,
    Recorder,
    answered_ok,
    answered_refused,
    describe,
    during,
    first_failure,
    seconds,
)
from dht.conformance.fixtures import ClusterFactory, LinkedClusterFactory
from dht.conformance.http_client import status_code, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.operation import Kind, Op
from dht.testbed.netns import NetnsTestbed
from dht.testbed.toxiproxy import Link

pytestmark = pytest.mark.faults

KEYS = key_space(16)
CLIENTS = 4
# Reads, writes and deletes at the default replicas; no ttl (dht's own, rule 8.6).
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
ALL_THREE = "3/3"


def refused_requests(
    recorder: Recorder, senders: Sequence[tuple[Node, str | None]], until: float
) -> list[Op]:
    """GET, PUT and DELETE through each (node, replicas) in turn until `until`: each of
    them needs the node under the fault, so each must be refused in time."""
    probes: list[Op] = []
    number = 0
    while time.monotonic() < until:
        node, replicas = senders[number % len(senders)]
        key = f"refused-{number % 4}"
        for kind in (Kind.GET, Kind.PUT, Kind.DELETE):
            value = f"refused-{number}".encode() if kind is Kind.PUT else None
            probes.append(recorder.send(node, kind, key, value, replicas))
        number += 1
        time.sleep(0.1)
    return probes


def verdict(*problems: str) -> None:
    found = [problem for problem in problems if problem]
    assert not found, "; ".join(found)


@dataclass
class OneNodeDown:
    """A scenario on 3 nodes: clients at the default replicas through the first two,
    one fault on the third, and requests that need the third sent meanwhile."""

    cluster: Cluster
    recorder: Recorder
    clients: Clients
    refused: list[Op]

    @property
    def victim(self) -> Node:
        return self.cluster[2]

    def finish(self) -> list[str]:
        """Lets the cluster settle, stops the clients, writes the run folder, and returns
        what went wrong ('' each when nothing): the requests sent during the fault, as
        answered, and the whole history, as judged."""
        time.sleep(seconds(2.0, 0.5))
        client_ops = self.clients.stop()
        self.recorder.add(client_ops)
        judged, _ = self.recorder.finish(self.cluster.nodes[:2])
        (window, *_) = self.recorder.faults
        quorum = during(client_ops, window)
        assert quorum, "no request at the default replicas ran during the fault"
        # The history first: a report line is cut at a few hundred characters.
        return [
            judged.failure(),
            first_failure(quorum, answered_ok, "a 2xx, or 404 for an absent key"),
            first_failure(self.refused, answered_refused, "504 (or 503)"),
        ]


def one_node_down(
    cluster: Cluster,
    scenario: str,
    label: str,
    apply: Callable[[Node], object],
    lift: Callable[[Node], object],
    refused_through: Callable[[Cluster], list[tuple[Node, str | None]]] = lambda cluster: [
        (cluster[0], ALL_THREE),
        (cluster[1], ALL_THREE),
    ],
) -> OneNodeDown:
    live, victim = cluster.nodes[:2], cluster[2]
    recorder = Recorder(scenario, cluster.nodes)
    seed = sum(map(ord, scenario))
    clients = Clients(live, KEYS, CLIENTS, seed, timeout=CLIENT_TIMEOUT, mix=MIX).start()
    time.sleep(seconds(2.0, 0.5))
    with recorder.fault(f"{label} {recorder.name(victim)}"):
        apply(victim)
        until = time.monotonic() + seconds(10.0, 3.0)
        refused = refused_requests(recorder, refused_through(cluster), until)
        lift(victim)
    return OneNodeDown(cluster, recorder, clients, refused)


@rule("14.1")
@pytest.mark.controls("kill", "start")
def test_with_one_node_killed_the_others_serve_the_quorum_and_refuse_all_three(
    start_cluster: ClusterFactory,
) -> None:
    scenario = one_node_down(
        start_cluster(3), "faults-kill", "kill -9", lambda n: n.kill(), lambda n: n.start()
    )
    verdict(*scenario.finish())


@rule("14.2")
@pytest.mark.controls("pause", "resume")
def test_with_one_node_paused_the_others_serve_the_quorum_and_it_serves_once_resumed(
    start_cluster: ClusterFactory,
) -> None:
    scenario = one_node_down(
        start_cluster(3), "faults-pause", "SIGSTOP", lambda n: n.pause(), lambda n: n.resume()
    )
    victim, recorder = scenario.victim, scenario.recorder
    resumed = time.monotonic()
    status = wait_for(
        lambda: status_code(victim.url), lambda answer: answer == 200, deadline=BOUND + 1.0
    )
    status_after = time.monotonic() - resumed
    through_victim = [
        recorder.send(
            victim, kind, key, f"after-pause-{key}".encode() if kind is Kind.PUT else None
        )
        for key in KEYS[:4]
        for kind in (Kind.PUT, Kind.GET)
    ]
    problems = scenario.finish()
    resumed_in_time = status == 200 and status_after <= BOUND
    verdict(
        *problems,
        ""
        if resumed_in_time
        else (
            f"/v0/status of {recorder.name(victim)} answered {status} {status_after:.1f} s "
            f"after SIGCONT; expected 200 within {BOUND:.0f} s"
        ),
        first_failure(through_victim, answered_ok, "a 2xx, or 404 for an absent key"),
    )


@rule("14.3")
@pytest.mark.controls("kill", "start")
def test_no_acknowledged_write_is_lost_when_each_node_is_killed_and_restarted_in_turn(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    recorder = Recorder("faults-crash-restart", cluster.nodes)
    clients = Clients(cluster.nodes, KEYS, CLIENTS, seed=143, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    for victim in cluster:
        time.sleep(seconds(4.0, 1.0))
        with recorder.fault(f"kill -9 {recorder.name(victim)}, restart"):
            victim.kill()
            time.sleep(seconds(5.0, 1.5))
            victim.start()
    time.sleep(seconds(4.0, 1.0))
    recorder.add(clients.stop())
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    verdict(judged.failure())


# Rules 14.4 and 14.5: a link delay far past the bound.
SLOW_LINK_MS = 10_000


def through_victim_too(cluster: Cluster) -> list[tuple[Node, str | None]]:
    """With one node's links faulted, 3/3 through the others needs it, and so does the
    default quorum through the node itself: it reaches no peer in time."""
    return [(cluster[0], ALL_THREE), (cluster[1], ALL_THREE), (cluster[2], None)]


def victims_links(testbed: NetnsTestbed, victim: int = 2) -> list[Link]:
    return [*testbed.links_into(victim), *testbed.links_out_of(victim)]


@rule("14.4")
def test_with_one_nodes_links_slowed_the_others_serve_the_quorum_and_refuse_in_time(
    start_linked_cluster: LinkedClusterFactory,
) -> None:
    cluster, testbed = start_linked_cluster(3)
    scenario = one_node_down(
        cluster,
        "faults-slow-links",
        f"latency {SLOW_LINK_MS} ms on every link of",
        lambda victim: testbed.add_toxic(victims_links(testbed), "latency", latency=SLOW_LINK_MS),
        lambda victim: testbed.heal(),
        through_victim_too,
    )
    verdict(*scenario.finish())


@rule("14.5")
def test_with_one_nodes_links_cut_the_others_serve_the_quorum_and_it_serves_once_restored(
    start_linked_cluster: LinkedClusterFactory,
) -> None:
    cluster, testbed = start_linked_cluster(3)
    scenario = one_node_down(
        cluster,
        "faults-cut-links",
        "cut every link of",
        lambda victim: testbed.isolate(2),
        lambda victim: testbed.heal(),
        through_victim_too,
    )
    victim, recorder = scenario.victim, scenario.recorder
    restored = time.monotonic()
    first = wait_for(
        lambda: recorder.send(victim, Kind.PUT, KEYS[0], b"after the cut"),
        answered_ok,
        deadline=BOUND,
    )
    after = time.monotonic() - restored
    then = [
        recorder.send(victim, kind, key, b"v" if kind is Kind.PUT else None)
        for key in KEYS[:4]
        for kind in (Kind.PUT, Kind.GET)
    ]
    problems = scenario.finish()
    verdict(
        *problems,
        ""
        if answered_ok(first)
        else (
            f"{describe(first)} {after:.1f} s after the links were restored; expected a 2xx "
            f"within {BOUND:.0f} s"
        ),
        first_failure(then, answered_ok, "a 2xx, or 404 for an absent key"),
    )
