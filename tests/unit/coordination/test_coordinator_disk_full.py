"""The coordinator when the clock cannot save its ceiling (SPEC 8.7) on a full volume:
a PUT answers 507 and still gives back what the request held (its `settled` callback:
the admission budget), and a GET whose replica answers with a version past the ceiling
is still answered (that answer counts as the replica's failure), never left waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dht.coordination.coordinator import Coordinator, Status
from dht.coordination.tally import Counters, Tally
from dht.model.clock import HybridClock, version_at
from dht.model.record import Record
from dht.storage.disk import DiskFull
from dht.storage.store import Storage

WALL_MS = 1_700_000_000_000
SELF = "http://self"
PEER = "http://peer"


def full_volume(ceiling: int) -> None:
    raise DiskFull("the volume is full: No space left on device")


class FakePeer:
    def __init__(self, answer: Record | None) -> None:
        self.url = PEER
        self._answer = answer

    remote = True

    def available(self) -> bool:
        return True

    def retry_after(self) -> float:
        return 0.0

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        future: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        future.set_result(self._answer)
        return future

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        future.set_result(True)
        return future


class FakePeers(dict[str, FakePeer]):
    @property
    def by_url(self) -> dict[str, FakePeer]:
        return self


def coordinator(tmp_path: Path, peer_answer: Record | None = None) -> tuple[Coordinator, Any]:
    storage = Storage(tmp_path)
    # The clock's saved ceiling is at the wall clock: any version past it needs a save.
    clock = HybridClock(lambda: WALL_MS, floor=version_at(WALL_MS), save_ceiling=full_volume)
    topology = SimpleNamespace(
        quorums=lambda key, replicas: [([SELF, PEER], 2)],
        default_copies=lambda: 2,
        size=2,
        targets=lambda key, copies: [SELF, PEER],
    )
    membership = SimpleNamespace(state=SimpleNamespace(epoch=1), topology=topology)
    peer = FakePeer(peer_answer)
    peers = FakePeers({PEER: peer})
    config = SimpleNamespace(self_url=SELF)
    hints = SimpleNamespace(add=lambda *args: None)
    made = Coordinator(config, storage, membership, peers, clock, hints)  # type: ignore[arg-type]
    return made, storage


async def test_a_put_refused_for_the_clock_ceiling_releases_what_it_held(tmp_path: Path) -> None:
    made, storage = coordinator(tmp_path)
    settled: list[bool] = []
    try:
        outcome = await made.put(b"k", b"v", None, lambda: settled.append(True))
        assert outcome.status is Status.INSUFFICIENT_STORAGE
        assert settled == [True], "the request's budget is never given back"
    finally:
        storage.close()


async def test_a_read_answer_past_the_ceiling_on_a_full_volume_does_not_hang(
    tmp_path: Path,
) -> None:
    ahead = Record.live(version_at(WALL_MS + 10), b"v", 0, 2)
    made, storage = coordinator(tmp_path, peer_answer=ahead)
    try:
        outcome = await asyncio.wait_for(made.get(b"k", None), timeout=2)
        assert outcome.status is Status.NOT_ENOUGH_REPLICAS
        assert not made._running, "the GET is still counted as running (drain waits)"
    finally:
        storage.close()


async def test_any_error_taking_a_replica_answer_counts_as_its_failure() -> None:
    """Not only the refusals the coordinator knows (PeerError): an answer the node cannot
    take for any reason is that replica's failure, so the fan-out is still decided."""

    def broken(url: str, value: object) -> None:
        raise RuntimeError("a bug in taking the answer")

    tally: Tally[object] = Tally([([PEER], 1)], Counters())
    answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    tally.watch(PEER, answer, broken)
    answer.set_result("value")
    await asyncio.wait_for(tally.decision(), timeout=2.0)
    assert tally.failures == 1 and not tally.answers and not tally.quorum_met
