"""Which replicas a request needs while the cluster changes shape, and the phases of a
change (pure).

A change moves the cluster through these phases, and no two nodes are ever more than one
phase apart (the driver, `dht.membership.driver`, moves every node into a phase before
any node goes on to the next one):

    stable(old)  ->  joint(old, new)  ->  handoff(old, new)  ->  stable(new)

In the joint and handoff phases a key has two replica sets, one per ring. A write is
acknowledged only when `A` replicas of *each* set took it, and a read needs `A` answers
from each set (the newest wins), the rule Raft's joint consensus uses for its
configurations. Then, for a write with `A_w` and a read with `A_r` where `A_w + A_r > F`
(the quorum contract, rule 3.5), any write and read made in neighbouring phases meet on at
least one replica: each phase's quorums include a quorum of a ring the neighbouring phase
also has a quorum of. A write acknowledged in stable(old) and a read in stable(new) are
two phases apart: the handoff, which starts only once every node is joint (so no
stable(old) write can still come), copies every old record to its new owners before any
node leaves the handoff phase. `tests/unit/model/test_topology.py` checks the overlap
exhaustively on small clusters.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from dht.config import normalize_url
from dht.model.replicas import ReplicaCount, default_replicas, quorum
from dht.model.ring import Ring

STABLE, JOINT, HANDOFF = "stable", "joint", "handoff"
PHASES = (STABLE, JOINT, HANDOFF)


@dataclass(frozen=True)
class Topology:
    """The rings a node places keys by: one when stable, two (current, then next) while
    a change is under way."""

    current: Ring
    next: Ring | None = None

    @property
    def rings(self) -> tuple[Ring, ...]:
        return (self.current,) if self.next is None else (self.current, self.next)

    @property
    def size(self) -> int:
        """The most replicas a request may ask for: the current ring's node count."""
        return len(self.current)

    def default_copies(self) -> int:
        """The `F` a write without `replicas` carries: every node of each ring."""
        return max(len(ring) for ring in self.rings)

    def quorums(self, key: bytes, replicas: ReplicaCount | None) -> list[tuple[list[str], int]]:
        """(replica set, acks needed in it) for each ring. A ring smaller than `F` gives
        all its nodes and needs at most all of them.

        `replicas` None, the default: each ring's own default, a quorum of all its nodes
        (3 of 5 and 2 of 3 shrinking 5 -> 3). Nodes take the steps of a change one after
        another, so a node a step behind reads and writes by the quorum of its own step
        meanwhile: each ring's own quorum meets it there. One count for both rings would
        not: the smaller ring's 2/3 on the old ring of 5 misses a read at 3/5."""
        plan = []
        for ring in self.rings:
            count = replicas or default_replicas(len(ring))
            nodes = ring.replicas_for(key, count.from_)
            plan.append((nodes, min(count.ack, len(nodes))))
        return plan

    def replica_sets(self, key: bytes, copies: int) -> list[list[str]]:
        """The key's replica set in each ring, in ring order."""
        return [ring.replicas_for(key, copies) for ring in self.rings]

    def targets(self, key: bytes, copies: int) -> list[str]:
        """Every node a request for `key` goes to: the union of the replica sets, the
        current ring's first."""
        return union(self.replica_sets(key, copies))

    def quorum_met(self, key: bytes, copies: int, ack: int, answered: Collection[str]) -> bool:
        """Whether the nodes in `answered` make a quorum of `ack` in every replica set."""
        return all(
            sum(node in answered for node in nodes) >= needed
            for nodes, needed in self.quorums(key, ReplicaCount(ack, copies))
        )

    def range_shortfall(self, answered: Collection[str]) -> str | None:
        """Why the nodes in `answered` are too few for a cluster-wide range (rule 8.5),
        or None when they are enough: `range_sources_needed(N)` of each ring's N nodes.

        That many of a ring's nodes include one of any quorum of them, so the range sees
        every key a quorum of some ring acknowledged; the default write of every phase
        is one (of the only ring when stable, of the smaller one in joint and handoff,
        `default_replicas`). A count over both rings at once would not do: shrinking
        5 -> 3, the two leaving nodes and one staying node answer, three of five, while
        the two other staying nodes, which took a joint write (2 of 3), do not."""
        for name, ring in zip(("current", "next"), self.rings, strict=False):
            needed = range_sources_needed(len(ring))
            heard = sum(node in answered for node in ring.nodes)
            if heard < needed:
                list_name = "" if self.next is None else f"{name} list's "
                return f"{heard} of the {list_name}{len(ring)} nodes ({needed} needed)"
        return None


