"""This node as a replica (`LocalReplica`), on real storage and membership in a
temporary folder: a node that left in a change is refused once the change is closed
(SPEC.md rules 13.3 and 13.9), whether its channel was opened before or after, and in
every later step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from dht.model.clock import HybridClock
from dht.model.record import Record
from dht.model.topology import HANDOFF, JOINT, STABLE, TopologyState
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.channel_server import ReplicaRefusal
from dht.transport.local_replica import LocalReplica
from dht.transport.messages import PROTOCOL_VERSION, Hello, Why

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"
VNODES = 16


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    opened = Storage(tmp_path / "data")
    try:
        yield opened
    finally:
        await opened.drain()
        opened.close()


async def stored(replica: LocalReplica, key: bytes, record: Record, sender: str) -> bool:
    answer = replica.rpc_put(key, record, sender)
    return answer if isinstance(answer, bool) else await answer


async def test_a_node_that_left_is_refused_once_the_change_is_closed(
    tmp_path: Path, storage: Storage
) -> None:
    membership = Membership(tmp_path, TopologyState(0, STABLE, (A, B, C)), VNODES)
    replica = LocalReplica(storage, HybridClock(), None, membership)
    hello = Hello(PROTOCOL_VERSION, C, membership.identity, b"n" * 16)
    record = Record.live(1, b"older", copies=3)
    for step in (
        TopologyState(1, JOINT, (A, B, C), (A, B)),
        TopologyState(2, HANDOFF, (A, B, C), (A, B)),
        TopologyState(3, STABLE, (A, B)),
    ):
        membership.apply(step)
        assert replica.admit(replace(hello, ring=membership.identity)) is None, step.phase
        assert await stored(replica, b"k%d" % step.epoch, record, C), step.phase  # its handoff
    membership.apply(TopologyState(3, STABLE, (A, B), draining=()))  # closed
    refused = replica.admit(replace(hello, ring=membership.identity))
    assert refused is not None and "removed from the cluster" in refused
    with pytest.raises(ReplicaRefusal) as raised:  # a channel opened before the close
        await stored(replica, b"late", record, C)
    assert raised.value.why is Why.DECLINED
    assert storage.get(b"late") is None
    assert await stored(replica, b"late", record, B)  # a member is taken
    # The next change's steps share the ring C still places keys by: it stays refused
    # (found by review: it was taken again from the next joint step on).
    membership.apply(TopologyState(4, JOINT, (A, B), (A,)))
    assert replica.admit(replace(hello, ring=membership.identity)) is not None
    with pytest.raises(ReplicaRefusal):
        await stored(replica, b"later", record, C)
