"""Anti-entropy: in the background, this node compares with each peer the records they
both hold and exchanges the ones that differ, newest wins both ways.

Why incremental trees rather than trees rebuilt from a snapshot: the per-peer trees
(dht/model/merkle.py) are kept current by every write (storage calls `MerkleTrees.change` with
the digest it replaced and the one it wrote, an XOR per peer), so an exchange reads no
record it does not send and costs no scan at all: O(differences x LEAF_BITS) hashes, one
key list per differing leaf, one record per differing key. The only full read is at
start, of the digest index (not the values), in the background; until it is done this
node neither starts nor answers exchanges.

An exchange, started by either side every `--anti-entropy-interval` seconds per peer:
1. the trees, level by level from the root, both sides' hashes of the nodes under the
   ones that differed (one request per level, `LEAF_BITS + 1` at most);
2. for the differing leaves, the peer's (key, version, digest) list, compared with ours;
3. for each key that differs, both records (ours from storage, the peer's on the replica
   channel); the newest is written where it is missing or older (put-if-newer both
   ways), at most `--anti-entropy-rate` records a second. A record the peer refuses as
   too far ahead of its clock (rule 8.4) is counted and left for the next exchange; the
   exchange goes on with the others (one such record must not stop every repair).
A completed exchange is what lets tombstones go (dht/replication/collector.py): it records when it
started, and every record that had arrived then (large writes still in the writer thread
are waited for) is on both sides once it completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from dht.model.clock import HybridClock, VersionAhead
from dht.model.machine import Machine
from dht.model.merkle import LEAF_BITS, Digest, MerkleTrees, differing_children
from dht.model.record import Record, newest
from dht.replication.background import OwnedTask
from dht.storage.disk import DiskFull
from dht.storage.store import Storage
from dht.transport.peers import PeerError, Peers, VersionRefused
from dht.transport.wire import EXCHANGE_PATH

log = logging.getLogger(__name__)

LEAVES_PER_REQUEST = 64
_LOAD_BATCH = 5_000


@dataclass(slots=True)
class ExchangeStats:
    """What `/v0/status` shows of the exchanges with one peer."""

    exchanges: int = 0
    last_completed: float | None = None  # Unix time
    # This node's wall clock when the last completed one began in which the peer took
    # every record it was offered (what tombstone collection waits for).
    last_started_ms: int = 0
    leaves_compared: int = 0  # in the last completed exchange
    leaves_differing: int = 0
    records_sent: int = 0  # over every exchange
    records_received: int = 0
    records_refused: int = 0  # ours, which the peer refused as too far ahead of its clock
    last_error: str | None = None


class AntiEntropy:
    def __init__(
        self,
        self_url: str,
        storage: Storage,
        trees: MerkleTrees,
        peers: Peers,
        clock: HybridClock,
        interval: float,
        rate: float,
        tombstone_grace: float,
        max_clock_drift: float,
        machine: Machine,
    ) -> None:
        """`machine`: its clocks pace the exchanges and time them."""
        self._self_url = self_url
        self._machine = machine
        self._storage = storage
        self._trees = trees
        self._peers = peers
        self._clock = clock
        self.interval = interval
        self._rate = rate
        self._withheld_after_ms = withheld_after_ms(
            round(tombstone_grace * 1000), round(max_clock_drift * 1000)
        )
        self.ready = False
        self.stats = {url: ExchangeStats() for url in trees.leaves}
        self._task = OwnedTask("anti-entropy", self._run)
        # Read before any write can reach the trees: a write that lands after this
        # snapshot is counted once by `change` and once (as what it replaced) here; the
        # batch in the writer thread now counts as it was before it, whether or not
        # LevelDB's snapshot holds it already (`landed_digests`).
        self._stored_digests = storage.landed_digests()

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    def status(self, url: str) -> dict[str, Any]:
        return asdict(self.stats.get(url) or ExchangeStats())  # a peer off this ring: none

    def exchanged_since(self, url: str) -> int | None:
        """When the last completed exchange with `url` in which it took every record
        offered began (wall ms), if one did."""
        stats = self.stats.get(url)
        return stats.last_started_ms or None if stats else None

    async def _run(self) -> None:
        started = self._machine.monotonic()
        loaded = await self._load_trees()
        self.ready = True
        log.info(
            "anti-entropy: trees of %d records ready in %.2f s",
            loaded,
            self._machine.monotonic() - started,
        )
        if self.interval <= 0:
            return
        while True:
            await asyncio.sleep(self.interval)
            for url in self.stats:
                try:
                    await self.exchange(url)
                except Exception:  # a bug, or a peer's answer this code cannot read
                    self.stats[url].last_error = "unexpected error (see the log)"
                    log.exception("anti-entropy with %s failed", url)

    async def _load_trees(self) -> int:
        """Every stored digest into the trees, a batch per loop turn. Writes that land
        meanwhile go into the trees too; the iterator reads a snapshot, and XOR makes
        the two add up to the current state whatever their order."""
        count = 0
        batch: list[tuple[bytes, Digest]] = []
        for item in self._stored_digests:
            batch.append(item)
            if len(batch) >= _LOAD_BATCH:
                count += self._trees.load(batch)
                batch = []
                await asyncio.sleep(0)
        return count + self._trees.load(batch)

    # -- one exchange ------------------------------------------------------------------

    async def exchange(self, url: str) -> None:
        """One exchange with `url`; a failure is logged and counted, and the next round
        tries again."""
        stats = self.stats[url]
        started_ms = self._clock.wall_ms()
        await self._storage.writes_landed()  # they arrived before `started_ms`
        refused_before = stats.records_refused
        try:
            compared, differing = await self._differing_leaves(url)
            for first in range(0, len(differing), LEAVES_PER_REQUEST):
                await self._reconcile_leaves(url, differing[first : first + LEAVES_PER_REQUEST])
        except PeerError as exc:
            stats.last_error = str(exc)
            log.info("anti-entropy with %s did not complete: %s", url, exc)
            return
        stats.exchanges += 1
        stats.last_completed = self._machine.wall()
        refused = stats.records_refused - refused_before
        if not refused:
            # Only an exchange that left every record on both sides lets tombstones go:
            # one the peer refused may be dead here and live, older, there.
            stats.last_started_ms = started_ms
        stats.leaves_compared, stats.leaves_differing = compared, len(differing)
        stats.last_error = None
        if differing:
            log.info("anti-entropy with %s: %d leaves differed", url, len(differing))
        if refused:
            log.warning(
                "anti-entropy with %s: %d records refused by it as too far ahead of its "
                "clock; kept here, offered again in the next exchange",
                url,
                refused,
            )

    async def _differing_leaves(self, url: str) -> tuple[int, list[int]]:
        """Descends both trees from the root into the subtrees that differ; returns how
        many leaves were compared and which differ."""
        nodes = [0]
        for level in range(LEAF_BITS + 1):
            answer = await self._ask(url, {"op": "hashes", "level": level, "nodes": nodes})
            theirs = [bytes.fromhex(h) for h in answer["hashes"]]
            ours = self._trees.hashes(url, level, nodes)
            differing = [node for node, a, b in zip(nodes, ours, theirs, strict=True) if a != b]
            if level == LEAF_BITS:
                return len(nodes), differing
            nodes = differing_children(level, differing)
            if not nodes:
                return 0, []
        raise AssertionError("unreachable")

    async def _reconcile_leaves(self, url: str, leaves: list[int]) -> None:
        answer = await self._ask(url, {"op": "digests", "leaves": leaves})
        theirs = {bytes.fromhex(k): (v, d) for k, v, d in answer["entries"]}
        ours = {key: (e.version, e.digest) for key, e in self._shared_digests(url, leaves)}
        pace = Pace(self._rate, self._machine.monotonic)  # --anti-entropy-rate
        for key in sorted(theirs.keys() | ours.keys()):
            if theirs.get(key) == ours.get(key):
                continue
            # Even a record of ours past its grace that they do not list: they may hold
            # an older version they do not share with us, which this exchange must
            # replace before the collector may count it (_reconcile copies nothing to
            # a side that has no record).
            await pace.step()
            await self._reconcile(url, key)

    async def _reconcile(self, url: str, key: bytes) -> None:
        """Newest wins both ways: the peer's record here if newer, ours there if newer."""
        peer = self._peers[url]
        theirs = await peer.get(key)
        ours = self._storage.get(key)
        winner = newest([ours, theirs])
        if winner is None or (self._withheld(winner) and None in (ours, theirs)):
            # A record dead long enough is not copied to a side that has none (to that
            # side it reads the same): the collector on the other side removes it, where
            # otherwise the two would hand it back and forth between collections.
            return
        if winner != ours and winner.supersedes(ours):
            if self._store(url, key, winner):
                self.stats[url].records_received += 1
        if winner != theirs and winner.supersedes(theirs):
            try:
                stored = await peer.put(key, winner)
            except VersionRefused:
                self.stats[url].records_refused += 1
                return
            if stored:
                self.stats[url].records_sent += 1

    def _withheld(self, record: Record) -> bool:
        dead = record.dead_since()
        return dead is not None and self._clock.wall_ms() - dead > self._withheld_after_ms

    def _store(self, url: str, key: bytes, record: Record) -> bool:
        try:
            self._clock.observe(record.version)
            stored = self._storage.write(key, record)
        except (VersionAhead, DiskFull) as exc:
            log.warning("anti-entropy: did not take %r from %s: %s", key, url, exc)
            return False
        if isinstance(stored, bool):
            return stored
        stored.add_done_callback(_log_if_failed)  # a large value lands in its thread
        return True

    async def _ask(self, url: str, message: dict[str, Any]) -> dict[str, Any]:
        answer = await self._peers[url].post_json(EXCHANGE_PATH, message | {"peer": self._self_url})
        if not answer.get("ready", True):
            raise PeerError(f"{url}: its trees are not loaded yet")
        return answer

    # -- the peer's side ---------------------------------------------------------------

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        """An exchange request from a peer (EXCHANGE_PATH): this node's hashes of the
        tree it shares with that peer, or its digests of some leaves."""
        peer = message.get("peer")
        if peer not in self.stats:
            raise ValueError(f"{peer!r} is not a peer of this node")
        if not self.ready:
            return {"ready": False}
        if message.get("op") == "hashes":
            hashes = self._trees.hashes(peer, int(message["level"]), message["nodes"])
            return {"hashes": [h.hex() for h in hashes]}
        if message.get("op") == "digests":
            entries = self._shared_digests(peer, message["leaves"])
            return {"entries": [[k.hex(), e.version, e.digest] for k, e in entries]}
        raise ValueError(f"unknown anti-entropy op {message.get('op')!r}")

    def _shared_digests(self, url: str, leaves: list[int]) -> list[tuple[bytes, Digest]]:
        return [
            (key, entry)
            for leaf in leaves
            for key, entry in self._storage.digests(leaf)
            if url in self._trees.sharing(key, entry.copies)
        ]


