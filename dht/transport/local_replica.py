"""This node as a replica: what it does when a peer reads or writes one of its records
over the replica channel (SPEC.md section 11). The channel's server end
(`dht.transport.channel_server.ServerConnection`) calls it, as its `ReplicaService`.

A replica read or write touches this node's storage only: it never coordinates or
forwards anything. Every version received is bounded by the clock
(`HybridClock.observe`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dht.model.clock import HybridClock, VersionAhead
from dht.model.log_limits import RateLimitedLog
from dht.model.machine import SYSTEM, Machine
from dht.model.record import Record
from dht.storage.disk import DiskFull
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.channel_server import ReplicaRefusal
from dht.transport.messages import PROTOCOL_VERSION, Hello, Why
from dht.transport.proof import Side, new_nonce, proof

log = logging.getLogger(__name__)


class LocalReplica:
    """The `ReplicaService` of `dht.transport.channel_server`, on this node's storage."""

    def __init__(
        self,
        storage: Storage,
        clock: HybridClock,
        secret: str | None,
        membership: Membership,
        on_stored: Callable[[bytes, Record], None] | None = None,
        machine: Machine = SYSTEM,
    ) -> None:
        """`on_stored` is told of every replica write once stored (the handoff looks for
        records this node does not own: `StepApplier.hand_off_if_not_owned` in
        dht.membership.step); `machine`: the randomness of its handshakes' nonces."""
        self._random_bytes = machine.random_bytes
        self._storage = storage
        self._clock = clock
        self._secret = secret
        self._membership = membership
        self._refusals = RateLimitedLog(log)
        self._on_stored = on_stored

    def admit(self, hello: Hello) -> str | None:
        if hello.version != PROTOCOL_VERSION:
            return (
                f"protocol version {hello.version} is not this node's {PROTOCOL_VERSION}: "
                "run the same dht version on every node"
            )
        if (refused := self._refused_sender(hello.sender)) is not None:
            return refused
        if not self._membership.shares_ring(hello.ring):
            return (
                f"ring identity {hello.ring} shares no ring with this node's "
                f"{self._membership.identity}: the nodes were started with different "
                "--cluster lists or --vnodes, or are two steps of a membership change apart"
            )
        return None

    def nonce(self) -> bytes:
        return new_nonce(self._random_bytes)

    def proof(self, side: Side, hello: Hello, server_nonce: bytes) -> bytes:
        return proof(self._secret, side, hello.nonce, server_nonce, hello.sender, hello.ring)

    def rpc_get(self, key: bytes) -> Record | None:
        return self._storage.get(key)

    def _refused_sender(self, sender: str) -> str | None:
        state = self._membership.state
        if not state.refuses_replica(sender):
            return None
        return (
            f"{sender} was removed from the cluster (epoch {state.epoch}"
            + (", named dead" if sender in state.dead else "")
            + "): what it holds is not taken; wipe its data folder and join it again "
            "with --join to bring it back"
        )

    def rpc_put(self, key: bytes, record: Record, sender: str) -> bool | asyncio.Future[bool]:
        """Stores a peer's record if newer; refuses it from a node removed since the
        channel was opened (its HELLO was admitted before the change closed)."""
        if (refused := self._refused_sender(sender)) is not None:
            self._refusals.warning("removed", "refused a replica write of %r: %s", key, refused)
            raise ReplicaRefusal(Why.DECLINED, refused)
        try:
            self._clock.observe(record.version)
            stored = self._storage.write(key, record)
        except VersionAhead as exc:
            self._refusals.warning("version-ahead", "refused a replica write of %r: %s", key, exc)
            raise ReplicaRefusal(Why.VERSION_AHEAD, str(exc)) from None
        except DiskFull as exc:  # the record's bytes, or the clock's ceiling (SPEC 8.7)
            raise ReplicaRefusal(Why.NO_SPACE, str(exc)) from None
        on_stored = self._on_stored
        if isinstance(stored, bool):
            if on_stored is not None:
                on_stored(key, record)
            return stored
        if on_stored is not None:
            stored.add_done_callback(lambda _: on_stored(key, record))
        return _refusing_for_space(stored)


def _refusing_for_space(write: asyncio.Future[bool]) -> asyncio.Future[bool]:
    """`write`'s outcome, a full volume as the refusal the channel answers for it. A
    callback, not a task: every replica write takes this way with the group commit."""
    answer: asyncio.Future[bool] = write.get_loop().create_future()

    def landed(_: asyncio.Future[bool]) -> None:
        if answer.done():
            return
        if write.cancelled():
            answer.cancel()
        elif (error := write.exception()) is None:
            answer.set_result(write.result())
        elif isinstance(error, DiskFull):
            answer.set_exception(ReplicaRefusal(Why.NO_SPACE, str(error)))
        else:
            answer.set_exception(error)

    write.add_done_callback(landed)
    return answer
