"""A DELETE acknowledged during a shrink stays deleted when the node that leaves comes
back (SPEC.md rules 9.10, 13.2 and 13.3), on real nodes, LevelDB and Toxiproxy.

Three nodes shrink to two. The steps of the change are taken by hand, a
`PUT /v0/admin/topology` to each node's own port (rule 13.1: the driver is only a client
of it), so that the leaving node holds an older value of the key at exactly the wrong
moment: it took a write in the handoff step after its handoff pass had gone by, so in
`stable(new)` it still has to stream that record to the owners. It is cut off from them
(both directions, through Toxiproxy) before the stable step, and the key is deleted then.
A tombstone may go only once no node can still hand an older value back: the staying
nodes must not collect it while the leaving node's cleanup is not confirmed and the
change not closed (by the driver run again, or with `--dead` for a node that never
comes back).

Both tests are the same up to the DELETE; then

- the node comes back after the grace, and the driver run again closes the change: the
  key stays deleted, and its tombstone is collected once the change is closed;
- it does not come back, and the driver closes the change with `--dead`: the tombstone
  is collected, and when the node's links heal after all, the staying nodes refuse the
  value it keeps offering.

The grace is 3 s and anti-entropy runs every 0.5 s, so a collection shows within seconds;
with `--max-clock-drift` 0.5 s an exchange stops copying a tombstone to a peer that
collected it once the grace is over (rule 9.10), where the default drift would have the
two staying nodes copy it back to each other for two minutes. Run with -s to see the
figures.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chaos.observe import describe, holds, record_of, wall_ms
from dht.conformance.http_client import Response, expect, request, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.peer_tools import cluster_secret, proof_header
from dht.conformance.rules import rule
from dht.membership.rebalance import MAX_RETRY_PAUSE
from dht.model.topology import JOINT, TopologyState, change_steps
from dht.testbed.toxiproxy import Testbed
from dht.transport.wire import TOPOLOGY_PATH
from tests.fixtures import ChaosClusterFactory
from tests.launcher import run_module

T = TypeVar("T")

GRACE = 3.0  # --tombstone-grace
EXCHANGE_INTERVAL = 0.5  # --anti-entropy-interval
SETTINGS = [
    "--tombstone-grace",
    str(GRACE),
    "--anti-entropy-interval",
    str(EXCHANGE_INTERVAL),
    "--max-clock-drift",
    "0.5",
]
KEY = "deleted-during-the-shrink"
LEAVING = 2  # n3, the node the shrink removes
# How long the staying nodes are given to collect a tombstone they may collect: the
# grace, a collector pass (every quarter of the grace) and several exchange rounds.
COLLECTION_WINDOW = GRACE + GRACE / 4 + 10 * EXCHANGE_INTERVAL
HANDOFF_DEADLINE = 30.0
DRIVER_TIMEOUT = 60.0
# After its links heal, the leaving node offers its record again within one retry pause
# (its pauses double up to MAX_RETRY_PAUSE): watched for two of them.
OFFERS_WATCHED = 2 * MAX_RETRY_PAUSE + 1.0
POLL = 0.05


@dataclass
class Shrink:
    """A shrink 3 -> 2 taken by hand up to an acknowledged DELETE with n3 cut off, and
    when things happened (`marks`, seconds since the cluster served)."""

    cluster: Cluster
    testbed: Testbed
    stable: TopologyState
    began: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)
    deleted_at: float = 0.0

    @property
    def n1(self) -> Node:
        return self.cluster[0]

    @property
    def n3(self) -> Node:
        return self.cluster[LEAVING]

    @property
    def staying(self) -> list[Node]:
        return self.cluster.nodes[:2]

    def name(self, url: str) -> str:
        """n1, n2 or n3 for a node's URL (either of its own)."""
        for index, node in enumerate(self.cluster):
            if url in (node.url, node.cluster_url):
                return f"n{index + 1}"
        return url

    def mark(self, event: str) -> float:
        now = time.monotonic()
        self.marks[event] = now - self.began
        return now

    def timeline(self) -> str:
        return ", ".join(f"{event} at {seconds:.1f} s" for event, seconds in self.marks.items())

    def records(self) -> str:
        """What each node itself holds of the key now."""
        now = wall_ms()
        return "; ".join(
            f"{self.name(node.url)} {describe(record_of(node, KEY), now)}" for node in self.cluster
        )

    def offers(self) -> dict[str, dict[str, Any]]:
        """n3's handoff figures per receiver, by name."""
        return {self.name(url): target for url, target in handoff(self.n3)["targets"].items()}


