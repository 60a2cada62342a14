"""Which repair loops run when: anti-entropy and tombstone collection run only while the
membership is stable, over the current ring, with Merkle trees loaded from a snapshot
taken as they are made. Between two rings a tree shared with a peer has no meaning, and
a tombstone collected then could let a handed-off value come back; so a membership step
stops them, and the step that makes the membership stable again makes fresh ones.
Collection waits longer: until the change is closed, since a node that left, or one
that has not finished handing off what it no longer owns, may still hold an older value
(found by the simulator, seed 286)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dht.config import NodeConfig
from dht.model.clock import HybridClock
from dht.model.machine import SYSTEM, Machine
from dht.model.merkle import MerkleTrees
from dht.model.topology import STABLE
from dht.replication.anti_entropy import AntiEntropy
from dht.replication.collector import Collector
from dht.storage.digest_changes import DigestChanges
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.peers import Peers

# What answers a peer's anti-entropy exchange (a request to this node).
ExchangeAnswerer = Callable[[dict[str, Any]], dict[str, Any]]


class ExchangeAnswers:
    """Who answers a peer's anti-entropy exchange now: the current anti-entropy while
    the membership is stable, else no one (the HTTP layer answers 503). The node gives
    one to the HTTP layer that takes the requests and to the repair loops that change
    it at each step."""

    __slots__ = ("answerer",)

    def __init__(self) -> None:
        self.answerer: ExchangeAnswerer | None = None

    def answer_with(self, answerer: ExchangeAnswerer | None) -> None:
        self.answerer = answerer


class RepairLoops:
    def __init__(
        self,
        config: NodeConfig,
        storage: Storage,
        digest_changes: DigestChanges,
        membership: Membership,
        peers: Peers,
        clock: HybridClock,
        exchanges: ExchangeAnswers,
        machine: Machine = SYSTEM,
    ) -> None:
        """`digest_changes` is the one `storage` publishes to, and `exchanges` the one
        the HTTP layer asks who answers a peer's exchange: the trees are attached to
        the first, and their anti-entropy to the second, while the membership is
        stable."""
        self._config = config
        self._storage = storage
        self._digest_changes = digest_changes
        self._membership = membership
        self._peers = peers
        self._clock = clock
        self._exchanges = exchanges
        self._machine = machine
        self.anti_entropy, self.collector = self._made()

    def _made(self) -> tuple[AntiEntropy, Collector]:
        """Anti-entropy and tombstone collection over the current ring, with Merkle trees
        loaded from a snapshot taken now; hooked to storage and to the exchanges only
        while the membership is stable."""
        trees = MerkleTrees(self._membership.topology.current, self._config.self_url)
        anti_entropy = AntiEntropy(
            self._config.self_url,
            self._storage,
            trees,
            self._peers,
            self._clock,
            self._config.anti_entropy_interval,
            self._config.anti_entropy_rate,
            self._config.tombstone_grace,
            self._config.max_clock_drift,
            self._machine,
        )
        collector = Collector(
            self._storage,
            trees,
            anti_entropy.exchanged_since,
            self._clock.wall_ms,
            self._config.tombstone_grace,
        )
        if self._membership.phase == STABLE:  # else they stay unhooked (and unstarted)
            self._digest_changes.listen(trees.change)  # after the snapshot the trees load
            self._exchanges.answer_with(anti_entropy.answer)
        return anti_entropy, collector

    def renew(self) -> None:
        """Fresh loops on the current ring (after `stop`, on a step to a stable phase)."""
        self.anti_entropy, self.collector = self._made()

    def start(self) -> None:
        """Anti-entropy on a stable ring; tombstone collection once the change that made
        it is closed too: until every node of the change confirmed its last handoff (or
        was named dead), one of them may hold an older value of a key whose tombstone
        would go (SPEC 13.3). Neither on a node that left: it shares no tree with the
        ring, and its exchanges, refused, would open the circuits its handoff needs."""
        state = self._membership.state
        if state.phase != STABLE or self._config.self_url not in state.current:
            return  # between two rings, or a node that left: it only hands off
        self.anti_entropy.start()
        if state.closed:
            self.collector.start()

    @property
    def waiting_for(self) -> list[str]:
        """The nodes tombstone collection waits for: those of the last change that may
        still hold records to hand off."""
        return list(self._membership.state.draining or ())

    async def stop(self) -> None:
        self._digest_changes.listen(None)
        self._exchanges.answer_with(None)
        await self.collector.close()
        await self.anti_entropy.close()
