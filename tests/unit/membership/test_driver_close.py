"""The driver closes a change (SPEC.md rule 13.3), run against nodes that are real
`Membership`s in temporary folders, behind a session that answers the topology and
status requests in memory: every node's step is what `Membership.apply` made of it,
as on a running node. Found by review: a node of the new list lost for good before
the close left a cluster that could neither close nor change again."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dht.membership.driver import ChangeFailed, change_membership
from dht.model.topology import HANDOFF, JOINT, STABLE, BadTransition, TopologyState
from dht.storage.membership import Membership
from dht.transport.wire import TOPOLOGY_PATH

A, B, C, E = (f"http://127.0.0.1:{port}" for port in (1, 2, 3, 5))
VNODES = 16


class Answer:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._body = body

    async def text(self) -> str:
        return self._body if isinstance(self._body, str) else json.dumps(self._body)

    async def json(self) -> Any:
        return self._body


class InMemoryCluster:
    """What the driver's session reaches: each node's topology and its handoff, always
    done (the handoffs themselves are the rebalance's tests)."""

    def __init__(self, root: Path, urls: list[str]) -> None:
        self.nodes: dict[str, Membership] = {}
        for url in urls:
            folder = root / url.rsplit(":", 1)[1]
            folder.mkdir()
            self.nodes[url] = Membership(folder, TopologyState(0, STABLE, tuple(urls)), VNODES)
        self.down: set[str] = set()

    def _node(self, url: str) -> tuple[str, Membership]:
        base, path = url[: url.index("/", len("http://"))], url[url.index("/", len("http://")) :]
        if base in self.down or base not in self.nodes:
            raise OSError(f"{base}: connection refused")
        return path, self.nodes[base]

    @asynccontextmanager
    async def get(self, url: str) -> AsyncIterator[Answer]:
        path, node = self._node(url)
        if path == TOPOLOGY_PATH:
            yield Answer(200, node.state.to_json())
            return
        handoff = {"epoch": node.state.epoch, "done": True, "state": "done", "scanned": 0}
        handoff |= {"remaining": 0, "deleted": 0, "kept": 0, "targets": {}}
        yield Answer(200, {"vnodes": VNODES, "membership": {"handoff": handoff}})

    @asynccontextmanager
    async def put(self, url: str, json: Any = None) -> AsyncIterator[Answer]:
        _, node = self._node(url)
        try:
            node.apply(TopologyState.from_json(json))
        except BadTransition as exc:
            yield Answer(409, f"Conflict: {exc}")
            return
        yield Answer(200, node.state.to_json())

    def take(self, *steps: TopologyState) -> None:
        for node in self.nodes.values():
            for step in steps:
                node.apply(step)


async def change(cluster: InMemoryCluster, new: list[str], dead: list[str] | None = None) -> None:
    await change_membership(
        [new[0]],
        new,
        dead=dead,
        session=cluster,  # type: ignore[arg-type]
        no_answer_deadline=0.3,
        step_deadline=1.0,
    )


SHRINK = (
    TopologyState(1, JOINT, (A, B, C, E), (A, B, C)),
    TopologyState(2, HANDOFF, (A, B, C, E), (A, B, C)),
    TopologyState(3, STABLE, (A, B, C)),
)


async def test_a_change_is_closed_once_every_node_took_its_last_step(tmp_path: Path) -> None:
    cluster = InMemoryCluster(tmp_path, [A, B, C, E])
    await change(cluster, [A, B, C])
    for url, node in cluster.nodes.items():
        assert node.state.closed and node.state.left == (E,), url


async def test_a_node_that_leaves_lost_before_the_close_is_named_dead_to_close_it(
    tmp_path: Path,
) -> None:
    cluster = InMemoryCluster(tmp_path, [A, B, C, E])
    cluster.take(*SHRINK)
    cluster.down.add(E)
    with pytest.raises(ChangeFailed, match=r"not closed.*--dead http://127.0.0.1:5"):
        await change(cluster, [A, B, C])
    assert not cluster.nodes[A].state.closed
    await change(cluster, [A, B, C], dead=[E])
    for url in (A, B, C):
        state = cluster.nodes[url].state
        assert state.closed and state.refuses_replica(E), url


async def test_a_node_of_the_new_list_lost_before_the_close_is_removed_after_it(
    tmp_path: Path,
) -> None:
    """B was to stay, and is lost for good in the last step: the change is closed
    without it, and a second change removes it, as for a node lost mid-change."""
    cluster = InMemoryCluster(tmp_path, [A, B, C, E])
    cluster.take(*SHRINK)
    cluster.down.add(B)
    await change(cluster, [A, C], dead=[B])
    for url in (A, C):
        state = cluster.nodes[url].state
        assert state.current == (A, C) and state.closed, url
        assert state.left == (B, E) and state.refuses_replica(B) and state.refuses_replica(E)


async def test_a_node_that_joins_learns_who_left_before(tmp_path: Path) -> None:
    """The next change's joint step tells a joining node which nodes left: a node that
    left still places keys by the ring the cluster went on with, which the joining
    node's steps share (found by review)."""
    cluster = InMemoryCluster(tmp_path, [A, B, C, E])
    await change(cluster, [A, B, C])
    folder = tmp_path / "joining"
    folder.mkdir()
    joining = "http://127.0.0.1:9"
    seed = TopologyState(0, JOINT, (A, B, C), (A, B, C, joining))
    cluster.nodes[joining] = Membership(folder, seed, VNODES)
    cluster.down.add(E)  # gone: it is asked nothing, it left
    await change(cluster, [A, B, C, joining])
    for url in (A, B, C, joining):
        state = cluster.nodes[url].state
        assert state.current == (A, B, C, joining) and state.closed, url
        assert state.refuses_replica(E), url


async def test_a_change_partly_closed_is_closed_before_another_one_starts(
    tmp_path: Path,
) -> None:
    """The driver stopped part-way through the close (killed, or a node silent): some
    nodes closed, some not. Another change first closes it everywhere; starting it at
    once would leave the closed nodes joint and the others refusing (found by review)."""
    cluster = InMemoryCluster(tmp_path, [A, B, C, E])
    cluster.take(*SHRINK)
    for url in (A, B):
        cluster.nodes[url].apply(replace(SHRINK[-1], draining=()))
    await change(cluster, [A, B])
    for url in (A, B):
        state = cluster.nodes[url].state
        assert state.current == (A, B) and state.closed, url
        assert state.left == (C, E), url
