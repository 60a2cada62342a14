"""The fences: a node that must not answer clients from its own data stops serving them.

Removed (SPEC.md rule 13.9). A node that was down or cut off while the others removed it
(`membership --dead`) comes back in the step it had: its own ring, its own data,
possibly stale. Its peers already refuse its replica calls, hints and anti-entropy, since
it shares no ring with them (rule 11.5); this makes it say so to its clients too, instead
of answering from its own data. When a peer is at a later step that leaves it out, or
its own step does (a removal it took part in), it is fenced: saved in `fenced.json` in
its data folder, so a restart stays fenced, until an operator wipes the folder (and, to
bring the machine back, joins it again with `--join`).

Its clock off (rule 9.13). Every answer it gets carries the peer's wall clock
(CLOCK_HEADER), which bounds the offset between the two clocks by the round trip
(`dht.model.clock_offset`). When the peers whose clocks are off from its own by more than
`--max-clock-drift` are more than half of the cluster, its writes would be refused by
them (or theirs by it) while it answered reads with its own; when those behind it are
at least as many as the nodes that answered with it, and not each of them is known to
have jumped back (`_moved_back`), its writes refused by them would stay in its own copy
ahead of later ones. Either way it stops serving clients until a later look finds its
clock back within the bound. Not saved: a restart looks again before it serves.

Both come from one look, at start before the node serves and every `interval` after:
every peer asked for its membership step at once (`GET /v0/admin/topology`). Until every
peer has answered once (peers started at the same moment as this node), the look comes
every ASK_AGAIN instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from dht.limits import FIRST_CHECK_SECONDS, LATEST_CLOCK_MS, MAX_DRIFT_RATE
from dht.model.clock_offset import Offset, clock_fence
from dht.model.machine import SYSTEM, Machine
from dht.model.topology import TopologyState, removed
from dht.replication.background import OwnedTask
from dht.storage.membership import Membership, save_json
from dht.transport.peers import Peer, PeerError, Peers
from dht.transport.wire import CLOCK_HEADER, TOPOLOGY_PATH

log = logging.getLogger(__name__)

FENCE_FILE = "fenced.json"
CHECK_INTERVAL = 5.0
# How soon the watch looks again while a peer has never answered: peers started with
# this node (a whole cluster at once) open their ports a moment after its first look.
ASK_AGAIN = 0.1
# What clients hear while a starting node's first look waits for a peer slower than
# FIRST_CHECK_SECONDS (a slow link): it serves no one before it knows (found by review).
STARTING = (
    "this node is starting: it is asking its peers for their membership step and clock "
    "before it serves (SPEC.md rules 9.13 and 13.9); try again in a moment"
)


def saved_fence(data_dir: Path) -> str | None:
    """The reason this node was fenced, if it was (and its folder was not wiped since)."""
    try:
        reason = json.loads((data_dir / FENCE_FILE).read_bytes())["reason"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"this node was removed from the cluster ({FENCE_FILE} unreadable: {exc})"
    return str(reason)


class FenceWatch:
    """`fence` hears the reason clients are refused whenever it changes (None: served);
    `wall_ms` is this node's wall clock, `max_drift_ms` the bound on its offset."""

    def __init__(
        self,
        self_url: str,
        data_dir: Path,
        membership: Membership,
        peers: Peers,
        fence: Callable[[str | None], None],
        wall_ms: Callable[[], int],
        max_drift_ms: int,
        patience: float,
        interval: float = CHECK_INTERVAL,
        machine: Machine = SYSTEM,
    ) -> None:
        """`patience`: how long the look after a start waits for a peer that did not
        answer the first one in time (the node's --timeout); `machine`: its monotonic
        clock times the round trips."""
        self._self_url = self_url
        self._path = data_dir / FENCE_FILE
        self._membership = membership
        self._peers = peers
        self._fence = fence
        self._wall_ms = wall_ms
        self._max_drift_ms = max_drift_ms
        self._interval = interval
        self._patience = patience
        self._monotonic_ns = machine.monotonic_ns
        self.starting: str | None = None  # clients wait for a slow peer's first answer
        self.fenced: str | None = saved_fence(data_dir)  # removed: for good
        self.clock_fenced: str | None = None  # its clock off: until it is back
        # Each peer's offset as the last look measured it (None: no answer, or no clock).
        self.offsets: dict[str, Offset | None] = {}
        self._answered: set[str] = set()  # peers that answered at least once
        # Each peer's offset at its last answer that said within or beyond the bound,
        # with this node's wall clock minus its monotonic one (ms) and its monotonic
        # time (ns) at that look; and the peers seen to jump back past the bound since
        # (clock_offset.clock_fence's `behind_moved`), until they are within it again:
        # the same two figures at the jump's look, and how far the peer moved (ms).
        self._last: dict[str, tuple[Offset, int, int]] = {}
        self._moved_back: dict[str, tuple[int, int, int]] = {}
        self._task = OwnedTask("fence", self._run)
        if self.fenced is not None:
            fence(self.fenced)  # removed before this start: clients are refused at once

    @property
    def refusal(self) -> str | None:
        """Why clients are refused now, if they are."""
        return self.fenced or self.clock_fenced or self.starting

    def status(self) -> dict[str, Any]:
        """For /v0/status: the clock fence's reason, the bound, each peer's offset."""
        return {
            "fenced": self.clock_fenced,
            "max_drift": self._max_drift_ms / 1000,
            "offsets": {
                url: None if offset is None else offset.to_json()
                for url, offset in self.offsets.items()
            },
        }

    async def first_check(self) -> None:
        """Before the node serves: one look, bounded by FIRST_CHECK_SECONDS, so a node
        removed while it was away never answers a client from its stale data, nor one
        whose clock is off from its peers' with its refused writes. A peer that did not
        answer by then (a slow link; one that is down refuses at once) holds clients
        off (STARTING) until the watch's first look, which waits `patience` for it."""
        unanswered = await self.check(FIRST_CHECK_SECONDS)
        if unanswered and self.refusal is None:
            self.starting = STARTING
            self._fence(self.refusal)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        if self.starting is not None:
            await self.check(self._patience)
            self.starting = None
            self._fence(self.refusal)
        while self.fenced is None:
            await self.check()
            waiting = not set(self._peers.by_url) <= self._answered
            await asyncio.sleep(ASK_AGAIN if waiting else self._interval)

    async def check(self, within: float | None = None) -> int:
        """One look: this node's own step, then every peer's that answers within
        `within` seconds, asked all at once (one a step behind, or removed with it, says
        nothing; one that removed it does), and the clocks of those that answered.
        Returns how many peers were still to answer when `within` ran out."""
        own = self._membership.state
        if removed(own, None, self._self_url):
            self._set(f"this node was removed from the cluster (its step, epoch {own.epoch})")
            return 0
        peers = list(self._peers.by_url.items())
        # This node's clock as the asks leave: a step of it while they are out is a
        # step since this look, seen at the next one (found by review). Its monotonic
        # part rounded up, so that a send time taken from it is never later than the
        # send (the offset's interval holds).
        monotonic_ns = self._monotonic_ns()
        base = (self._wall_ms() - -(-monotonic_ns // 1_000_000), monotonic_ns)
        asks = [asyncio.ensure_future(self._ask(peer, base[0])) for _, peer in peers]
        try:
            return await self._judge(peers, asks, within, base)
        finally:
            # Whether this look ended, returned early or was cancelled (the node
            # stopping): no ask outlives it, and none fails unseen (found by review:
            # "Task exception was never retrieved" at a stop).
            for ask in asks:
                if not ask.done():
                    ask.cancel()
                elif not ask.cancelled():
                    ask.exception()

    async def _judge(
        self,
        peers: list[tuple[str, Peer]],
        asks: list[asyncio.Task[tuple[Any, Offset | None]]],
        within: float | None,
        base: tuple[int, int],
    ) -> int:
        if asks:
            await asyncio.wait(asks, timeout=within)
        offsets: dict[str, Offset | None] = {}
        unanswered = 0
        for (url, _), ask in zip(peers, asks, strict=True):
            offsets[url] = None
            if not ask.done():
                unanswered += 1
                continue
            try:
                step, offset = ask.result()
                theirs = TopologyState.from_json(step)
            except (PeerError, ValueError, aiohttp.ClientError, asyncio.CancelledError):
                continue
            self._answered.add(url)
            offsets[url] = offset
            if removed(self._membership.state, theirs, self._self_url):
                self._set(
                    f"this node was removed from the cluster at epoch {theirs.epoch} (as "
                    f"{url} says, which serves {', '.join(theirs.current)}), or started "
                    "with a --cluster its peers do not list; its data may be stale. Wipe "
                    "its data folder, and start it with --join to bring it back"
                )
                return 0
        self._judge_clock(offsets, base)
        return unanswered

    async def _ask(self, peer: Peer, skew_ms: int) -> tuple[Any, Offset | None]:
        """A peer's step, and its clock's offset from this one's when it says its clock.
        The round trip is timed on the monotonic clock, so a step of the wall clock
        while the answer travels cannot shrink the interval."""
        started = self._monotonic_ns()
        sent_ms = skew_ms + started // 1_000_000
        step, headers = await peer.get_json(TOPOLOGY_PATH)
        received_ms = sent_ms + -(-(self._monotonic_ns() - started) // 1_000_000)  # rounded up
        return step, _offset(headers, sent_ms, received_ms)

    def _judge_clock(self, offsets: dict[str, Offset | None], base: tuple[int, int]) -> None:
        """`base`: this node's wall minus monotonic clock (ms) and its monotonic clock
        (ns) as the look's asks left."""
        self.offsets = offsets
        nodes = self._membership.state.members | {self._self_url}
        measured = {
            url: offset for url, offset in offsets.items() if offset is not None and url in nodes
        }
        behind = [url for url, offset in measured.items() if offset.high_ms < -self._max_drift_ms]
        self._forget_old_moves(base)
        for url, offset in measured.items():
            self._note_move(url, offset, base)
        behind_moved = bool(behind) and all(
            self._only_its_move(url, measured[url]) for url in behind
        )
        reason = clock_fence(measured.values(), len(nodes), self._max_drift_ms, behind_moved)
        before, self.clock_fenced = self.clock_fenced, reason
        if reason != before:  # fenced, lifted, or the offset it says moved
            self._fence(self.refusal)
        if before is None and reason is not None:
            log.error("clock fenced: %s", reason)
        elif before is not None and reason is None:
            log.warning("clock fence lifted: this node's clock is within the bound again")

    def _memory_ns(self) -> float:
        """How long a peer's answer counts (MAX_DRIFT_RATE): 4 h 10 min at a 60 s bound."""
        return self._max_drift_ms / 4 / MAX_DRIFT_RATE * 1e6

    def _note_move(self, url: str, offset: Offset, base: tuple[int, int]) -> None:
        """Records `url`'s offset, and whether its clock just jumped back: within the
        bound at its last answer (recent enough that no drift of this node's clock
        since can pass for its move), behind past it now, by more than half the bound
        after taking away any step of this node's own clock."""
        bound = self._max_drift_ms
        skew_ms, monotonic_ns = base
        last = self._last.get(url)
        if offset.beyond(bound) or offset.within(bound):
            self._last[url] = (offset, skew_ms, monotonic_ns)  # not one too wide to say
        if not offset.beyond(bound):
            self._moved_back.pop(url, None)
            return
        if last is None or offset.high_ms >= -bound:
            return
        was, was_skew_ms, was_monotonic_ns = last
        recent = monotonic_ns - was_monotonic_ns <= self._memory_ns()
        stepped = abs(skew_ms - was_skew_ms) > bound // 2
        if recent and not stepped and was.within(bound):
            # Its clock minus this one fell by at least this much; a step of this
            # node's own clock ahead since accounts for that much of it.
            moved = offset.high_ms - was.low_ms + (skew_ms - was_skew_ms)
            if moved < -bound // 2:
                self._moved_back[url] = (skew_ms, monotonic_ns, moved)

    def _only_its_move(self, url: str, offset: Offset) -> bool:
        """Whether `url` is known to have jumped back, and is behind this node past the
        bound by no more than that jump: less its jump, it might be within the bound
        (found by review: a node within the bound but near it, whose peer then jumped
        back, could step ahead by under half the bound and be spared past it)."""
        move = self._moved_back.get(url)
        return move is not None and offset.high_ms - move[2] >= -self._max_drift_ms

    def _forget_old_moves(self, base: tuple[int, int]) -> None:
        """A jump back stops counting once this node's own clock has stepped by more
        than half the bound since it was seen, or could have drifted a quarter of it:
        then this node may have moved too (a mark kept for ever would hide a later
        step of this node's own clock ahead)."""
        skew_ms, monotonic_ns = base
        for url, (seen_skew_ms, seen_monotonic_ns, _) in list(self._moved_back.items()):
            stepped = abs(skew_ms - seen_skew_ms) > self._max_drift_ms // 2
            if stepped or monotonic_ns - seen_monotonic_ns > self._memory_ns():
                del self._moved_back[url]

    def _set(self, reason: str) -> None:
        self.fenced = reason
        self._fence(reason)  # first: a fence that cannot be saved still holds until exit
        log.error("fenced: %s", reason)
        try:
            save_json(self._path, {"reason": reason})
        except OSError as exc:
            log.error(
                "could not save the fence in %s (a restart would lift it): %s", self._path, exc
            )


def _offset(headers: Mapping[str, str], sent_ms: int, received_ms: int) -> Offset | None:
    """The offset an answer's clock header gives, None without one (a node of another
    implementation, say) or with one that is not a number."""
    clock = headers.get(CLOCK_HEADER)
    if clock is None:
        return None
    try:
        theirs = int(clock)
        if not 0 < theirs < LATEST_CLOCK_MS:
            raise ValueError("no time")
        return Offset.measured(theirs, sent_ms, received_ms)
    except ValueError:
        log.warning("a peer's %s header is not milliseconds: %r", CLOCK_HEADER, clock[:40])
        return None