def range_sources_needed(size: int) -> int:
    """How many of a ring's `size` nodes a range must read: N - quorum(N) + 1, one more
    than the nodes a quorum may leave out."""
    return size - quorum(size) + 1


def union(sets: list[list[str]]) -> list[str]:
    """The nodes of every set, each once, in the order first met."""
    nodes: list[str] = []
    for members in sets:
        nodes += [node for node in members if node not in nodes]
    return nodes


def phases(old: Ring, new: Ring) -> list[Topology]:
    """The placements of a change from `old` to `new`, in order (joint and handoff
    place keys alike)."""
    return [Topology(old), Topology(old, new), Topology(new)]


class BadTransition(ValueError):
    """A topology state that cannot follow this node's current one."""


@dataclass(frozen=True)
class TopologyState:
    """What a node persists of its membership: the phase, the node lists, and a counter
    that grows by one at every step (a handoff's progress is kept under it). The lists
    are kept sorted: their order places nothing (the ring sorts them too), so two states
    of the same step compare equal.

    `dead`: nodes of the change gone for good (`membership --dead`): they take no step,
    hand nothing off and are handed nothing, so the nodes that stay hand off the records
    they held, from the copies they have. Most leave; one of `next` is a node that was
    to stay and was lost mid-change, removed by a change right after this one. Part of
    a change, not of its step: the same step with more dead nodes is the same step.

    `left`: the nodes changes removed, carried from step to step until a step lists one
    again (wiped and joined anew): once the change that removed it is closed, a node
    that left is refused as a replica, whatever ring it says it is on, in every later
    step (SPEC 13.3, 13.9). Its own last step places keys by the ring the cluster went
    on with, so the next change's steps would share a ring with it, and it may still
    hold values older than tombstones collected since.

    `draining`, in the stable step that ends a change: the live nodes of the change
    whose last handoff is not confirmed yet, which may still hold records they do not
    own. While any is, tombstone collection waits: a node that still holds an older
    value would bring it back once the tombstone is gone. The change is closed when the
    driver saw every handoff done (or named the silent ones dead): the same step with
    `draining` empty. Like `dead`, part of the change, not of its step."""

    epoch: int
    phase: str
    current: tuple[str, ...]
    next: tuple[str, ...] | None = None
    dead: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    # None: not said (a proposal that leaves it as it is; a node never in a change).
    draining: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "current", tuple(sorted(self.current)))
        object.__setattr__(self, "dead", tuple(sorted(set(self.dead))))
        object.__setattr__(self, "left", tuple(sorted(set(self.left))))
        if self.draining is not None:
            object.__setattr__(self, "draining", tuple(sorted(set(self.draining))))
        if self.next is not None:
            object.__setattr__(self, "next", tuple(sorted(self.next)))
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        if not self.current:
            raise ValueError("current must list at least one node")
        if (self.next is None) != (self.phase == STABLE):
            raise ValueError("next is given exactly when the phase is joint or handoff")
        if self.next is not None and not self.next:
            raise ValueError("next must list at least one node")
        if self.epoch < 0:
            raise ValueError("epoch must not be negative")
        if self.dead and self.next is None:
            raise ValueError("dead nodes are named only in a change (joint or handoff)")
        if self.next is not None and not set(self.dead) <= set(self.current) | set(self.next):
            raise ValueError("a dead node must be one of the nodes of the change")
        if self.next is not None and set(self.next) <= set(self.dead):
            raise ValueError("every node of the new list is dead")
        if self.draining is not None and self.next is not None:
            raise ValueError("draining nodes are named only in a stable step")
        if set(self.left) & self.members:
            raise ValueError("a node that left cannot be one of the step's nodes")

    @property
    def closed(self) -> bool:
        """Whether no node of the last change may still hold records it does not own:
        tombstone collection may run (rule 9.10)."""
        return not self.draining

    def refuses_replica(self, sender: str) -> bool:
        """Whether a replica call from `sender` is refused whatever ring it says it is
        on: a node named dead in this change, or one that left, once the change that
        removed it is closed. Either may come back with older values than the
        tombstones collected since."""
        if sender in self.dead:
            return True
        return sender in self.left and sender not in (self.draining or ())

    def placement(self, vnodes: int) -> Topology:
        return Topology(
            Ring(self.current, vnodes), None if self.next is None else Ring(self.next, vnodes)
        )

    @property
    def joining_seed(self) -> bool:
        """The first state of a node started with `--join`: joint at epoch 0, which no
        step of a change ever is (the first joint step is epoch 1 or more)."""
        return self.epoch == 0 and self.phase == JOINT

    @property
    def members(self) -> frozenset[str]:
        """Every node in either list."""
        return frozenset(self.current) | frozenset(self.next or ())

    def same_step(self, other: TopologyState) -> bool:
        return (self.phase, self.current, self.next) == (other.phase, other.current, other.next)

    def successor(self, proposed: TopologyState) -> TopologyState:
        """The state this node takes for `proposed` (raises BadTransition unless it is
        this step again or the one after it, `check_successor`). The node decides what
        a stable step ends: coming from a handoff, the nodes that left and the ones
        draining are the change's, whatever the proposal says; the same stable step
        again can only shorten `draining` (a node confirmed drained, or named dead,
        never drains again)."""
        self.check_successor(proposed)
        # Who left stays known (the proposal may tell a node that joins), but a node
        # the step lists is a member again.
        left = (set(self.left) | set(proposed.left)) - proposed.members
        if proposed.phase != STABLE:
            return replace(proposed, left=tuple(left))
        if self.phase == HANDOFF:
            assert self.next is not None
            live = (set(self.current) | set(self.next)) - set(self.dead)
            left |= set(self.current) - set(self.next)
            return replace(proposed, left=tuple(left), draining=tuple(live))
        draining = self.draining
        if draining is not None and proposed.draining is not None:
            draining = tuple(set(draining) & set(proposed.draining))
        return replace(proposed, left=tuple(left), draining=draining)

    def check_successor(self, proposed: TopologyState) -> None:
        """Raises BadTransition unless `proposed` is this state again or the step after it:
        stable(A) -> joint(A, B) -> handoff(A, B) -> stable(B).

        A node started with `--join` (joint at epoch 0, a seed from its `--cluster`)
        takes the joint step of any change: its `--cluster` names the nodes it joins, not
        those a replacement removes, which it cannot know."""
        if self.same_step(proposed):
            return
        if self.joining_seed and proposed.phase == JOINT:
            return
        allowed = {
            STABLE: JOINT,
            JOINT: HANDOFF,
            HANDOFF: STABLE,
        }[self.phase]
        if proposed.phase != allowed:
            raise BadTransition(
                f"a {self.phase} node can only go to {allowed}, not {proposed.phase}"
            )
        if self.phase == STABLE:
            if self.draining:
                raise BadTransition(
                    "the last change is not closed: "
                    + ", ".join(self.draining)
                    + " may still hold records to hand off; run that change again to "
                    "close it (with --dead naming a node of it gone for good)"
                )
            if proposed.current != self.current:
                raise BadTransition("a joint state's current nodes must be this node's nodes")
            if proposed.next == self.current:
                raise BadTransition("the new node list is the current one: nothing changes")
        elif self.phase == JOINT:
            if (proposed.current, proposed.next) != (self.current, self.next):
                raise BadTransition("the handoff must be of the same change as the joint phase")
        elif proposed.current != self.next:
            raise BadTransition("the new stable nodes must be the ones the handoff went to")

    def to_json(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "epoch": self.epoch,
            "phase": self.phase,
            "current": list(self.current),
            "next": None if self.next is None else list(self.next),
        }
        if self.dead:  # only in a change that removes nodes gone for good
            state["dead"] = list(self.dead)
        if self.left:  # only once a change removed nodes
            state["left"] = list(self.left)
        if self.draining is not None:  # after a change: empty once it is closed
            state["draining"] = list(self.draining)
        return state

    @classmethod
    def from_json(cls, data: Any) -> TopologyState:
        """Raises ValueError for anything that is not a well-formed state."""
        if not isinstance(data, dict):
            raise ValueError("a topology state is a JSON object")
        unknown = set(data) - {"epoch", "phase", "current", "next", "dead", "left", "draining"}
        if unknown:
            raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
        epoch = data.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise ValueError("epoch must be an integer")
        return cls(
            epoch,
            str(data.get("phase")),
            _node_list(data.get("current"), "current"),
            None if data.get("next") is None else _node_list(data["next"], "next"),
            _node_list(data.get("dead", []), "dead"),
            _node_list(data.get("left", []), "left"),
            None if data.get("draining") is None else _node_list(data["draining"], "draining"),
        )