@dataclass
class Collection:
    """When each staying node first showed a collected tombstone, in seconds after the
    DELETE (None: not within the wait), and its `tombstones` status as last seen."""

    after: dict[str, float | None]
    states: dict[str, dict[str, Any]]

    @property
    def by_both(self) -> bool:
        return all(seconds is not None for seconds in self.after.values())

    @property
    def by_none(self) -> bool:
        return all(seconds is None for seconds in self.after.values())

    def __str__(self) -> str:
        return "; ".join(
            f"{name} {'held it' if seconds is None else f'collected it after {seconds:.1f} s'}"
            f" ({self.states[name]})"
            for name, seconds in self.after.items()
        )


def take_step(nodes: Sequence[Node], step: TopologyState, deadline: float = 30.0) -> None:
    """`step` on each node by `PUT /v0/admin/topology` to its own port, which no proxy
    stands in front of, proving the cluster secret when there is one; a 503 (operations
    of the previous step still running) is asked again."""
    body = json.dumps(step.to_json()).encode()

    def put(node: Node) -> Response:
        url = node.url + TOPOLOGY_PATH
        secret = cluster_secret(node)
        headers = proof_header(secret, "PUT", url, body, node.cluster_url) if secret else {}
        return request("PUT", url, body, headers=headers)

    for node in nodes:
        answer = wait_for(
            functools.partial(put, node), lambda response: response.status != 503, deadline
        )
        expect(answer, 200, context=f"{node.url} taking {step.phase} (epoch {step.epoch})")


def handoff(node: Node) -> dict[str, Any]:
    state: dict[str, Any] = node.status()["membership"]["handoff"]
    return state


def await_handoffs(nodes: Sequence[Node], epoch: int) -> None:
    """Until every node's handoff of the step at `epoch` is done."""
    wait_for(
        lambda: [handoff(node) for node in nodes],
        lambda states: all(state["epoch"] == epoch and state["done"] for state in states),
        HANDOFF_DEADLINE,
    )


def tombstones(node: Node) -> dict[str, Any]:
    state: dict[str, Any] = node.status()["tombstones"]
    return state


def poll(probe: Callable[[], T], done: Callable[[T], bool], deadline: float) -> tuple[T, bool]:
    """`probe` until `done` holds or `deadline` seconds pass: its last result, and
    whether `done` held. For a wait whose outcome the test reports either way."""
    until = time.monotonic() + deadline
    while True:
        result = probe()
        if done(result) or time.monotonic() > until:
            return result, done(result)
        time.sleep(POLL)


def await_collection(shrink: Shrink, deadline: float) -> Collection:
    """Watches the staying nodes' `tombstones` until both collected one, or `deadline`."""
    names = [shrink.name(node.url) for node in shrink.staying]
    seen = Collection(dict.fromkeys(names), {})
    until = time.monotonic() + deadline
    while not seen.by_both and time.monotonic() <= until:
        for name, node in zip(names, shrink.staying, strict=True):
            seen.states[name] = tombstones(node)
            if seen.after[name] is None and seen.states[name]["collected"] >= 1:
                seen.after[name] = time.monotonic() - shrink.deleted_at
        time.sleep(POLL)
    return seen


def run_driver(shrink: Shrink, *extra: str) -> subprocess.CompletedProcess[str]:
    """`python -m dht membership` to the staying nodes, as an operator runs it."""
    args = ["membership", "--to", ",".join(shrink.stable.current)]
    for node in shrink.staying:
        args += ["--node", node.cluster_url]
    if secret := cluster_secret(shrink.n1):
        args += ["--secret", secret]
    return run_module("dht", *args, *extra, timeout=DRIVER_TIMEOUT)


