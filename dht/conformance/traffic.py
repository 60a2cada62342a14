"""Concurrent quorum clients that record every operation they attempt as a history
(`dht.history.operation.Op`), for the checker to judge once the faults are healed.

Each client thread picks, with its own seeded random, a node, a key from a small key
space (so writes overwrite each other) and an operation, sends it straight to the node
(127.0.0.1, never through Toxiproxy) and records invoke time, completion time and
status. Every PUT sends a value no other operation sends, so a value read names the write
it came from. Some PUTs expire (`ttl=SECONDS`, SPEC.md rule 8.6, 1-3 s by default), so
the history holds deletes, expiring writes and the writes that outlive them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dht.conformance.http_client import entity_url, request, wait_for
from dht.conformance.launcher import Node
from dht.history.operation import Kind, Op, Window
from dht.testbed.toxiproxy import node_name

# How long a client waits after an operation that got no answer before its next one.
REFUSED_PAUSE = 0.05
# How long a final read retries after the heal (a breaker may still be open).
FINAL_READ_DEADLINE = 10.0


@dataclass(frozen=True)
class Mix:
    """Shares of each operation; the rest of 1.0 after PUT and DELETE are GETs.
    `expiring`: the share of PUTs sent with a ttl, a whole number of seconds drawn from
    `ttl_seconds` (both ends included). `delete_replicas`: the `replicas=A/F` of every
    DELETE (None: the node's default, as for the other operations)."""

    put: float = 0.6
    delete: float = 0.1
    expiring: float = 0.25
    ttl_seconds: tuple[int, int] = (1, 3)
    delete_replicas: str | None = None


def key_space(size: int) -> list[str]:
    return [f"key-{index:02d}" for index in range(size)]


def attempt(
    node: Node,
    kind: Kind,
    key: str,
    value: bytes | None,
    timeout: float,
    ttl: int | None = None,
    node_name: str | None = None,
    replicas: str | None = None,
) -> Op:
    """Sends one operation at `replicas` (by default the node's default quorum; a PUT
    with `ttl=SECONDS` when `ttl` is given) and records it. No answer within `timeout`
    (or a lost connection) is recorded with status and completion None."""
    url = entity_url(node.url, node.key(key), replicas) + ("" if ttl is None else f"&ttl={ttl}")
    invoked = time.monotonic()
    body = value if kind is Kind.PUT else None
    try:
        response = request(kind.value, url, body=body, timeout=timeout)
    except OSError:
        return Op(kind, key, value, invoked, None, None, ttl, node_name, replicas)
    completed = time.monotonic()
    if kind is Kind.GET:
        value = response.body if response.status == 200 else None
    return Op(kind, key, value, invoked, completed, response.status, ttl, node_name, replicas)


class Clients:
    """`count` client threads sending operations until `stop` is called. `send` sends
    one to a node of `nodes` and records it: `attempt` for nodes of the course API, an
    adapter's for another store's members (`dht.conformance.adapters`)."""

    def __init__(
        self,
        nodes: Sequence[Any],
        keys: Sequence[str],
        count: int,
        seed: int,
        timeout: float = 1.0,
        mix: Mix = Mix(),
        send: Callable[..., Op] = attempt,
    ) -> None:
        self._send = send
        self._nodes = list(nodes)
        self._keys = list(keys)
        self._seed = seed
        self._timeout = timeout
        self._mix = mix
        self._stopping = threading.Event()
        self._histories: list[list[Op]] = [[] for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._run, args=(index,), name=f"client-{index}", daemon=True)
            for index in range(count)
        ]

    def start(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> list[Op]:
        """Stops every client (each finishes the operation it is in) and returns the
        merged history, in invoke order."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=self._timeout + 5.0)
            if thread.is_alive():
                raise RuntimeError(f"{thread.name} did not stop")
        return sorted((op for ops in self._histories for op in ops), key=lambda op: op.invoked)

    def _run(self, index: int) -> None:
        rng = random.Random(self._seed * 1000 + index)
        history = self._histories[index]
        sequence = 0
        while not self._stopping.is_set():
            number = rng.randrange(len(self._nodes))  # the draw rng.choice would make
            node, name = self._nodes[number], node_name(number)
            key = rng.choice(self._keys)
            draw = rng.random()
            if draw < self._mix.put:
                sequence += 1
                value = f"client{index}-{sequence}".encode()
                ttl = None
                if rng.random() < self._mix.expiring:
                    ttl = rng.randint(*self._mix.ttl_seconds)
                history.append(self._send(node, Kind.PUT, key, value, self._timeout, ttl, name))
            elif draw < self._mix.put + self._mix.delete:
                history.append(
                    self._send(
                        node,
                        Kind.DELETE,
                        key,
                        None,
                        self._timeout,
                        None,
                        name,
                        replicas=self._mix.delete_replicas,
                    )
                )
            else:
                history.append(self._send(node, Kind.GET, key, None, self._timeout, None, name))
            if history[-1].status is None:
                # A dead node refuses at once: without a pause, a client would spin on
                # it, thousands of failed operations a second that say nothing more.
                self._stopping.wait(REFUSED_PAUSE)


def final_read(node: Node, key: str) -> tuple[bytes | None, Window]:
    """A quorum GET, retried while it fails (a breaker may still be open just after the
    heal): the value, or None for 404, and when the answering attempt ran (expiring
    writes are judged against it)."""
    response = wait_for(
        lambda: node.get(key),
        lambda response: response.status in (200, 404),
        deadline=FINAL_READ_DEADLINE,
    )
    completed = time.monotonic()
    value = response.body if response.status == 200 else None
    return value, (completed - response.seconds, completed)
