"""Clients of the simulated cluster: each sends seeded PUT, GET and DELETE requests at
the default `replicas` to a node it picks, one at a time, and records each as the chaos
clients do (`dht.history.operation.Op`); a request unanswered within the client's
deadline is recorded unanswered."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from dht.history.operation import Kind, Op
from dht.simulation.network import Network, Trace
from dht.simulation.sim_node import SimNode

# A client waits this long for an answer (longer than a coordinator's worst case).
CLIENT_DEADLINE = 5.0


class Client:
    def __init__(
        self,
        number: int,
        nodes: Sequence[SimNode],
        network: Network,
        rng: random.Random,
        keys: int,
        think: float,
        history: list[Op],
        trace: Trace,
        narrow_deletes: bool = False,
        write_once: bool = False,
    ) -> None:
        """`narrow_deletes`: one DELETE in two at `replicas=2/2`, on keys written at the
        default (every node): tombstones whose `F` is narrower than the values they
        delete. `write_once`: one request in three on a key of this client's own,
        written once, deleted a while later and never written again: a value that
        comes back after its delete is not hidden by a later write of the key."""
        self.name = f"client{number}"
        self._nodes = nodes
        self._network = network
        self._rng = rng
        self._keys = keys
        self._think = think
        self._history = history
        self._trace = trace
        self._sent = 0
        self._narrow_deletes = narrow_deletes
        self._write_once = write_once
        self._written_once: list[str] = []  # its own keys written, not deleted yet

    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await asyncio.sleep(self._rng.expovariate(1 / self._think))
            if loop.time() >= until:
                break
            await self.one()

    async def one(self) -> None:
        rng = self._rng
        node = rng.choice(self._nodes)
        draw = rng.random()
        kind = Kind.PUT if draw < 0.45 else Kind.GET if draw < 0.85 else Kind.DELETE
        key = f"k{rng.randrange(self._keys)}"
        if self._write_once and rng.random() < 1 / 3:
            kind, key = self._once(rng)
        replicas = None
        if kind is Kind.DELETE and self._narrow_deletes and rng.random() < 0.5:
            replicas = "2/2"
        value: bytes | None = None
        if kind is Kind.PUT:
            self._sent += 1
            value = f"{self.name}-{self._sent}".encode()
        loop = asyncio.get_running_loop()
        invoked = loop.time()
        status: int | None = None
        body: bytes | None = None
        sent_value = value

        async def serve(target: SimNode) -> tuple[int, bytes | None]:
            return await target.serve(kind.value, key.encode(), sent_value, replicas)

        try:
            async with asyncio.timeout(CLIENT_DEADLINE):
                status, body = await self._network.request(self.name, node.config.port, serve)
        except (TimeoutError, OSError):
            status = None
        completed = None if status is None else loop.time()
        if kind is Kind.GET:
            value = body if status == 200 else None
        op = Op(kind, key, value, invoked, completed, status, node=node.name, replicas=replicas)
        self._history.append(op)
        self._trace.add("op", kind.value, key, value, invoked, completed, status, node.name)

    def _once(self, rng: random.Random) -> tuple[Kind, str]:
        """The next request on the client's write-once keys: the oldest one deleted
        (one time in two, when there is one), or a new one written."""
        if self._written_once and rng.random() < 0.5:
            return Kind.DELETE, self._written_once.pop(0)
        key = f"{self.name}-once{self._sent + 1}"
        self._written_once.append(key)
        return Kind.PUT, key