def said(driver: subprocess.CompletedProcess[str]) -> str:
    return f"exit {driver.returncode}: {(driver.stdout + driver.stderr).strip()!r}"


def reads(shrink: Shrink) -> list[Response]:
    return [node.get(KEY) for node in shrink.staying]


def deleted(answers: Sequence[Response]) -> bool:
    return all(answer.status == 404 for answer in answers)


def shrink_and_delete(start_chaos_cluster: ChaosClusterFactory) -> Shrink:
    """Three nodes behind Toxiproxy; k = v1; the joint and handoff steps on all three,
    each handoff done; k = v2 through n1, which n3 takes and keeps; n3 cut off; the
    stable(new) step on all three; DELETE k through n1, acknowledged."""
    cluster, testbed = start_chaos_cluster(3, SETTINGS)
    joint, handing_off, stable = change_steps(cluster.urls, cluster.urls[:2], 0)
    shrink = Shrink(cluster, testbed, stable)
    n1, n3 = shrink.n1, shrink.n3
    expect(n1.put(KEY, b"v1"), 201)
    wait_for(lambda: [record_of(node, KEY) for node in cluster], all)
    take_step(cluster.nodes, joint)
    take_step(cluster.nodes, handing_off)
    await_handoffs(cluster.nodes, handing_off.epoch)
    shrink.mark("handoff step done")
    # In the handoff step a write goes to both replica sets: n3 takes it, after its pass.
    expect(n1.put(KEY, b"v2"), 201)
    wait_for(lambda: record_of(n3, KEY), holds(b"v2"))
    assert handoff(n3)["done"], "n3's handoff pass ran again after the write"
    testbed.isolate(LEAVING)
    shrink.mark("n3 cut off")
    take_step(cluster.nodes, stable)
    shrink.mark("stable(new) taken")
    answer = n1.delete(KEY)
    assert answer.status in (200, 202), f"the DELETE was not acknowledged: {answer!r}"
    shrink.deleted_at = shrink.mark(f"DELETE answered {answer.status}")
    return shrink


def undone(shrink: Shrink, answers: Sequence[Response], how: str) -> str:
    """The failure, as a user sees it."""
    return (
        f"an acknowledged DELETE was undone: {KEY} was deleted through n1 in the "
        f"stable(new) step of a shrink 3 -> 2, while n3, leaving, was cut off holding the "
        f"older value v2; {how}; then GET {KEY} answered {answers[0]!r} through n1 and "
        f"{answers[1]!r} through n2. Records now: {shrink.records()}. n3's handoff: "
        f"{shrink.offers()}. Timeline: {shrink.timeline()}"
    )


