"""Flapping faults: one fault at a time on the Toxiproxy test bed, each lasting a random
0.5-2 s, chosen with a seeded random so a failing run can be replayed (same seed, same
schedule; the timing of the traffic around it still varies).

Given the node processes too, the draw also pauses a node (SIGSTOP, then SIGCONT: a long
GC pause) or kills it (SIGKILL) and starts it again on the same data, and the first
fault past half the run is always such a crash, so every run has one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dht.conformance.launcher import Node
from dht.history.run_folder import FaultWindow
from dht.testbed.toxiproxy import Testbed, node_name


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault as applied: `started` and `ended` are on the monotonic clock (the
    history's), from the fault's injection to the end of its heal."""

    kind: str
    node: int
    seconds: float
    started: float = 0.0
    ended: float = 0.0

    def __str__(self) -> str:
        return f"{self.label} for {self.seconds:.2f}s"

    @property
    def label(self) -> str:
        """What and where: "cut links into node2"; a fault of every link (a restart of
        Toxiproxy) names no node."""
        return self.kind if self.node < 0 else f"{self.kind} {node_name(self.node)}"

    def window(self) -> FaultWindow:
        """The fault as a run folder and its plot show it."""
        return FaultWindow(self.label, self.started, self.ended)


def _cut_links_into(testbed: Testbed, node: int, deadline_ms: int) -> None:
    testbed.cut(testbed.links_into(node))


def _latency_into(testbed: Testbed, node: int, deadline_ms: int) -> None:
    # Answers from the node arrive well after a replica request's deadline.
    testbed.add_toxic(testbed.links_into(node), "latency", latency=deadline_ms + 200, jitter=50)


def _reset_peer_into(testbed: Testbed, node: int, deadline_ms: int) -> None:
    # The request reaches the node (a write may be stored) and the answer is a TCP reset.
    testbed.add_toxic(testbed.links_into(node), "reset_peer", timeout=0)


def _partition(testbed: Testbed, node: int, deadline_ms: int) -> None:
    testbed.isolate(node)


FAULTS: dict[str, Callable[[Testbed, int, int], None]] = {
    "cut links into": _cut_links_into,
    "latency over the deadline from": _latency_into,
    "reset_peer answers from": _reset_peer_into,
    "two-way partition of": _partition,
}


def pause(node: Node, seconds: float) -> None:
    """The node freezes for `seconds` (SIGSTOP), then runs on (SIGCONT)."""
    node.pause()
    try:
        time.sleep(seconds)
    finally:
        node.resume()


def crash(node: Node, seconds: float) -> None:
    """SIGKILL, down for `seconds`, then started again on the same data (until it
    answers /v0/status)."""
    node.kill()
    time.sleep(seconds)
    node.start()


CRASH = "kill -9 and restart"
# Toxiproxy restarted by the test bed when its control port hung (Testbed.heal).
TOXIPROXY_RESTART = "Toxiproxy restarted, every link dropped"
PROCESS_FAULTS: dict[str, Callable[[Node, float], None]] = {"pause": pause, CRASH: crash}


def flap(
    testbed: Testbed,
    duration: float,
    seed: int,
    deadline: float,
    shortest: float = 0.5,
    longest: float = 2.0,
    nodes: Sequence[Node] = (),
) -> list[Fault]:
    """Applies random faults one after another for `duration` seconds, healing the test
    bed after each one (and at the end), and returns them in order. With `nodes` (the
    cluster's processes, in test bed order) pauses and crashes join the draw, and the
    first fault past half of `duration` is a crash."""
    rng = random.Random(seed)
    size = len(testbed.node_urls)
    kinds = sorted(FAULTS) + (sorted(PROCESS_FAULTS) if nodes else [])
    halfway = time.monotonic() + duration / 2
    ends = time.monotonic() + duration
    crashed = False
    applied: list[Fault] = []
    restarts_before = len(testbed.restarts)
    try:
        while (left := ends - time.monotonic()) > 0:
            kind = rng.choice(kinds)
            node, seconds = rng.randrange(size), min(rng.uniform(shortest, longest), left)
            if nodes and not crashed and time.monotonic() >= halfway:
                kind = CRASH
            crashed = crashed or kind == CRASH
            started = time.monotonic()
            if kind in PROCESS_FAULTS:
                PROCESS_FAULTS[kind](nodes[node], seconds)
            else:
                FAULTS[kind](testbed, node, int(deadline * 1000))
                time.sleep(seconds)  # the fault's lifetime, not a wait for a condition
                testbed.heal()
            applied.append(Fault(kind, node, seconds, started, time.monotonic()))
    finally:
        testbed.heal()
        for started, ended in testbed.restarts[restarts_before:]:
            applied.append(Fault(TOXIPROXY_RESTART, -1, ended - started, started, ended))
    return sorted(applied, key=lambda fault: fault.started)
