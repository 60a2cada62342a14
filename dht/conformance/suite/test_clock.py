"""SPEC.md section 19: a 3-node cluster at the default `replicas` while one node's wall
clock is wrong, set from outside with a fake clock (dht/testbed/fake_clock.py:
libfaketime preloaded into the node's process, its offset changed while it runs).
Clients read, write and delete through all three nodes; each scenario records its
operations and the clock fault, leaves a run folder with the plot, and is judged by its
history (a write acknowledged after another one to the same key must win) and by its
answers (each within the bound)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from dht.conformance.faults import (
    CLIENT_TIMEOUT,
    Recorder,
    answered_ok,
    during,
    first_failure,
    seconds,
)
from dht.conformance.fixtures import ClockedClusterFactory
from dht.conformance.launcher import Cluster
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space

pytestmark = pytest.mark.clock

KEYS = key_space(16)
CLIENTS = 4
# Reads, writes and deletes at the default replicas; no ttl (dht's own, rule 8.6).
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
# The node whose clock is wrong (node3); the clients go through all three.
SKEWED = 2
OFF_SECONDS = 30.0  # rules 19.1 and 19.2
STEP_BACK_SECONDS = 10.0  # rule 19.3
STROBE_SECONDS = 10.0  # rule 19.4: the offset flips between this and 0
STROBE_PERIOD = 1.0


def clocked_run(
    cluster: Cluster, scenario: str, label: str, before: float, fault: Callable[[], object]
) -> list[str]:
    """Clients through every node for `before` seconds, then `fault` (which changes the
    clock and lets the clients run) marked on the timeline as `label`; then the clients
    stop, each key is read at the default replicas, and the run folder is written.
    Returns what went wrong ('' each when nothing): the history, as judged, and the
    requests sent during the fault, as answered."""
    recorder = Recorder(scenario, cluster.nodes)
    seed = sum(map(ord, scenario))
    clients = Clients(cluster.nodes, KEYS, CLIENTS, seed, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    time.sleep(before)
    with recorder.fault(label):
        fault()
        client_ops = clients.stop()
    recorder.add(client_ops)
    judged, _ = recorder.finish(cluster.nodes)
    (window,) = recorder.faults
    under = during(client_ops, window)
    assert judged.fates, "no write was acknowledged: nothing to check"
    assert under, "no request ran while the clock was wrong"
    # The history first: a report line is cut at a few hundred characters.
    return [
        judged.failure(),
        first_failure(under, answered_ok, "a 2xx, or 404 for an absent key"),
    ]


def verdict(*problems: str) -> None:
    found = [problem for problem in problems if problem]
    assert not found, "; ".join(found)


def offsets(skew: float) -> list[float]:
    return [skew if index == SKEWED else 0.0 for index in range(3)]


@rule("19.1")
def test_with_one_node_behind_the_later_acknowledged_write_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    cluster, _ = start_clocked_cluster(3, offsets(-OFF_SECONDS))
    verdict(
        *clocked_run(
            cluster,
            "clock-behind",
            f"node{SKEWED + 1} {OFF_SECONDS:.0f} s behind",
            0.0,
            lambda: time.sleep(seconds(20.0, 5.0)),
        )
    )


@rule("19.2")
def test_with_one_node_ahead_the_later_acknowledged_write_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    cluster, _ = start_clocked_cluster(3, offsets(OFF_SECONDS))
    verdict(
        *clocked_run(
            cluster,
            "clock-ahead",
            f"node{SKEWED + 1} {OFF_SECONDS:.0f} s ahead",
            0.0,
            lambda: time.sleep(seconds(20.0, 5.0)),
        )
    )


@rule("19.3")
def test_with_one_clock_stepped_back_the_later_acknowledged_write_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    cluster, clock = start_clocked_cluster(3)

    def step_back() -> None:
        clock.set_offset(SKEWED, -STEP_BACK_SECONDS)
        time.sleep(seconds(10.0, 4.0))

    verdict(
        *clocked_run(
            cluster,
            "clock-step-back",
            f"node{SKEWED + 1} stepped back {STEP_BACK_SECONDS:.0f} s",
            seconds(5.0, 1.5),
            step_back,
        )
    )


@rule("19.4")
def test_with_one_clock_strobing_the_later_acknowledged_write_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    cluster, clock = start_clocked_cluster(3)

    def strobe() -> None:
        until = time.monotonic() + seconds(15.0, 5.0)
        ahead = True
        while time.monotonic() < until:
            clock.set_offset(SKEWED, STROBE_SECONDS if ahead else 0.0)
            ahead = not ahead
            time.sleep(STROBE_PERIOD)

    verdict(
        *clocked_run(
            cluster,
            "clock-strobe",
            f"node{SKEWED + 1} strobing +{STROBE_SECONDS:.0f} s / 0 s every {STROBE_PERIOD:g} s",
            seconds(2.0, 0.5),
            strobe,
        )
    )
