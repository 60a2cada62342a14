"""A membership step taken on this node, and what follows from it: peers for new members,
the repair loops stopped (and made afresh on a stable ring), the rebalance woken, and the
answer held until no client operation placed by the step before is still running. Also
what a node does with a replica write for a key it no longer owns."""

from __future__ import annotations

from dht.coordination.coordinator import Coordinator
from dht.membership.rebalance import Rebalance
from dht.model.merkle import holders
from dht.model.record import Record
from dht.model.topology import STABLE, BadTransition, TopologyState
from dht.replication.repair_loops import RepairLoops
from dht.storage.membership import Membership
from dht.transport.peers import Peers


class StepApplier:
    def __init__(
        self,
        self_url: str,
        membership: Membership,
        peers: Peers,
        repair_loops: RepairLoops,
        rebalance: Rebalance,
        coordinator: Coordinator,
        timeout: float,
    ) -> None:
        """`timeout` is a replica call's, which bounds how long a step waits."""
        self._self_url = self_url
        self._membership = membership
        self._peers = peers
        self._repair_loops = repair_loops
        self._rebalance = rebalance
        self._coordinator = coordinator
        self._timeout = timeout
        self.ring_share = membership.topology.current.shares()

    async def apply(self, proposed: TopologyState) -> bool:
        """Takes a step of a membership change (raises BadTransition if it is not the
        next one), then waits for the client operations placed by the step before; says
        whether they all ended within the deadline (the driver asks again if not)."""
        state = self._membership.state
        left = self._self_url not in state.members and not state.joining_seed
        if left and not state.same_step(proposed):  # the close of its own change it takes
            raise BadTransition(
                f"this node was removed from the cluster (epoch {state.epoch}): it takes no "
                "step with the data it kept, which may be older than deletes made since; "
                "wipe its data folder and start it with --join to add it again"
            )
        if self._membership.apply(proposed):
            self._peers.ensure(proposed.members, self._membership.identity)
            self.ring_share = self._membership.topology.current.shares()
            await self._repair_loops.stop()
            if proposed.phase == STABLE:  # on the new ring, from fresh trees
                await self._peers.retire(proposed.members)
                self._repair_loops.renew()
                self._repair_loops.start()
            self._rebalance.wake()
        return await self._coordinator.drain(proposed.epoch, 2 * self._timeout + 1.0)

    def hand_off_if_not_owned(self, key: bytes, record: Record) -> None:
        """A replica write to a node that does not own the key under its stable
        membership: a node a step behind sent it (or a hint came late) after the handoff
        had passed. The handoff looks again, so the record ends on its owners only."""
        if self._membership.state.epoch == 0 or self._membership.phase != STABLE:
            return  # never changed: every write comes to an owner; mid-change: handoff runs
        if self._self_url not in holders(self._membership.topology.current, key, record.copies):
            self._rebalance.wake()