def _node_list(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(url, str) for url in value):
        raise ValueError(f"{name} must be a list of node URLs")
    nodes = tuple(normalize_url(url) for url in value)
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"{name} lists a node twice")
    return nodes


def removed(own: TopologyState, theirs: TopologyState | None, self_url: str) -> bool:
    """Whether a node in `own` step, told that a peer is in `theirs` (None: not asked),
    has been removed from the cluster: its own step leaves it out (a removal it took
    part in), or a later step of its peer does (a removal it missed, being down or cut
    off, `membership --dead`). A node started with `--join` that has not joined yet is
    not removed: the others do not list it yet."""
    if own.joining_seed:
        return False
    if self_url not in own.members:
        return True
    return theirs is not None and theirs.epoch > own.epoch and self_url not in theirs.members


class UnclearChange(ValueError):
    """The nodes' steps do not make one change that can go on; the message says why."""


def change_steps(old: Collection[str], new: Collection[str], epoch: int) -> list[TopologyState]:
    """The steps after stable(old) at `epoch`: joint, handoff, stable(new)."""
    return [
        TopologyState(epoch + 1, JOINT, tuple(old), tuple(new)),
        TopologyState(epoch + 2, HANDOFF, tuple(old), tuple(new)),
        TopologyState(epoch + 3, STABLE, tuple(new)),
    ]


