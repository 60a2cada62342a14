"""Clients of the simulated cluster: each sends seeded PUT, GET and DELETE requests to a
node it picks, one at a time, at `replicas` drawn from the seed
(`dht.simulation.quorums`) or the default, and records each as the chaos clients do
(`dht.history.operation.Op`); a request unanswered within the client's deadline is
recorded unanswered."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from dht.history.operation import Kind, Op
from dht.simulation.http_client import http_request
from dht.simulation.network import Network, Trace
from dht.simulation.quorums import Replicas
from dht.simulation.sim_node import SimNode

# A client waits this long for an answer (longer than a coordinator's worst case).
CLIENT_DEADLINE = 5.0
# How long a write-once key stays idle before its delete (seconds), and how many of the
# keys deleted last a client reads again.
IDLE = (5.0, 20.0)
RECENTLY_DELETED = 5


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
        replicas: Replicas | None = None,
    ) -> None:
        """`narrow_deletes`: one DELETE in two at `replicas=2/2`, on keys written at the
        default (every node): tombstones whose `F` is narrower than the values they
        delete. `write_once`: one request in three on a key of this client's own,
        written once, left idle a while, deleted and read again, never written again:
        a value that comes back after its delete is not hidden by a later write of the
        key. `replicas`: each request's `replicas` drawn (`dht.simulation.quorums`);
        None: every one at the default."""
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
        self._replicas = replicas
        # Its own keys written and not deleted yet, each with when it is to be deleted;
        # and those deleted, newest last.
        self._written_once: list[tuple[float, str]] = []
        self._deleted_once: list[str] = []

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
        elif self._replicas is not None:
            replicas = self._replicas.choose(len(self._nodes))
        value: bytes | None = None
        if kind is Kind.PUT:
            self._sent += 1
            value = f"{self.name}-{self._sent}".encode()
        loop = asyncio.get_running_loop()
        invoked = loop.time()
        status: int | None = None
        body: bytes | None = None
        sent_value = value

        try:
            async with asyncio.timeout(CLIENT_DEADLINE):
                status, body = await http_request(
                    self._network,
                    self.name,
                    node.config.port,
                    kind.value,
                    key.encode(),
                    sent_value,
                    replicas,
                )
        except (TimeoutError, OSError):
            status = None
        completed = None if status is None else loop.time()
        if kind is Kind.GET:
            value = body if status == 200 else None
        op = Op(kind, key, value, invoked, completed, status, node=node.name, replicas=replicas)
        self._history.append(op)
        self._trace.add("op", kind.value, key, value, invoked, completed, status, node.name)

    def _once(self, rng: random.Random) -> tuple[Kind, str]:
        """The next request on the client's write-once keys: a read of one it deleted
        lately (one time in three, when there is one), else the delete of one left idle
        for its while, else a new one written. Idle for longer than the versions' spread
        (a few seconds), a key's value precedes its delete in every clock's order, so a
        value seen after the delete has come back: it is not a write the delete's
        version could lose to."""
        if self._deleted_once and rng.random() < 1 / 3:
            return Kind.GET, rng.choice(self._deleted_once[-RECENTLY_DELETED:])
        now = asyncio.get_running_loop().time()
        for index, (due, key) in enumerate(self._written_once):
            if due <= now:
                del self._written_once[index]
                self._deleted_once.append(key)
                return Kind.DELETE, key
        key = f"{self.name}-once{self._sent + 1}"
        self._written_once.append((now + rng.uniform(*IDLE), key))
        return Kind.PUT, key
