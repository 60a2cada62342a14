"""What the coordinator logs and answers when this node's own replica refuses (its volume
below the reserve, SPEC.md rule 8.7) or its storage raises: one warning that says what
was refused, and a bug counted as that replica's failure, never escaping the request."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dht.coordination.coordinator import Coordinator, Status
from dht.model.clock import HybridClock, version_at
from dht.model.log_limits import RateLimit
from dht.model.record import Record
from dht.storage.store import Storage

WALL_MS = 1_700_000_000_000
SELF = "http://self"
PEER = "http://peer"


class FakePeer:
    remote = True

    def __init__(self, answer: Record | None) -> None:
        self.url = PEER
        self._answer = answer

    def available(self) -> bool:
        return True

    def retry_after(self) -> float:
        return 0.0

    def _done(self, value: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(value)
        return future

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        return self._done(self._answer)

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        return self._done(True)


class FakePeers(dict):  # type: ignore[type-arg]
    @property
    def by_url(self) -> dict[str, FakePeer]:
        return self


def coordinator(
    storage: Storage, nodes: list[str], peer_answer: Record | None = None
) -> Coordinator:
    clock = HybridClock(lambda: WALL_MS, floor=version_at(WALL_MS), save_ceiling=lambda c: None)
    topology = SimpleNamespace(
        quorums=lambda key, replicas: [(nodes, len(nodes))],
        default_copies=lambda: len(nodes),
        size=len(nodes),
        targets=lambda key, copies: nodes,
    )
    membership = SimpleNamespace(state=SimpleNamespace(epoch=1), topology=topology)
    made = Coordinator(
        SimpleNamespace(self_url=SELF),  # type: ignore[arg-type]
        storage,
        membership,  # type: ignore[arg-type]
        FakePeers({PEER: FakePeer(peer_answer)}),  # type: ignore[arg-type]
        clock,
        SimpleNamespace(add=lambda *args: None),  # type: ignore[arg-type]
    )
    made._refusals._limit = RateLimit(interval=0.0)  # every refusal logged: count them
    return made


@pytest.mark.parametrize("nodes", [[SELF], [SELF, PEER]], ids=["alone", "with a peer"])
async def test_a_write_refused_here_for_space_is_one_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, nodes: list[str]
) -> None:
    """Once, not once by the replica and again by the write (the rate limit would then
    count one refusal twice), whether this node is the key's only replica or not."""
    storage = Storage(tmp_path, disk_reserve=1 << 62)
    try:
        made = coordinator(storage, nodes)
        with caplog.at_level(logging.WARNING):
            outcome = await made.put(b"k", b"v", None)
        assert outcome.status is Status.INSUFFICIENT_STORAGE
        refused = [r for r in caplog.records if "writes refused" in r.getMessage()]
        assert len(refused) == 1, [r.getMessage() for r in refused]
    finally:
        storage.close()


async def test_a_read_repair_of_this_node_refused_for_space_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The read is answered; the log says a repair was skipped, not that writes were
    refused."""
    storage = Storage(tmp_path, disk_reserve=1 << 62)
    try:
        newer = Record.live(version_at(WALL_MS - 1_000), b"v", 0, 2)
        made = coordinator(storage, [SELF, PEER], peer_answer=newer)
        with caplog.at_level(logging.WARNING):
            outcome = await made.get(b"k", None)
            await asyncio.sleep(0)
        assert outcome.status is Status.FOUND
        assert "read repair skipped" in caplog.text
        assert "writes refused" not in caplog.text
    finally:
        storage.close()


async def test_a_bug_raising_stopiteration_in_storage_is_that_replicas_failure(
    tmp_path: Path,
) -> None:
    """A future cannot hold a StopIteration: it is held as a RuntimeError, so the write
    is answered 504 like any other failure of this replica."""
    storage = Storage(tmp_path)
    try:
        made = coordinator(storage, [SELF, PEER])

        def broken(key: bytes, record: Record) -> bool:
            raise StopIteration("a bug")

        storage.write = broken  # type: ignore[method-assign]
        outcome = await made.put(b"k", b"v", None)
        assert outcome.status is Status.NOT_ENOUGH_REPLICAS
    finally:
        await storage.drain()
        storage.close()
