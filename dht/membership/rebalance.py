"""The rebalance: after a membership change, this node streams the records whose replica
set it has left, or that a new owner lacks, to their new owners. SPEC.md section 13
calls it the handoff (its phase, `handoff.json`, and `handoff` in `/v0/status` keep
that name, which users see); here it is the rebalance, apart from hinted handoff
(`dht.replication.hints`).

A pass reads the local records in key order, a batch at a time, and sends each to the
owners that need it under the ring it moves to:

- in the handoff phase, to the next ring: a record this node keeps goes to its owners
  that were not owners before (the others already hold it); a record this node leaves
  goes to every owner in the next ring. When the change names dead nodes (gone for
  good, `membership --dead`), which hand nothing off, the records they held reach their
  new owners from the copies the nodes that stay have: of the old owners that keep a
  record, only the first sends it, once, but first it reads the key from the other
  keepers and sends the newest copy (and keeps it itself): the dead node may have taken
  a write with one keeper while the first was away, and that keeper alone has it. Each
  other keeper reads the first one's copy, and sends its own (to the first too) only
  when the first has none or an older one: a key the first never had still moves;
- in a stable phase, to the current ring: a record this node does not own (written to it
  during the change, or handed to it late) goes to every owner.

A record this node leaves is deleted only once every one of its new owners acknowledged
it, and only if no write replaced it meanwhile. One batch is on the wire at a time (the
back-pressure: a slow receiver slows the stream), batches are paced to `rate` records a
second, and a batch that a receiver did not take is sent again after a pause. After every
batch the last key is saved (`handoff.json`), so a node killed mid-stream resumes after
it, under the same membership step, instead of from the first key.

A record a receiver refuses as too far ahead of its clock (rule 8.4) is not sent again
in the pass: retried, it would hold the handoff, and the change, until the receiver's
clock comes within reach of it, a year if the version says so. The record stays here,
never deleted, and is counted (`kept`) and logged; the pass goes on and completes. No
acknowledged write is at stake: nodes that enforce the bound never took it. In a stable
step, where such a record is on a node that does not own it, the kept records are
offered again after a pause that doubles up to `MAX_KEPT_PAUSE`, so each reaches its
owners once their clocks allow it; a record this node still owns reaches the owner that
refused it by anti-entropy, which offers it again at every exchange.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dht.model.machine import SYSTEM, Machine
from dht.model.merkle import holders
from dht.model.record import Record, newest
from dht.model.ring import Ring
from dht.model.topology import HANDOFF, JOINT, STABLE, TopologyState
from dht.replication.anti_entropy import Pace
from dht.replication.background import OwnedTask
from dht.storage.disk import DiskFull
from dht.storage.membership import Membership, save_json
from dht.storage.store import Storage
from dht.transport.peers import PeerError, Peers, VersionRefused

log = logging.getLogger(__name__)

PROGRESS_FILE = "handoff.json"
BATCH_RECORDS = 128
BATCH_BYTES = 1024 * 1024
RETRY_PAUSE = 0.5
MAX_RETRY_PAUSE = 5.0
# Kept records (refused as too far ahead) are offered again after these pauses, doubling.
KEPT_PAUSE = 1.0
MAX_KEPT_PAUSE = 60.0


@dataclass
class TargetProgress:
    records_sent: int = 0
    bytes_sent: int = 0
    failures: int = 0
    refused: int = 0  # records it refused as too far ahead of its clock
    last_error: str | None = None


@dataclass
class Progress:
    """One membership step's handoff, as saved after every batch."""

    epoch: int = -1
    cursor: str | None = None  # hex of the last key handed off (None: none yet)
    done: bool = False
    scanned: int = 0
    deleted: int = 0
    # Records of this pass that a receiver refused as too far ahead, kept here.
    kept: int = 0
    targets: dict[str, TargetProgress] = field(default_factory=dict)
    # The dead nodes the pass decides by (which keeper sends a key depends on them).
    dead: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Progress:
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return cls()
        targets = {url: TargetProgress(**entry) for url, entry in data.pop("targets").items()}
        return cls(**data, targets=targets)


class _StepChanged(Exception):
    """The change's dead nodes changed during a pass: it starts again from the first
    key, with the new list (which keeper sends a key depends on it, so the keys already
    passed may have been left to a node that is dead now)."""


