"""Flapping faults: one fault at a time on the Toxiproxy test bed, each lasting a random
0.5-2 s, chosen with a seeded random so a failing run can be replayed (same seed, same
schedule; the timing of the traffic around it still varies).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from dht.testbed import Testbed, node_name


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
        return f"{self.kind} {node_name(self.node)} for {self.seconds:.2f}s"


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


def flap(
    testbed: Testbed,
    duration: float,
    seed: int,
    deadline: float,
    shortest: float = 0.5,
    longest: float = 2.0,
) -> list[Fault]:
    """Applies random faults one after another for `duration` seconds, healing the test
    bed after each one (and at the end), and returns them in order."""
    rng = random.Random(seed)
    size = len(testbed.node_urls)
    ends = time.monotonic() + duration
    applied: list[Fault] = []
    try:
        while (left := ends - time.monotonic()) > 0:
            kind = rng.choice(sorted(FAULTS))
            node, seconds = rng.randrange(size), min(rng.uniform(shortest, longest), left)
            started = time.monotonic()
            FAULTS[kind](testbed, node, int(deadline * 1000))
            time.sleep(seconds)  # the fault's lifetime, not a wait for a condition
            testbed.heal()
            applied.append(Fault(kind, node, seconds, started, time.monotonic()))
    finally:
        testbed.heal()
    return applied
