"""A membership step on one node (`StepApplier`, `RepairLoops`), with real storage and
membership in a temporary folder and the node's other parts stood in for: anti-entropy
answers and tombstone collection run only while the membership is stable (a tombstone
collected between two rings could let a handed-off value come back), and a replica
write for a key the node no longer owns wakes the handoff. These were `Node`'s before
they moved out of dht/node.py; nothing tested them apart from whole nodes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from dht.config import NodeConfig
from dht.membership.step import StepApplier
from dht.model.clock import HybridClock
from dht.model.merkle import holders
from dht.model.record import Record
from dht.model.topology import HANDOFF, JOINT, STABLE, BadTransition, TopologyState
from dht.replication.repair_loops import ExchangeAnswers, RepairLoops
from dht.storage.digest_changes import DigestChanges
from dht.storage.membership import Membership
from dht.storage.store import Storage

A, B = "http://127.0.0.1:1", "http://127.0.0.1:2"
LOOPS = {"anti-entropy", "tombstone-collector"}


class StandInPeers:
    def __init__(self) -> None:
        self.retired: list[frozenset[str]] = []
        self.ensured: list[list[str]] = []  # the peers each step asked for

    def ensure(self, members: frozenset[str], identity: str) -> list[str]:
        self.ensured.append(sorted(members - {A}))
        return self.ensured[-1]

    async def retire(self, members: frozenset[str]) -> None:
        self.retired.append(members)


class StandInRebalance:
    woken = 0

    def wake(self) -> None:
        self.woken += 1


class StandInCoordinator:
    async def drain(self, epoch: int, deadline: float) -> bool:
        return True


def running_loops() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if not task.done()} & LOOPS


class OneNode:
    def __init__(self, data_dir: Path, cluster: tuple[str, ...] = (A,)) -> None:
        # Long intervals: the loops start, load their trees and wait; no exchange is tried.
        self.config = NodeConfig(
            port=1,
            data_dir=data_dir,
            cluster=cluster,
            self_url=A,
            anti_entropy_interval=3600.0,
            tombstone_grace=3600.0,
        )
        self.digest_changes = DigestChanges()
        self.storage = Storage(data_dir, changes=self.digest_changes)
        self.membership = Membership(
            data_dir, TopologyState(0, STABLE, cluster), self.config.vnodes
        )
        self.exchanges = ExchangeAnswers()
        self.peers = StandInPeers()
        self.rebalance = StandInRebalance()
        self.loops = RepairLoops(
            self.config,
            self.storage,
            self.digest_changes,
            self.membership,
            self.peers,  # type: ignore[arg-type]
            HybridClock(),
            self.exchanges,
        )
        self.steps = StepApplier(
            A,
            self.membership,
            self.peers,  # type: ignore[arg-type]
            self.loops,
            self.rebalance,  # type: ignore[arg-type]
            StandInCoordinator(),  # type: ignore[arg-type]
            timeout=1.0,
        )

    def hooked(self) -> bool:
        """Whether storage feeds the current trees and exchanges are answered from them."""
        answering = self.exchanges.answerer
        return (
            self.digest_changes.listening
            and answering is not None
            and answering == self.loops.anti_entropy.answer
        )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[OneNode]:
    made = OneNode(tmp_path)
    try:
        yield made
    finally:
        await made.loops.stop()
        await made.storage.drain()
        made.storage.close()


GROWN = (A, B)
JOINT_STEP = TopologyState(1, JOINT, (A,), GROWN)
HANDOFF_STEP = TopologyState(2, HANDOFF, (A,), GROWN)
STABLE_STEP = TopologyState(3, STABLE, GROWN)


async def test_the_repair_loops_run_and_answer_only_while_the_membership_is_stable(
    node: OneNode,
) -> None:
    assert node.hooked()
    node.loops.start()
    assert running_loops() == LOOPS
    first = node.loops.anti_entropy

    for step in (JOINT_STEP, HANDOFF_STEP):
        assert await node.steps.apply(step) is True
        assert not node.digest_changes.listening, step.phase
        assert node.exchanges.answerer is None, step.phase
        assert running_loops() == set(), step.phase
    assert node.peers.retired == []  # no peer is retired before the new ring is stable

    assert await node.steps.apply(STABLE_STEP) is True
    assert node.loops.anti_entropy is not first  # fresh trees, on the new ring
    assert node.hooked()
    # Collection waits until the change is closed: a node may still hold records it
    # does not own (seed 286 of the simulator).
    assert running_loops() == {"anti-entropy"}
    assert node.loops.waiting_for == [A, B]
    assert node.peers.retired == [frozenset(GROWN)]
    assert node.rebalance.woken == 3  # once a step
    assert node.peers.ensured == [[B], [B], [B]]
    assert node.steps.ring_share == node.membership.topology.current.shares()

    assert await node.steps.apply(STABLE_STEP) is True  # again: nothing closes
    assert running_loops() == {"anti-entropy"}
    assert await node.steps.apply(replace(STABLE_STEP, draining=())) is True  # closed
    assert running_loops() == LOOPS
    assert node.loops.waiting_for == []


async def test_a_step_taken_again_changes_nothing(node: OneNode) -> None:
    assert await node.steps.apply(JOINT_STEP) is True
    woken = node.rebalance.woken
    assert await node.steps.apply(JOINT_STEP) is True  # the drain's answer
    assert node.rebalance.woken == woken and len(node.peers.ensured) == 1


def key_held_by(owner: str, ring_state: TopologyState, vnodes: int) -> bytes:
    ring = ring_state.placement(vnodes).current
    return next(
        key for number in range(1000) if holders(ring, key := b"k%d" % number, 1) == [owner]
    )


async def test_a_write_for_a_key_this_node_no_longer_owns_wakes_the_handoff(
    node: OneNode,
) -> None:
    record = Record.live(1, b"v", copies=1)
    ours, theirs = (key_held_by(url, STABLE_STEP, node.config.vnodes) for url in (A, B))
    for step in (JOINT_STEP, HANDOFF_STEP, STABLE_STEP):
        await node.steps.apply(step)
    woken = node.rebalance.woken
    node.steps.hand_off_if_not_owned(ours, record)
    assert node.rebalance.woken == woken  # its own key stays
    node.steps.hand_off_if_not_owned(theirs, record)
    assert node.rebalance.woken == woken + 1
    # Mid-change (this node leaving): the handoff runs anyway, nothing to wake.
    await node.steps.apply(replace(STABLE_STEP, draining=()))  # the grow closed first
    await node.steps.apply(TopologyState(4, JOINT, GROWN, (B,)))
    woken = node.rebalance.woken
    node.steps.hand_off_if_not_owned(theirs, record)
    assert node.rebalance.woken == woken


async def test_a_node_never_changed_looks_for_nothing(tmp_path: Path) -> None:
    """Epoch 0: every write comes to an owner (a node a step behind cannot exist)."""
    node = OneNode(tmp_path, GROWN)
    try:
        theirs = key_held_by(B, STABLE_STEP, node.config.vnodes)
        node.steps.hand_off_if_not_owned(theirs, Record.live(1, b"v", copies=1))
        assert node.rebalance.woken == 0
    finally:
        await node.loops.stop()
        node.storage.close()


async def test_a_node_started_mid_change_runs_no_repair_loop(tmp_path: Path) -> None:
    """A node restarted between two rings (or started with --join) starts neither loop
    and answers no exchange until a step makes its membership stable."""
    Membership(tmp_path, JOINT_STEP, NodeConfig.vnodes)  # the step it had taken, saved
    node = OneNode(tmp_path)
    try:
        assert node.membership.phase == JOINT
        assert not node.digest_changes.listening and node.exchanges.answerer is None
        node.loops.start()
        assert running_loops() == set()
        for step in (HANDOFF_STEP, STABLE_STEP, replace(STABLE_STEP, draining=())):
            await node.steps.apply(step)
        assert node.hooked() and running_loops() == LOOPS
    finally:
        await node.loops.stop()
        node.storage.close()


async def test_a_node_that_left_runs_no_repair_loop(tmp_path: Path) -> None:
    """A node a shrink removed only hands off: it shares no tree with the ring, and its
    exchanges, refused by the nodes that stay, would count against its circuits to them
    and hold back its handoff (found by the chaos scenario of a delete through a
    shrink, chaos/test_membership_tombstones.py)."""
    node = OneNode(tmp_path, GROWN)
    try:
        node.loops.start()
        assert running_loops() == LOOPS
        for step in (
            TopologyState(1, JOINT, GROWN, (B,)),
            TopologyState(2, HANDOFF, GROWN, (B,)),
            TopologyState(3, STABLE, (B,)),
            TopologyState(3, STABLE, (B,), draining=()),
        ):
            await node.steps.apply(step)
            assert running_loops() == set(), step
    finally:
        await node.loops.stop()
        node.storage.close()


async def test_a_node_that_left_takes_no_step_of_a_later_change(tmp_path: Path) -> None:
    """Restarted on the data it kept (not wiped, so `--join` is ignored) and added again,
    a node that left would hand its old records to the ring: values older than the
    tombstones collected since (found by review). It takes its own change's close, and
    refuses any later step."""
    node = OneNode(tmp_path, GROWN)
    try:
        left = TopologyState(3, STABLE, (B,))
        for step in (
            TopologyState(1, JOINT, GROWN, (B,)),
            TopologyState(2, HANDOFF, GROWN, (B,)),
            left,
            replace(left, draining=()),  # the close, which the driver sends it too
        ):
            await node.steps.apply(step)
        with pytest.raises(BadTransition, match="wipe its data folder"):
            await node.steps.apply(TopologyState(4, JOINT, (B,), GROWN))
        assert node.membership.state == replace(left, left=(A,), draining=())
    finally:
        await node.loops.stop()
        node.storage.close()
