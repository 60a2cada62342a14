"""This node's own replica (`SelfReplica`) answers as a peer does, on real storage in a
temporary folder: futures done at once for LevelDB point operations, a write's future
from the group commit, and a volume below its reserve as the failure a tally counts as
no space (SPEC.md rule 8.7: 507)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.config import NodeConfig
from dht.coordination.tally import Counters, Tally
from dht.model.record import Record
from dht.storage.disk import DiskFull
from dht.storage.store import Storage
from dht.transport.peers import Peers
from dht.transport.replica import Replicas, SelfReplica

SELF, PEER = "http://127.0.0.1:1", "http://127.0.0.1:2"


async def test_reads_are_answered_at_once_and_writes_once_on_disk(tmp_path: Path) -> None:
    storage = Storage(tmp_path)  # the default durability: the group commit
    try:
        here = SelfReplica(SELF, storage)
        absent = here.get(b"k")
        assert absent.done() and absent.result() is None
        assert await here.put(b"k", Record.live(2, b"newer")) is True
        assert await here.put(b"k", Record.live(1, b"older")) is False  # put-if-newer
        held = here.get(b"k")
        assert held.done() and held.result() == Record.live(2, b"newer")
    finally:
        await storage.drain()
        storage.close()


async def test_a_volume_below_its_reserve_fails_the_write_as_no_space(tmp_path: Path) -> None:
    storage = Storage(tmp_path, disk_reserve=1 << 62)  # more than any volume holds
    try:
        here = SelfReplica(SELF, storage)
        tally: Tally[bool] = Tally([([SELF], 1)], Counters())
        tally.watch(SELF, here.put(b"k", Record.live(1, b"value")))
        await tally.decision()
        assert not tally.quorum_met and tally.no_space == 1
        with pytest.raises(DiskFull):
            await here.put(b"k", Record.live(2, b"value"))
    finally:
        storage.close()


async def test_the_replicas_are_this_node_and_its_peers_until_a_step_retires_one(
    tmp_path: Path,
) -> None:
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=(SELF, PEER), self_url=SELF)
    peers = Peers(config, [SELF, PEER], "ring")
    storage = Storage(tmp_path / "data")
    try:
        replicas = Replicas(SelfReplica(SELF, storage), peers)
        assert replicas[SELF] is replicas.here and not replicas.here.remote
        assert replicas[PEER] is peers[PEER] and replicas[PEER].remote
        await peers.retire(keep=[SELF])
        assert replicas.get(PEER) is None
        with pytest.raises(KeyError):
            replicas[PEER]
    finally:
        await peers.close()
        storage.close()
