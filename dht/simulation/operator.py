"""The operator's side of a membership change: dht's own driver
(`dht.membership.driver.change_membership`), its HTTP requests carried by the simulated
network to the node each names and answered there by the code behind the route
(`SimNode.admin`). A cut link is silent until the request's deadline (aiohttp's 10 s
total), a node that is down refuses the connection: what the driver meets on a real
network."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from dht.simulation.network import Network
from dht.simulation.sim_node import SimNode

OPERATOR = "operator"
REQUEST_DEADLINE = 10.0  # the driver's aiohttp session's


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body

    async def text(self) -> str:
        return self._body.decode()

    async def json(self) -> Any:
        return json.loads(self._body)


class OperatorSession:
    """What the driver uses of an `aiohttp.ClientSession`: `get` and `put`, each an async
    context manager giving the answer."""

    def __init__(self, network: Network, nodes: Sequence[SimNode]) -> None:
        self._network = network
        self._ports = {node.config.self_url: node.config.port for node in nodes}

    def get(self, url: str) -> Any:
        return self._request("GET", url, b"")

    def put(self, url: str, json: Any = None) -> Any:
        return self._request("PUT", url, _dumps(json))

    @asynccontextmanager
    async def _request(self, method: str, url: str, body: bytes) -> AsyncIterator[Response]:
        parts = urlsplit(url)
        port = self._ports[f"{parts.scheme}://{parts.netloc}"]

        async def answer(node: SimNode) -> tuple[int, bytes]:
            return await node.admin(method, parts.path, body)

        async with asyncio.timeout(REQUEST_DEADLINE):
            status, answered = await self._network.request(OPERATOR, port, answer)
        yield Response(status, answered)


def _dumps(data: Any) -> bytes:
    return json.dumps(data).encode()