@dataclass(frozen=True, slots=True)
class _Move:
    key: bytes
    record: Record
    receivers: list[str]
    leaving: bool  # this node no longer owns it: delete once every receiver has it
    # The other old owners that keep it, when dead nodes leave: the newest of their
    # copies and this one's is what goes (`_newest_copies`).
    confirm_with: tuple[str, ...] = ()
    # The first keeper, for another keeper: this one sends only if that one's copy is
    # missing or older (`_newest_copies`).
    unless_held_by: str | None = None


class Rebalance:
    def __init__(
        self,
        self_url: str,
        data_dir: Path,
        storage: Storage,
        membership: Membership,
        peers: Peers,
        rate: float,
        machine: Machine = SYSTEM,
    ) -> None:
        """`machine`: its monotonic clock paces the streams (`rate` records a second)
        and times each pass."""
        self._self_url = self_url
        self._monotonic = machine.monotonic
        self._path = data_dir / PROGRESS_FILE
        self._storage = storage
        self._membership = membership
        self._peers = peers
        self.rate = rate
        self.progress = Progress.load(self._path)
        self.total = 0  # local records when the pass began
        self.streaming = False
        # The keys behind `progress.kept` that this process met (a restart forgets them;
        # its next full pass finds them again), and the pause before they are retried.
        self._kept: set[bytes] = set()
        self._kept_pause = KEPT_PAUSE
        self._pass_dead: frozenset[str] = frozenset()  # the dead nodes the pass began with
        self._wake = asyncio.Event()
        self._task = OwnedTask("handoff", self._run)

    def start(self) -> None:
        self._task.start()
        self.wake()

    async def close(self) -> None:
        await self._task.close()

    def wake(self) -> None:
        """A step was taken, or a record this node may not own arrived: look again."""
        self._wake.set()

    def status(self) -> dict[str, Any]:
        progress = self.progress
        return {
            "epoch": progress.epoch,
            "state": "streaming" if self.streaming else "done" if progress.done else "waiting",
            "done": progress.done and progress.epoch == self._membership.state.epoch,
            "scanned": progress.scanned,
            "remaining": max(0, self.total - progress.scanned) if self.streaming else 0,
            "deleted": progress.deleted,
            "kept": progress.kept,
            "rate": self.rate,
            "targets": {url: asdict(entry) for url, entry in progress.targets.items()},
        }

    async def _run(self) -> None:
        while True:
            retry = self._kept and self._membership.state.phase == STABLE
            try:
                async with asyncio.timeout(self._kept_pause if retry else None):
                    await self._wake.wait()
            except TimeoutError:
                await self._offer_kept_again()
                self._kept_pause = min(self._kept_pause * 2, MAX_KEPT_PAUSE)
                continue
            self._wake.clear()
            state = self._membership.state
            if state.phase == JOINT:
                continue  # not before every node is joint: see dht.model.topology
            if self.progress.epoch != state.epoch:
                self.progress = Progress(epoch=state.epoch)
            elif self.progress.done or self.progress.dead != list(state.dead):
                self.progress.done = False  # woken again: another pass, from the start
                self.progress.cursor, self.progress.scanned = None, 0
            self.progress.dead = list(state.dead)
            if self.progress.cursor is None:
                self.progress.kept = 0
                self._kept.clear()
            self._kept_pause = KEPT_PAUSE
            await self._pass(state)
            if self.progress.kept > len(self._kept):
                self.wake()  # kept before a restart, which forgot the keys: look again

    async def _pass(self, state: TopologyState) -> None:
        progress = self.progress
        self._pass_dead = frozenset(state.dead)
        start = b"" if progress.cursor is None else bytes.fromhex(progress.cursor) + b"\0"
        self.total = progress.scanned + await asyncio.to_thread(self._storage.count, start)
        self.streaming = True
        began, sent_before = self._monotonic(), self._records_sent()
        log.info(
            "handoff (epoch %d, %s): %d records to look at%s",
            state.epoch,
            state.phase,
            self.total - progress.scanned,
            "" if progress.cursor is None else ", resuming after the saved key",
        )
        try:
            if not await self._stream(state, start, Pace(self.rate, self._monotonic)):
                return  # a newer step: its own pass takes over
        except _StepChanged:
            log.info(
                "handoff (epoch %d): nodes were named dead meanwhile; the pass starts again "
                "from the first key, without them",
                state.epoch,
            )
            progress.cursor, progress.scanned = None, 0
            save_json(self._path, asdict(progress))
            self.wake()
            return
        finally:
            self.streaming = False
        seconds = self._monotonic() - began
        sent = self._records_sent() - sent_before
        log.info(
            "handoff (epoch %d) done: %d records scanned, %d sent, %d deleted in %.1f s "
            "(%.0f records/s)",
            state.epoch,
            progress.scanned,
            sent,
            progress.deleted,
            seconds,
            sent / seconds if seconds else 0.0,
        )
        if progress.kept:
            log.warning(
                "handoff (epoch %d): %d records kept here, refused by their new owners as "
                "too far ahead of their clocks%s",
                state.epoch,
                progress.kept,
                "; offered again later" if state.phase == STABLE else "",
            )

    async def _stream(self, state: TopologyState, start: bytes, pace: Pace) -> bool:
        """Hands off every record from `start` on, a batch at a time, saving the cursor
        after each; False if a newer step came first."""
        topology = self._membership.topology  # the placement of `state`
        target = topology.next or topology.current
        before = topology.current if state.phase == HANDOFF else None
        progress = self.progress
        while (batch := self._read_batch(start)) is not None:
            scanned, last_key = batch
            moves = [
                self._move(key, record, target, before, self._pass_dead) for key, record in scanned
            ]
            kept = await self._send([move for move in moves if move is not None], pace)
            self._kept |= kept
            progress.kept += len(kept)
            progress.scanned += len(scanned)
            progress.cursor = last_key.hex()
            save_json(self._path, asdict(progress))
            start = last_key + b"\0"
            if self._membership.state.epoch != state.epoch:
                return False
            self._check_dead()
        progress.done = True
        save_json(self._path, asdict(progress))
        return True

    def _check_dead(self) -> None:
        """Raises _StepChanged if nodes were named dead since the pass began."""
        if frozenset(self._membership.state.dead) != self._pass_dead:
            raise _StepChanged

    async def _offer_kept_again(self) -> None:
        """Sends the records kept after a refusal again (in a stable step, to the owners
        of each that this node is not); the ones refused again stay kept."""
        topology = self._membership.topology
        self._pass_dead = frozenset(self._membership.state.dead)
        moves = []
        for key in sorted(self._kept):
            record = self._storage.get(key)
            move = None if record is None else self._move(key, record, topology.current, None)
            if move is not None:
                moves.append(move)
        self._kept = set()
        pace = Pace(self.rate, self._monotonic)
        for first in range(0, len(moves), BATCH_RECORDS):
            self._kept |= await self._send(moves[first : first + BATCH_RECORDS], pace)
        handed = len(moves) - len(self._kept)
        self.progress.kept = len(self._kept)
        save_json(self._path, asdict(self.progress))
        if handed:
            log.info("handoff: %d records kept after a refusal were taken now", handed)

    def _records_sent(self) -> int:
        return sum(entry.records_sent for entry in self.progress.targets.values())

    def _read_batch(self, start: bytes) -> tuple[list[tuple[bytes, Record]], bytes] | None:
        batch: list[tuple[bytes, Record]] = []
        size = 0
        for key, record in self._storage.scan(start, None):
            batch.append((key, record))
            size += len(key) + len(record.value)
            if len(batch) >= BATCH_RECORDS or size >= BATCH_BYTES:
                break
        if not batch:
            return None
        return batch, batch[-1][0]

    def _move(
        self,
        key: bytes,
        record: Record,
        target: Ring,
        before: Ring | None,
        dead: frozenset[str] = frozenset(),
    ) -> _Move | None:
        owners = holders(target, key, record.copies)
        if self._self_url not in owners:
            receivers = [url for url in owners if url not in dead]
        elif before is None:
            return None
        else:
            held = holders(before, key, record.copies)
            receivers = [url for url in owners if url not in held and url not in dead]
            keepers = [url for url in held if url in owners and url not in dead]
            if dead and receivers and keepers:
                first = keepers[0]
                if first != self._self_url:  # the first sends the newest copy of all
                    others = [url for url in [*receivers, first] if url != self._self_url]
                    return _Move(key, record, others, False, (), first)
                return _Move(key, record, receivers, False, tuple(keepers[1:]))
        receivers = [url for url in receivers if url != self._self_url]
        leaving = self._self_url not in owners
        if not receivers and not leaving:
            return None
        return _Move(key, record, receivers, leaving)

    async def _newest_copies(self, moves: list[_Move]) -> list[_Move]:
        """For the moves to confirm, the newest of this node's copy and the other
        keepers' (read again after a pause until each answers), which this node keeps
        too; the moves of another keeper only where the first keeper's copy is missing
        or older; the other moves as they are."""
        pause = RETRY_PAUSE
        asks = [(move, url) for move in moves for url in move.confirm_with]
        asks += [(move, move.unless_held_by) for move in moves if move.unless_held_by]
        if not asks:
            return moves
        copies: dict[bytes, dict[str, Record | None]] = {}  # key: keeper -> its copy
        while True:
            answers = await asyncio.gather(
                *(self._peers[url].get(move.key) for move, url in asks), return_exceptions=True
            )
            failed = []
            for (move, url), answer in zip(asks, answers, strict=True):
                if isinstance(answer, PeerError):
                    entry = self.progress.targets.setdefault(url, TargetProgress())
                    entry.failures += 1
                    entry.last_error = f"reading its copy: {answer}"
                    failed.append((move, url))
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    copies.setdefault(move.key, {})[url] = answer
            if not failed:
                break
            asks = failed  # the reads that failed, only
            log.info("handoff: %d keeper reads failed; again in %.1f s", len(failed), pause)
            await asyncio.sleep(pause)
            self._check_dead()
            pause = min(pause * 2, MAX_RETRY_PAUSE)
        confirmed = []
        for move in moves:
            if move.unless_held_by is not None:
                if move.record.supersedes(copies[move.key][move.unless_held_by]):
                    confirmed.append(replace(move, unless_held_by=None))
                continue  # else the first keeper has it, and sends the newest
            theirs = list(copies.get(move.key, {}).values())
            best = newest([move.record, *theirs])
            if best is not None and best is not move.record:
                try:  # this keeper had an older copy: it keeps the newest too
                    stored = self._storage.write(move.key, best)
                    if isinstance(stored, asyncio.Future):
                        await stored
                except DiskFull as exc:
                    log.warning("handoff: could not keep the newest copy here: %s", exc)
            confirmed.append(replace(move, record=best or move.record, confirm_with=()))
        return confirmed

    async def _send(self, moves: list[_Move], pace: Pace) -> set[bytes]:
        """Every move of one batch, to each receiver again and again until it took it,
        except to a receiver that refused it as too far ahead of its clock; returns the
        keys of those refused (kept here: a record some receiver lacks is not deleted)."""
        moves = await self._newest_copies(moves)
        pause = RETRY_PAUSE
        refused: dict[str, int] = {}  # receiver: records it refused in this batch
        kept: set[bytes] = set()
        while moves:
            for _ in moves:
                await pace.step()
            calls = [
                (move, url, self._peers[url].put(move.key, move.record))
                for move in moves
                for url in move.receivers
            ]
            results = await asyncio.gather(*(call for _, _, call in calls), return_exceptions=True)
            again: dict[bytes, list[str]] = {}  # key: the receivers to send it to again
            for (move, url, _), result in zip(calls, results, strict=True):
                entry = self.progress.targets.setdefault(url, TargetProgress())
                if isinstance(result, VersionRefused):
                    entry.refused += 1
                    entry.last_error = str(result)
                    refused[url] = refused.get(url, 0) + 1
                    kept.add(move.key)
                elif isinstance(result, PeerError):
                    entry.failures += 1
                    entry.last_error = str(result)
                    again.setdefault(move.key, []).append(url)
                elif isinstance(result, BaseException):
                    raise result
                else:
                    entry.records_sent += 1
                    entry.bytes_sent += len(move.key) + len(move.record.value)
            for move in moves:
                if move.leaving and move.key not in again and move.key not in kept:
                    self._delete_if_unchanged(move)
            moves = [
                replace(move, receivers=again[move.key]) for move in moves if move.key in again
            ]
            if moves:
                log.info("handoff: %d records not taken yet; again in %.1f s", len(moves), pause)
                await asyncio.sleep(pause)
                self._check_dead()
                pause = min(pause * 2, MAX_RETRY_PAUSE)
        for url, count in refused.items():
            log.warning(
                "handoff: %s refused %d records as too far ahead of its clock; kept here",
                url,
                count,
            )
        return kept

    def _delete_if_unchanged(self, move: _Move) -> None:
        try:
            if self._storage.collect(move.key, move.record):
                self.progress.deleted += 1
        except DiskFull as exc:  # a delete needs a little space too: the record stays
            log.warning("handoff: could not delete a record handed off: %s", exc)