def steps_to_resume(
    states: Collection[TopologyState], new: Collection[str]
) -> tuple[tuple[str, ...], list[TopologyState]]:
    """From the steps every node of a change is in, the old node list and the steps that
    still have to be taken everywhere, the first of them the one to take again (empty:
    every node is in stable(new)). Raises UnclearChange when the steps are not those of
    one change to `new`, or are more than one step apart.

    Every node is in the least advanced node's step or the one after it (the driver
    moves a node on only once every node took the step before). When some node is a
    step ahead, the step before was complete everywhere, handoff included: the change
    goes on from the most advanced step, which the nodes behind take and the ones ahead
    take again (a 200 that changes nothing). When all are in one step, that step is
    taken again, so that a handoff interrupted there is waited for. When every node is
    in stable(new) but the change is not closed (some node still lists nodes draining),
    that step is taken again, so that the driver waits for their handoffs and closes
    it; the old list is then the new one and the nodes draining."""
    target = tuple(sorted(new))
    # Nodes started with --join take whatever joint step comes (`check_successor`):
    # their seeds say nothing of where the change stands, unless only they answer.
    states = [state for state in states if not state.joining_seed] or list(states)
    changing = {(state.current, state.next) for state in states if state.phase != STABLE}
    if len(changing) > 1:
        raise UnclearChange(
            "the nodes are in different changes: "
            + "; ".join(f"{', '.join(a)} -> {', '.join(b or ())}" for a, b in sorted(changing))
        )
    if changing:
        ((old, going_to),) = changing
        if going_to != target:
            raise UnclearChange(
                f"a change to {', '.join(going_to or ())} is under way; finish it first"
            )
    else:
        lists = {state.current for state in states} - {target}
        if not lists:  # every node is in stable(new): the change is over once closed
            draining = {url for state in states for url in state.draining or ()}
            if not draining:
                return target, []
            epoch = max(state.epoch for state in states)
            return tuple(sorted(set(target) | draining)), [TopologyState(epoch, STABLE, target)]
        if len(lists) > 1:
            raise UnclearChange(
                "the nodes are stable on different node lists: "
                + "; ".join(", ".join(nodes) for nodes in sorted(lists))
            )
        (old,) = lists
    positions = [(state, _position(state, old, target)) for state in states]
    least = min(at for _, at in positions)
    most = max(at for _, at in positions)
    if most - least > 1:
        raise UnclearChange(
            f"the nodes are more than one step apart, from {_STEP_NAMES[least]} to "
            f"{_STEP_NAMES[most]}: the steps between were never taken everywhere"
        )
    # A node started with --join is seeded as joint at epoch 0, so the count comes from
    # the others: each step adds one to it.
    epoch = max(state.epoch - at for state, at in positions)
    return old, change_steps(old, target, epoch)[max(most, 1) - 1 :]


