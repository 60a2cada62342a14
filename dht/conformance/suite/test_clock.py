"""SPEC.md section 19: a 3-node cluster at the default `replicas` while a node's wall
clock is wrong, set from outside with a fake clock (dht/testbed/fake_clock.py:
libfaketime preloaded into the node's process, its offset changed while it runs).
Clients read, write and delete through all three nodes (rule 19.5: pairs of writes
instead, the first at 2/2; rule 19.6: two clocks ahead in turn, then a restart, then
pairs of writes); each scenario records its operations and faults, leaves a run folder
with the plot, and is judged by its history (a write acknowledged after another one to
the same key must win) and by its answers (each within the bound)."""

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
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.checker import CLOCK_SLACK
from dht.history.operation import Kind, Op
from dht.history.run import FaultWindow
from dht.testbed import fake_clock

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
# Rule 19.5: the node that takes each pair's first write, at 2/2 (node1).
FIRST_WRITER = 0
TWO_OF_TWO = "2/2"
# The pause after each request of a pair and before its read: the history checker orders
# two operations only when the second began at least CLOCK_SLACK after the first ended.
PAIR_GAP = 2 * CLOCK_SLACK
# Rule 19.6: the nodes whose clocks go ahead in turn (node2, then node1); then SKEWED
# (node3), whose clock stays right, is killed and restarted.
AHEAD_IN_TURN = (1, 0)


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


def write_pairs(
    recorder: Recorder,
    first: Callable[[int], Node],
    second: Node,
    replicas: str | None,
    prefix: str,
    lasting: float,
) -> list[Op]:
    """Pairs of writes for `lasting` seconds, each pair on a key of its own: a PUT through
    `first(number)` at `replicas`, then one at the default `replicas` through `second`,
    then a GET at the default `replicas` through each node in turn, each request PAIR_GAP
    after the one before. Returns the requests (recorded in the history as well)."""
    nodes = list(recorder.nodes)
    sent: list[Op] = []
    until = time.monotonic() + lasting
    number = 0
    while time.monotonic() < until:
        key = f"{prefix}-{number:04d}"
        sent.append(recorder.send(first(number), Kind.PUT, key, f"{key} first".encode(), replicas))
        time.sleep(PAIR_GAP)
        sent.append(recorder.send(second, Kind.PUT, key, f"{key} second".encode()))
        time.sleep(PAIR_GAP)
        sent.append(recorder.send(nodes[number % len(nodes)], Kind.GET, key))
        number += 1
    return sent


@rule("19.5")
def test_after_a_two_of_two_write_a_later_write_through_a_node_behind_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    """A write at 2/2 reaches two replicas, which may not include the node behind: no
    version that node holds tells it that the write it coordinates next is later."""
    cluster, _ = start_clocked_cluster(3, offsets(-OFF_SECONDS))
    recorder = Recorder("clock-two-of-two-behind", cluster.nodes)
    label = (
        f"node{SKEWED + 1} {OFF_SECONDS:.0f} s behind; PUT {TWO_OF_TWO} through "
        f"node{FIRST_WRITER + 1}, then PUT through node{SKEWED + 1}"
    )
    with recorder.fault(label):
        sent = write_pairs(
            recorder,
            lambda number: cluster[FIRST_WRITER],
            cluster[SKEWED],
            TWO_OF_TWO,
            "pair",
            seconds(10.0, 3.0),
        )
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    verdict(judged.failure(), first_failure(sent, answered_ok, "a 2xx, or 404 for an absent key"))


def away(ops: list[Op], node: str, window: FaultWindow) -> list[Op]:
    """The operations but those through `node` that overlapped `window` (from their
    sending until their answer, or the client's timeout)."""
    return [
        op
        for op in ops
        if op.node != node
        or (op.completed or op.invoked + CLIENT_TIMEOUT) < window.start
        or op.invoked > window.end
    ]


@rule("19.6")
def test_after_two_clocks_ahead_in_turn_and_a_restart_the_later_acknowledged_write_wins(
    start_clocked_cluster: ClockedClusterFactory,
) -> None:
    """Versions stamped 30 s ahead outlive their clocks' return to the true time, so for
    a while the wall clocks cannot order writes; then the node restarted, which missed
    writes while it was down, coordinates writes that follow writes it never saw."""
    cluster, clock = start_clocked_cluster(3)
    recorder = Recorder("clock-ahead-then-restart", cluster.nodes)
    victim = cluster[SKEWED]
    clients = Clients(cluster.nodes, KEYS, CLIENTS, 196, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    time.sleep(seconds(2.0, 0.5))
    for index in AHEAD_IN_TURN:
        with recorder.fault(f"node{index + 1} {OFF_SECONDS:.0f} s ahead"):
            clock.set_offset(index, OFF_SECONDS)
            time.sleep(seconds(5.0, 1.0))
            clock.set_offset(index, 0.0)
        time.sleep(seconds(1.0, 0.3))
    with recorder.fault(f"kill -9 {recorder.name(victim)}, restart"):
        assert victim.process is not None
        killed = victim.process.pid
        victim.kill()
        fake_clock.release(killed)
        time.sleep(seconds(4.0, 1.0))
        victim.start()
    (*_, down) = recorder.faults
    pairs = write_pairs(
        recorder,
        lambda number: cluster[number % 2],
        victim,
        None,
        "after-restart",
        seconds(5.0, 2.0),
    )
    client_ops = clients.stop()
    recorder.add(client_ops)
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    verdict(
        judged.failure(),
        first_failure(
            [*away(client_ops, recorder.name(victim), down), *pairs],
            answered_ok,
            "a 2xx, or 404 for an absent key",
        ),
    )