class Pace:
    """At most `rate` steps a second: a step waits only when the ones before it came
    faster than that, so the work of a step is not added on top of the pause."""

    def __init__(self, rate: float, monotonic: Callable[[], float]) -> None:
        self._interval = 1.0 / rate
        self._monotonic = monotonic
        self._next = monotonic()

    async def step(self) -> None:
        now = self._monotonic()
        if self._next > now:
            await asyncio.sleep(self._next - now)
        self._next = max(self._next, now) + self._interval


def withheld_after_ms(grace_ms: int, max_drift_ms: int) -> int:
    """How long a record must have been dead, by its version's time on this node's
    clock, before an exchange stops copying it to a peer that holds no record of the key:
    the grace, and at least half the grace plus twice `--max-clock-drift`.

    Why: once withheld, the peer may still receive an older value of the key by a hint,
    and the tombstone's holders may collect it (rule 9.10) while nothing newer is there.
    A hint lands at most `--hint-max-age` (half the grace) after it was made, by its
    holder's own clock; it was made when the older value was written, and so, on the
    clock of the node that wrote it, before the tombstone's version. This node's clock
    may be ahead of that one by up to twice the drift (each is within the drift of the
    majority's, rule 9.13): judged by the grace alone, a tombstone was withheld before a
    hint could still land whenever the grace was under four times the drift. Not the
    arrival here instead (as the collector judges): a record handed to a
    peer arrives there anew, so two nodes judging by their own arrivals can hand a
    tombstone back and forth for as long as they exchange."""
    return max(grace_ms, grace_ms // 2 + 2 * max_drift_ms)


def _log_if_failed(write: asyncio.Future[bool]) -> None:
    if not write.cancelled() and (error := write.exception()) is not None:
        log.warning("anti-entropy: a large record did not land: %s", error)
