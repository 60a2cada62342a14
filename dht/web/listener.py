"""The node's one listening port, serving HTTP (aiohttp) and the replica channel.

An aiohttp site whose accepted connections start with `ProtocolSniffer`: the first byte
decides whether HTTP (the lean protocol of `dht.web.lean_http`, which hands what it does
not take to aiohttp's request handler) or a replica channel `ServerConnection` takes
the connection, or (0x16, with TLS between nodes) that TLS comes first. One port keeps
the topology a list of HTTP URLs, and lets every Toxiproxy link carry every kind of
traffic unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web

from dht.model.log_limits import RateLimitedLog
from dht.transport.channel_server import ProtocolSniffer, ReplicaService, ServerConnection
from dht.transport.handshakes import Handshakes
from dht.transport.protocol import Budget
from dht.transport.tls import TlsContexts
from dht.web.lean_http import LeanHttp


class SharedPortSite(web.BaseSite):
    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        service: ReplicaService,
        max_message_bytes: int,
        budget: Budget,
        tls: TlsContexts | None = None,
        lean: LeanHttp | None = None,
        backlog: int = 1024,
    ) -> None:
        """`tls`: when nodes talk TLS, the contexts a TLS connection is taken with.
        `lean`: takes HTTP connections first (it hands them to aiohttp at the first
        request it does not take); without it, aiohttp takes them."""
        super().__init__(runner, backlog=backlog)
        self._lean = lean
        self._tls = tls
        self._host = host
        self._port = port
        self._service = service
        self._max_message = max_message_bytes
        self._budget = budget
        self.channels: set[ServerConnection] = set()

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        http: Callable[[], asyncio.Protocol] | None = self._lean or self._runner.server
        assert http is not None
        if self._lean is not None:
            self._lean.start()
        garbage = RateLimitedLog(logging.getLogger("dht.transport.channel_server"))
        handshakes = Handshakes(garbage)

        def channel() -> ServerConnection:
            return ServerConnection(
                self._service,
                self._max_message,
                self.channels,
                garbage,
                self._budget,
                handshakes,
                self._tls.refusals if self._tls is not None else None,
            )

        self._server = await asyncio.get_running_loop().create_server(
            lambda: ProtocolSniffer(http, channel, self._tls),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
        )

    async def stop(self) -> None:
        """Stops accepting, closes every replica channel, and begins closing the lean
        connections, each once its answer is written (aiohttp closes its own)."""
        await super().stop()
        if self._lean is not None:
            self._lean.begin_shutdown()
        for connection in list(self.channels):
            connection.abort()