_STEP_NAMES = ("stable(old)", "joint", "handoff", "stable(new)")


def _position(state: TopologyState, old: tuple[str, ...], new: tuple[str, ...]) -> int:
    """Where `state` is in the change from `old` to `new`: 0 for stable(old) up to 3 for
    stable(new)."""
    if state.phase == STABLE and state.current in (old, new):
        return 0 if state.current == old else 3
    if state.phase != STABLE and (state.current, state.next) == (old, new):
        return 1 if state.phase == JOINT else 2
    raise UnclearChange(
        f"a node is {state.phase} of {', '.join(state.current)}, which is no step of the "
        f"change from {', '.join(old)} to {', '.join(new)}"
    )


@dataclass(frozen=True)
class Risk:
    """For the keys written with `replicas=acks/copies`, the share of the key space where
    at least `acks` of the key's `copies` replicas are nodes a change removes
    (`removed`), and where at least `acks` are dead (`lost`): such a write may have been
    acknowledged by those nodes alone, so no node that stays, or none alive, has it."""

    acks: int
    copies: int
    removed: float
    lost: float


def data_at_risk(old: Ring, leaving: Collection[str], dead: Collection[str]) -> list[Risk]:
    """Per `A/F` (F from 1 to the ring's size, A up to F), the key space whose
    acknowledged writes may have no copy on a node that stays after a removal of
    `leaving` (the dead ones among them named in `dead`), and none alive at all; only
    the `A/F` where either is more than nothing."""
    gone, lost = set(leaving), set(dead)
    risks = []
    for copies in range(1, len(old) + 1):
        for acks in range(1, copies + 1):
            removed = without = 0.0
            for share, order in old.arcs():
                replicas = order[:copies]
                if sum(node in gone for node in replicas) >= acks:
                    removed += share
                    if sum(node in lost for node in replicas) >= acks:
                        without += share
            if removed > 0:
                risks.append(Risk(acks, copies, removed, without))
    return risks