@rule("9.10", "13.2", "13.3")
def test_a_delete_acknowledged_after_a_shrink_stays_deleted_when_the_leaving_node_returns_after_the_grace(  # noqa: E501
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """The leaving node, cut off, is not done streaming away the records it does not
    own: the staying nodes must hold the tombstone until its cleanup is confirmed and
    the change closed, however long the grace has been over, or its older value comes
    back with its links. Once the driver closes the change, collection goes on."""
    shrink = shrink_and_delete(start_chaos_cluster)
    n1, n3 = shrink.n1, shrink.n3
    collection = await_collection(shrink, COLLECTION_WINDOW)
    shrink.mark("both collected" if collection.by_both else "collection watched")
    state_held = json.loads(request("GET", n1.url + TOPOLOGY_PATH).body)
    shrink.testbed.heal()
    shrink.mark("n3's links healed")
    await_handoffs([n3], shrink.stable.epoch)
    shrink.mark("n3's handoff done")
    driver = run_driver(shrink)
    shrink.mark(f"driver run again (exit {driver.returncode})")
    answers = reads(shrink)
    print(
        f"\ntombstone after the DELETE: {collection}\nGET once n3 was back: {answers}\n"
        f"driver {said(driver)}\ntimeline: {shrink.timeline()}"
    )
    how = (
        f"past the grace, of its tombstone: {collection}; n3's links healed, its handoff "
        f"offered v2 to them to the end, and the driver was run again ({said(driver)})"
    )
    assert deleted(answers), undone(shrink, answers, how)

    # While the change was not closed, the staying nodes held the tombstone for n3.
    assert collection.by_none, (
        f"the staying nodes collected the tombstone with n3's cleanup not confirmed, the "
        f"change not closed: {collection}"
    )
    for name, state in collection.states.items():
        assert n3.cluster_url in state.get("waiting_for", []), (name, state)
    assert n3.cluster_url in state_held.get("draining", []), state_held
    assert n3.cluster_url in state_held.get("left", []), state_held
    assert driver.returncode == 0, f"the driver did not close the change: {said(driver)}"
    # Closed: collection goes on, and the key stays deleted.
    wait_for(
        lambda: [record_of(node, KEY) for node in shrink.staying],
        lambda seen: not any(seen),
        COLLECTION_WINDOW,
    )
    shrink.mark("tombstone collected after the close")
    assert all(tombstones(node)["collected"] >= 1 for node in shrink.staying)
    assert deleted(reads(shrink)), shrink.records()
    print(f"after the close: {shrink.timeline()}")


@rule("9.10", "13.8", "13.9")
def test_a_delete_acknowledged_after_a_shrink_stays_deleted_when_the_leaving_node_removed_as_dead_returns(  # noqa: E501
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """A leaving node that does not come back cannot confirm its cleanup: the driver
    with `--dead` closes the change, and the staying nodes collect the tombstone. If it
    comes back after all, the staying nodes refuse what it keeps offering, so the older
    value it holds never returns."""
    shrink = shrink_and_delete(start_chaos_cluster)
    n3 = shrink.n3
    driver = run_driver(shrink, "--dead", n3.cluster_url)
    shrink.mark(f"driver --dead n3 (exit {driver.returncode})")
    collection = await_collection(shrink, COLLECTION_WINDOW)
    assert collection.by_both, (
        f"the staying nodes did not both collect the tombstone within "
        f"{COLLECTION_WINDOW:.1f} s of the DELETE, the change closed by the driver "
        f"({said(driver)}): {collection}"
    )
    shrink.mark("both collected")
    offered = {name: target["failures"] for name, target in shrink.offers().items()}
    shrink.testbed.heal()
    healed = shrink.mark("n3's links healed")
    answers, returned = poll(lambda: reads(shrink), lambda seen: not deleted(seen), OFFERS_WATCHED)
    watched = time.monotonic() - healed
    shrink.mark("GET watched")
    print(
        f"\ntombstone after the DELETE: {collection}\nGET {watched:.1f} s after n3's links "
        f"healed: {answers}\ndriver {said(driver)}\ntimeline: {shrink.timeline()}"
    )
    how = (
        f"the driver was run with --dead n3 ({said(driver)}); past the grace, of its "
        f"tombstone: {collection}; {watched:.1f} s after n3's links healed, its handoff "
        "had given v2 to them"
    )
    assert not returned, undone(shrink, answers, how)

    assert driver.returncode == 0, f"the driver did not close the change: {said(driver)}"
    offers = shrink.offers()
    for name in ("n1", "n2"):
        assert offers[name]["failures"] > offered[name], (
            f"n3 did not offer v2 to {name} again once its links healed, or {name} took "
            f"it: {offers}"
        )

    # The next change's steps place keys by the ring n3 still presents: it stays shut
    # out (found by review: from the next joint step on, n1 and n2 took v2 again).
    stable = shrink.stable
    take_step(
        shrink.staying, TopologyState(stable.epoch + 1, JOINT, stable.current, stable.current[:1])
    )
    shrink.mark("next change's joint step")
    answers, returned = poll(lambda: reads(shrink), lambda seen: not deleted(seen), OFFERS_WATCHED)
    assert not returned, undone(shrink, answers, how + "; then the next change began")
    assert holds(b"v2")(record_of(n3, KEY)), f"n3 no longer holds v2: {shrink.records()}"
    print(f"n3's offers, refused since its links healed: {offers}")
