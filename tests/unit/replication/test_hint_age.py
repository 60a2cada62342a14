"""SPEC.md rules 9.6 and 9.10: a hint's age counts from when its record was written,
not from when the replica's call failed. Anti-entropy stops copying a tombstone to a
peer without the key once no hint of an older value can land there
(`withheld_after_ms`), reasoning that such a hint was made when the older value was
written; a call fails only at its deadline (`--timeout`, plus the transfer time of the
large writes queued with it), so a hint stamped then lived that much longer, and could
land on a peer the tombstone was already withheld from."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from dht.config import NodeConfig
from dht.coordination.coordinator import Coordinator, Status
from dht.model.clock import HybridClock
from dht.replication.hints import HintStore
from dht.replication.hints import hint_max_age as hint_max_age_of
from dht.storage.disk import DiskSpace
from dht.storage.store import Storage
from dht.transport.peers import PeerError

WALL_MS = 1_700_000_000_000
SELF = "http://self"
PEER = "http://peer"
MAX_AGE = 4.0  # half of an 8 s grace
DEADLINE_MS = 3_000  # the failed call's deadline: --timeout and a large value's transfer


class Wall:
    def __init__(self) -> None:
        self.ms = WALL_MS

    def __call__(self) -> int:
        return self.ms


class SlowPeer:
    """A replica whose writes fail when the test says: at their deadline."""

    url = PEER

    def __init__(self) -> None:
        self.calls: list[asyncio.Future[bool]] = []

    remote = True

    def available(self) -> bool:
        return True

    def retry_after(self) -> float:
        return 0.0

    def put(self, key: bytes, record: object) -> asyncio.Future[bool]:
        self.calls.append(asyncio.get_running_loop().create_future())
        return self.calls[-1]


async def test_a_hint_made_at_the_calls_deadline_is_as_old_as_its_write(tmp_path: Path) -> None:
    wall = Wall()
    storage = Storage(tmp_path / "data", durability="none", wall_ms=wall)
    disk = DiskSpace(tmp_path, 0, measure=lambda path: 1 << 40)
    hints = HintStore(storage.hints, disk, 1 << 30, MAX_AGE, wall)
    topology = SimpleNamespace(
        quorums=lambda key, replicas: [([SELF, PEER], 1)],
        default_copies=lambda: 2,
        size=2,
        targets=lambda key, copies: [SELF, PEER],
    )
    membership = SimpleNamespace(state=SimpleNamespace(epoch=1), topology=topology)
    peer = SlowPeer()
    peers = {PEER: peer}
    config = SimpleNamespace(self_url=SELF)
    made = Coordinator(config, storage, membership, peers, HybridClock(wall), hints)  # type: ignore[arg-type]
    try:
        assert (await made.put(b"k", b"older value", None)).status is Status.STORED
        wall.ms += DEADLINE_MS  # the call to the peer fails at its deadline
        peer.calls[0].set_exception(PeerError(f"{PEER}: no answer"))
        await asyncio.sleep(0)
        [hint] = hints.for_target(PEER, 10)
        # Half the grace after the write (by the clock that wrote it), the hint is no
        # longer delivered: a tombstone newer than it may be withheld from the peer.
        wall.ms = WALL_MS + round(MAX_AGE * 1000) + 1
        assert hints.expired(hint), f"the hint lives {DEADLINE_MS} ms past half the grace"
    finally:
        storage.close()


def test_a_hint_is_kept_at_most_half_of_the_tombstone_grace(tmp_path: Path) -> None:
    """SPEC.md rule 9.6: a hint delivered after every node collected the tombstone that
    replaced its record would bring the record back, so `--hint-max-age` is cut to half
    of `--tombstone-grace` (the other half covers clocks that disagree). Moved out of
    dht/node.py with no test of its own until this one."""

    def kept(hint_max_age: float, tombstone_grace: float) -> float:
        config = NodeConfig(
            port=1,
            data_dir=tmp_path,
            cluster=(SELF,),
            self_url=SELF,
            hint_max_age=hint_max_age,
            tombstone_grace=tombstone_grace,
        )
        return hint_max_age_of(config)

    assert kept(10.0, 100.0) == 10.0
    assert kept(50.0, 100.0) == 50.0
    assert kept(51.0, 100.0) == 50.0
    assert kept(NodeConfig.hint_max_age, 1.0) == 0.5
