"""The joint-quorum rule of a membership change (dht/model/topology.py), checked
exhaustively on small clusters: every write quorum and every read quorum of neighbouring
phases share a replica, whenever the write and read acks add up to more than F."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

import pytest

from dht.model.replicas import ReplicaCount
from dht.model.ring import Ring
from dht.model.topology import (
    HANDOFF,
    JOINT,
    STABLE,
    BadTransition,
    Topology,
    TopologyState,
    UnclearChange,
    change_steps,
    data_at_risk,
    phases,
    range_sources_needed,
    removed,
    steps_to_resume,
)

VNODES = 16
KEYS = [f"key-{index}".encode() for index in range(25)]


def urls(count: int) -> list[str]:
    return [f"http://127.0.0.1:{8080 + index}" for index in range(count)]


def minimal_quorums(
    topology: Topology, key: bytes, copies: int, ack: int
) -> Iterator[frozenset[str]]:
    """Every set of nodes that makes a quorum of `ack` and has no smaller subset that
    does: the sets a coordinator may have heard from when it answers."""
    targets = topology.targets(key, copies)
    found: list[frozenset[str]] = []
    for size in range(len(targets) + 1):
        for nodes in map(frozenset, itertools.combinations(targets, size)):
            if topology.quorum_met(key, copies, ack, nodes) and not any(
                smaller <= nodes for smaller in found
            ):
                found.append(nodes)
                yield nodes


def changes() -> Iterator[tuple[str, Ring, Ring]]:
    """Growing by one node and shrinking by one, from 3 and 4 nodes."""
    for size in (3, 4):
        yield f"{size} -> {size + 1}", Ring(urls(size), VNODES), Ring(urls(size + 1), VNODES)
        yield f"{size} -> {size - 1}", Ring(urls(size), VNODES), Ring(urls(size - 1), VNODES)


@pytest.mark.parametrize("change", list(changes()), ids=lambda change: change[0])
def test_quorums_of_neighbouring_phases_always_share_a_replica(
    change: tuple[str, Ring, Ring],
) -> None:
    _, old, new = change
    steps = phases(old, new)
    for copies in (1, 2, 3):
        for write_ack, read_ack in itertools.product(range(1, copies + 1), repeat=2):
            if write_ack + read_ack <= copies:
                continue  # no overlap is promised then, even without a change
            for key in KEYS:
                for written, read in ((0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 1), (2, 2)):
                    writes = list(minimal_quorums(steps[written], key, copies, write_ack))
                    reads = list(minimal_quorums(steps[read], key, copies, read_ack))
                    for write, answer in itertools.product(writes, reads):
                        assert write & answer, (key, copies, write_ack, read_ack, written, read)


def test_without_the_joint_phase_a_read_can_miss_an_acknowledged_write() -> None:
    """Straight from stable(old) to stable(new), before the handoff: some key has a write
    quorum in the old ring and a read quorum in the new one with no replica in common,
    which is why the joint phase and the handoff exist."""
    old, new = Ring(urls(3), VNODES), Ring(urls(4), VNODES)
    missed = [
        key
        for key in KEYS
        if any(
            not write & answer
            for write in minimal_quorums(Topology(old), key, 3, 2)
            for answer in minimal_quorums(Topology(new), key, 3, 2)
        )
    ]
    assert missed


def test_joint_targets_are_the_union_of_both_replica_sets_current_first() -> None:
    old, new = Ring(urls(3), VNODES), Ring(urls(4), VNODES)
    joint = Topology(old, new)
    for key in KEYS:
        first, second = old.replicas_for(key, 2), new.replicas_for(key, 2)
        targets = joint.targets(key, 2)
        assert targets[: len(first)] == first
        assert set(targets) == set(first) | set(second)
        assert joint.quorum_met(key, 2, 2, targets)
        assert not joint.quorum_met(key, 2, 2, first) or set(second) <= set(first)


# -- the steps of a change (TopologyState) ------------------------------------------------

A, B = tuple(urls(3)), tuple(urls(4))


def state(
    epoch: int, phase: str, current: tuple[str, ...], next_: tuple[str, ...] | None = None
) -> TopologyState:
    return TopologyState(epoch, phase, current, next_)


def test_each_step_accepts_only_itself_and_the_next_one() -> None:
    steps = [
        state(0, STABLE, A),
        state(1, JOINT, A, B),
        state(2, HANDOFF, A, B),
        state(3, STABLE, B),
    ]
    for index, here in enumerate(steps):
        here.check_successor(here)
        for later, proposed in enumerate(steps):
            if later == index + 1:
                here.check_successor(proposed)
            elif later != index:
                with pytest.raises(BadTransition):
                    here.check_successor(proposed)


def test_a_step_of_another_change_is_refused() -> None:
    other = tuple(urls(5))
    with pytest.raises(BadTransition):
        state(0, STABLE, A).check_successor(state(1, JOINT, B, other))
    with pytest.raises(BadTransition):
        state(1, JOINT, A, B).check_successor(state(2, HANDOFF, A, other))
    with pytest.raises(BadTransition):
        state(2, HANDOFF, A, B).check_successor(state(3, STABLE, other))
    with pytest.raises(BadTransition):
        state(0, STABLE, A).check_successor(state(1, JOINT, A, A))


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"epoch": "1", "phase": "stable", "current": list(A)},
        {"epoch": True, "phase": "stable", "current": list(A)},
        {"epoch": 1, "phase": "moving", "current": list(A)},
        {"epoch": 1, "phase": "stable", "current": []},
        {"epoch": 1, "phase": "stable", "current": list(A), "next": list(B)},
        {"epoch": 1, "phase": "joint", "current": list(A)},
        {"epoch": 1, "phase": "stable", "current": [A[0], A[0]]},
        {"epoch": 1, "phase": "stable", "current": ["ftp://x:1"]},
        {"epoch": -1, "phase": "stable", "current": list(A)},
        {"epoch": 1, "phase": "stable", "current": list(A), "extra": 1},
    ],
)
def test_a_malformed_state_is_refused(document: object) -> None:
    with pytest.raises(ValueError):
        TopologyState.from_json(document)


def test_a_state_survives_its_json() -> None:
    for original in (state(4, JOINT, A, B), state(0, STABLE, A)):
        assert TopologyState.from_json(original.to_json()) == state(
            original.epoch,
            original.phase,
            tuple(sorted(original.current)),
            None if original.next is None else tuple(sorted(original.next)),
        )


def test_the_default_during_a_change_is_each_rings_own_quorum() -> None:
    joint = Topology(Ring(urls(4), VNODES), Ring(urls(3), VNODES))
    assert joint.default_copies() == 4
    assert joint.size == 4
    key = KEYS[0]
    assert [(len(nodes), ack) for nodes, ack in joint.quorums(key, None)] == [(4, 3), (3, 2)]
    assert [len(nodes) for nodes, _ in joint.quorums(key, ReplicaCount(3, 4))] == [4, 3]
    assert [ack for _, ack in joint.quorums(key, ReplicaCount(3, 4))] == [3, 3]


def minimal_sets(quorums: list[tuple[list[str], int]]) -> Iterator[frozenset[str]]:
    """Every set of nodes that meets each (replica set, acks) of `quorums` and has no
    smaller subset that does."""
    targets = sorted({node for nodes, _ in quorums for node in nodes})
    found: list[frozenset[str]] = []
    for size in range(len(targets) + 1):
        for chosen in map(frozenset, itertools.combinations(targets, size)):
            meets = all(len(chosen & set(nodes)) >= ack for nodes, ack in quorums)
            if meets and not any(smaller <= chosen for smaller in found):
                found.append(chosen)
                yield chosen


@pytest.mark.parametrize(("old_size", "new_size"), [(3, 4), (4, 3), (5, 3), (3, 5), (2, 3), (3, 2)])
def test_default_quorums_of_neighbouring_steps_always_meet(old_size: int, new_size: int) -> None:
    """Found in review of issue 24: nodes take the steps of a change one after another,
    so a default write in one step and a default read in the next (or the one before)
    must share a node. With the smaller ring's count for both rings in joint (2/3
    shrinking 5 -> 3), a read at 3/5 by a node still in stable(old) missed a joint
    write two staying nodes took."""
    steps = phases(Ring(urls(old_size), VNODES), Ring(urls(new_size), VNODES))
    for key in KEYS[:10]:
        for written, read in itertools.product(range(len(steps)), repeat=2):
            if abs(written - read) > 1:
                continue  # nodes are never two steps apart
            for write in minimal_sets(steps[written].quorums(key, None)):
                for answer in minimal_sets(steps[read].quorums(key, None)):
                    assert write & answer, (key, written, read, sorted(write), sorted(answer))


# -- the cluster-wide range during a change (rule 8.5) -------------------------------------


def default_write_quorums(step: Topology, key: bytes) -> Iterator[frozenset[str]]:
    return minimal_sets(step.quorums(key, None))


def subsets(nodes: list[str]) -> Iterator[frozenset[str]]:
    for size in range(len(nodes) + 1):
        yield from map(frozenset, itertools.combinations(nodes, size))


@pytest.mark.parametrize(("old_size", "new_size"), [(3, 4), (4, 3), (5, 3), (3, 5), (2, 3), (3, 2)])
def test_a_range_enough_for_each_list_sees_every_default_write_of_the_change(
    old_size: int, new_size: int
) -> None:
    """A range in joint or handoff that `range_shortfall` lets answer has, for every key,
    a node of every write quorum of the default replicas of each step: stable(old),
    joint/handoff, stable(new)."""
    old, new = Ring(urls(old_size), VNODES), Ring(urls(new_size), VNODES)
    steps = phases(old, new)
    change = steps[1]
    for answered in subsets(sorted(set(old.nodes) | set(new.nodes))):
        if change.range_shortfall(answered) is not None:
            continue
        for key in KEYS[:10]:
            for step in steps:
                for write in default_write_quorums(step, key):
                    assert write & answered, (sorted(answered), key, step, sorted(write))


def test_a_count_over_every_node_of_a_shrink_misses_joint_writes() -> None:
    """Shrinking 5 -> 3, three old nodes answer: three of five, enough by a count over
    every node (the old rule), yet they can miss a joint write at 2/3 (a quorum of the
    new list's three) that two staying nodes took. The new list's count refuses them."""
    old, new = Ring(urls(5), VNODES), Ring(urls(3), VNODES)
    change = Topology(old, new)
    leaving = sorted(set(old.nodes) - set(new.nodes))
    for staying in new.nodes:
        answered = {*leaving, staying}
        assert len(answered) >= len(old) - len(old) // 2  # 5 - quorum(5) + 1
        missed = [
            key
            for key in KEYS
            if any(not write & answered for write in minimal_quorums(change, key, 3, 2))
        ]
        assert missed, staying
        assert change.range_shortfall(answered) == "1 of the next list's 3 nodes (2 needed)"


@pytest.mark.parametrize(("size", "needed"), [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3)])
def test_a_range_when_stable_needs_n_minus_quorum_plus_one_nodes(size: int, needed: int) -> None:
    stable = Topology(Ring(urls(size), VNODES))
    nodes = urls(size)
    assert range_sources_needed(size) == needed
    assert stable.range_shortfall(nodes[:needed]) is None
    assert (
        stable.range_shortfall(nodes[: needed - 1])
        == f"{needed - 1} of the {size} nodes ({needed} needed)"
    )
    assert stable.range_shortfall([*nodes[: needed - 1], "http://127.0.0.1:1"]) is not None


OLD, NEW = tuple(urls(3)), tuple(urls(4))
JOINT_STEP, HANDOFF_STEP, STABLE_STEP = change_steps(OLD, NEW, 5)
STABLE_OLD = TopologyState(5, STABLE, OLD)
JOINER = TopologyState(0, JOINT, OLD, NEW)  # a node started with --join, not yet asked


@pytest.mark.parametrize(
    ("states", "first"),
    [
        ([STABLE_OLD] * 3 + [JOINER], JOINT),  # a change not begun
        ([JOINT_STEP] * 2 + [STABLE_OLD] + [JOINER], JOINT),
        ([JOINT_STEP] * 4, JOINT),
        ([HANDOFF_STEP] + [JOINT_STEP] * 3, HANDOFF),  # the node asked is ahead...
        ([JOINT_STEP] + [HANDOFF_STEP] * 3, HANDOFF),  # ...or behind
        ([HANDOFF_STEP] * 4, HANDOFF),  # taken again: its handoff is waited for
        ([STABLE_STEP] + [HANDOFF_STEP] * 3, STABLE),
        ([HANDOFF_STEP] + [STABLE_STEP] * 3, STABLE),
    ],
)
def test_a_change_resumes_from_the_most_advanced_step_of_neighbouring_ones(
    states: list[TopologyState], first: str
) -> None:
    old, steps = steps_to_resume(states, list(reversed(NEW)))
    assert old == OLD
    assert steps == [JOINT_STEP, HANDOFF_STEP, STABLE_STEP][[JOINT, HANDOFF, STABLE].index(first) :]


def test_a_change_every_node_finished_has_no_step_left() -> None:
    assert steps_to_resume([STABLE_STEP] * 4, NEW) == (NEW, [])


@pytest.mark.parametrize(
    ("states", "why"),
    [
        ([STABLE_OLD, HANDOFF_STEP], "more than one step apart"),
        ([STABLE_OLD, STABLE_STEP], "more than one step apart"),
        ([JOINT_STEP, TopologyState(6, JOINT, OLD, tuple(urls(2)))], "different changes"),
        ([STABLE_OLD, TopologyState(5, STABLE, tuple(urls(2)))], "different node lists"),
        ([HANDOFF_STEP, TopologyState(9, STABLE, tuple(urls(2)))], "no step of the change"),
    ],
)
def test_steps_that_make_no_one_change_are_not_resumed(
    states: list[TopologyState], why: str
) -> None:
    with pytest.raises(UnclearChange, match=why):
        steps_to_resume(states, NEW)


def test_a_change_to_other_nodes_under_way_is_finished_first() -> None:
    with pytest.raises(UnclearChange, match="under way; finish it first"):
        steps_to_resume([JOINT_STEP] * 4, urls(5))


# -- closing a change (SPEC.md rule 13.3) -------------------------------------------------

SHRUNK = ("http://a:1", "http://b:1")
NODES3 = (*SHRUNK, "http://c:1")
SHRINK_HANDOFF = TopologyState(2, HANDOFF, NODES3, SHRUNK)
SHRINK_STABLE = TopologyState(3, STABLE, SHRUNK)


def test_a_node_that_ends_a_change_lists_who_left_and_who_drains_whatever_it_is_told() -> None:
    """The node decides: every live node of the change may still hold a record it does
    not own (a write after its handoff pass went by), so each drains until closed."""
    told = replace(SHRINK_STABLE, draining=())  # a proposal that says it is closed
    taken = SHRINK_HANDOFF.successor(told)
    assert taken.left == ("http://c:1",)
    assert taken.draining == NODES3
    assert not taken.closed
    with_dead = replace(SHRINK_HANDOFF, dead=("http://c:1",))
    assert with_dead.successor(SHRINK_STABLE).draining == SHRUNK  # the dead never drain


def test_the_same_stable_step_can_only_shorten_the_draining_nodes() -> None:
    ending = SHRINK_HANDOFF.successor(SHRINK_STABLE)
    assert ending.successor(SHRINK_STABLE) == ending  # says nothing of it: as it is
    fewer = ending.successor(replace(SHRINK_STABLE, draining=SHRUNK))
    assert fewer.draining == SHRUNK
    assert fewer.successor(replace(SHRINK_STABLE, draining=NODES3)).draining == SHRUNK
    closed = fewer.successor(replace(SHRINK_STABLE, draining=()))
    assert closed.closed and closed.left == ("http://c:1",)
    assert TopologyState.from_json(closed.to_json()) == closed
    assert TopologyState.from_json(ending.to_json()) == ending
    assert "draining" not in TopologyState(0, STABLE, NODES3).to_json()  # never changed


def test_no_change_starts_before_the_last_one_is_closed() -> None:
    ending = SHRINK_HANDOFF.successor(SHRINK_STABLE)
    grow = TopologyState(4, JOINT, SHRUNK, NODES3)
    with pytest.raises(BadTransition, match=r"not closed.*--dead"):
        ending.check_successor(grow)
    replace(ending, draining=()).check_successor(grow)


def test_a_node_that_left_is_refused_once_the_change_is_closed() -> None:
    ending = SHRINK_HANDOFF.successor(SHRINK_STABLE)
    assert not ending.refuses_replica("http://c:1")  # its handoff is what closing waits for
    closed = replace(ending, draining=())
    assert closed.refuses_replica("http://c:1")
    assert not closed.refuses_replica("http://a:1")
    assert not closed.refuses_replica("http://e:1")  # a node joining: not one that left
    mid = TopologyState(1, JOINT, NODES3, SHRUNK, ("http://c:1",))
    assert mid.refuses_replica("http://c:1") and not mid.refuses_replica("http://b:1")
    for bad in (
        lambda: TopologyState(3, STABLE, SHRUNK, left=("http://a:1",)),  # still current
        lambda: TopologyState(1, JOINT, NODES3, SHRUNK, draining=()),  # not stable
    ):
        with pytest.raises(ValueError):
            bad()


def test_a_change_over_but_not_closed_is_resumed_to_close_it() -> None:
    """Every node in stable(new), one still draining: the driver takes that step again
    (waiting for the handoffs of the old list's nodes too) and closes it."""
    ending = SHRINK_HANDOFF.successor(SHRINK_STABLE)
    old, steps = steps_to_resume([ending, ending, replace(ending, draining=())], SHRUNK)
    assert old == NODES3
    assert steps == [SHRINK_STABLE]
    closed = replace(ending, draining=())
    assert steps_to_resume([closed] * 3, SHRUNK) == (SHRUNK, [])


# -- nodes gone for good (SPEC.md rule 13.8) ---------------------------------------------

NODES4 = ("http://a:1", "http://b:1", "http://c:1", "http://d:1")


def test_dead_nodes_are_named_only_in_a_change_and_only_among_its_nodes() -> None:
    joint = TopologyState(1, JOINT, NODES4, NODES4[1:], ("http://a:1",))
    assert TopologyState.from_json(joint.to_json()) == joint
    assert "dead" not in TopologyState(0, STABLE, NODES4).to_json()
    # One that was to stay, lost mid-change: finished without it, removed right after.
    TopologyState(2, HANDOFF, NODES4, NODES4[1:], ("http://a:1", "http://b:1"))
    for bad in (
        lambda: TopologyState(0, STABLE, NODES4, None, ("http://a:1",)),
        lambda: TopologyState(1, JOINT, NODES4, NODES4[1:], ("http://z:1",)),  # no member
        lambda: TopologyState(1, JOINT, NODES4, NODES4[2:], NODES4),  # nobody left
    ):
        with pytest.raises(ValueError):
            bad()


def test_the_same_step_with_more_dead_nodes_is_the_same_step() -> None:
    one = TopologyState(1, JOINT, NODES4, NODES4[2:], ("http://a:1",))
    two = TopologyState(1, JOINT, NODES4, NODES4[2:], ("http://a:1", "http://b:1"))
    assert one.same_step(two)
    one.check_successor(two)


def test_a_joining_node_takes_the_joint_step_of_a_replacement_it_could_not_know() -> None:
    seed = TopologyState(
        0, JOINT, ("http://b:1", "http://c:1"), ("http://b:1", "http://c:1", "http://e:1")
    )
    replacement = TopologyState(
        4,
        JOINT,
        ("http://a:1", "http://b:1", "http://c:1"),
        ("http://b:1", "http://c:1", "http://e:1"),
        ("http://a:1",),
    )
    seed.check_successor(replacement)
    stable = TopologyState(3, STABLE, ("http://a:1", "http://b:1", "http://c:1"))
    old, steps = steps_to_resume([stable, stable, seed], ["http://b:1", "http://c:1", "http://e:1"])
    assert old == ("http://a:1", "http://b:1", "http://c:1")
    assert [(step.epoch, step.phase) for step in steps] == [(4, JOINT), (5, HANDOFF), (6, STABLE)]


def test_data_at_risk_is_where_a_write_may_have_been_acknowledged_by_removed_nodes_only() -> None:
    a, b = NODES4[:2]
    ring = Ring(NODES4, 64)
    one_dead = {(r.acks, r.copies): r for r in data_at_risk(ring, [a], [a])}
    assert set(one_dead) == {(1, 1), (1, 2), (1, 3), (1, 4)}  # one dead: one ack at risk
    assert one_dead[1, 1].lost == pytest.approx(ring.shares()[a])
    assert one_dead[1, 4].lost == pytest.approx(1.0)  # every key has a replica there
    leaving_alive = data_at_risk(ring, [a, b], [])
    assert all(r.lost == 0 and r.removed > 0 for r in leaving_alive)
    two_dead = {(r.acks, r.copies): r for r in data_at_risk(ring, [a, b], [a, b])}
    assert two_dead[2, 3].lost == two_dead[2, 3].removed > 0  # 2/3 writes on both of them
    assert (3, 4) not in two_dead  # a 3/4 write always reached a live node
    assert data_at_risk(ring, [], []) == []


def test_a_node_is_removed_when_its_own_step_or_a_later_step_of_a_peer_leaves_it_out() -> None:
    a, b, c, d = NODES4
    old = TopologyState(0, STABLE, NODES4)
    new = TopologyState(3, STABLE, (b, c, d))
    assert not removed(old, None, a)
    assert removed(old, new, a)  # removed as dead while away
    assert not removed(old, new, b)
    assert not removed(new, old, b)  # a peer a step behind says nothing
    assert removed(new, None, a)  # it took the steps of its own removal
    seed = TopologyState(0, JOINT, (b, c, d), (b, c, d, "http://e:1"))
    assert not removed(seed, new, "http://e:1")  # joining, not listed yet
