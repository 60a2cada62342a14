"""The cockpit: one live page over a running cluster, served by `python -m dht cockpit`
(and started by `python -m dht cluster`, on --dashboard-port).

The page (dht/testbed/cockpit.html) polls every node's `/v0/status` and `/metrics` and, with the
chaos test bed, Toxiproxy's API, and computes everything it shows itself. This server is
only a thin reverse proxy in front of those APIs, so the browser talks to one origin:
the nodes and Toxiproxy send no CORS headers, and Toxiproxy refuses any request that
looks like it comes from a browser. It adds no state and no API of its own besides
`/cockpit.json`, the list of what there is to poll.

Routes:
    GET  /                              the page
    GET  /cockpit.json                  {"nodes": [{"name", "url"}, ...], "toxiproxy": bool}
    GET  /nodes/{index}/v0/status       proxied to node `index` (0-based), 1 s deadline
    GET  /nodes/{index}/metrics         the same for its Prometheus metrics
    GET|POST|DELETE /toxiproxy/{path}   proxied to Toxiproxy's API (404 without one)
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources

import aiohttp
from aiohttp import web
from yarl import URL

log = logging.getLogger("dht.testbed.cockpit")

# A node that cannot answer its status within a second is down as far as an operator is
# concerned; waiting longer would only make the page lag behind the cluster.
NODE_TIMEOUT = aiohttp.ClientTimeout(total=1.0)
# Toxiproxy's /reset and toxic removal can hang for 25 s before answering 503
# (Shopify/toxiproxy#558), so its calls get longer than that, and the page says so.
TOXIPROXY_TIMEOUT = aiohttp.ClientTimeout(total=30.0)
# The header the page sends with every change to Toxiproxy. Another web page cannot set
# it on a cross-origin request without a CORS preflight, which this server never grants,
# so a page on the internet cannot cut the links of a cluster on localhost.
ACTION_HEADER = "X-Cockpit"
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
_NODE_PATHS = "v0/status|metrics"


@dataclass(frozen=True)
class CockpitConfig:
    """What the cockpit serves: the nodes' URLs in cluster order (named node1, node2, ...
    like the test bed's links), and Toxiproxy's API URL when the test bed runs."""

    nodes: tuple[str, ...]
    toxiproxy: str | None = None
    host: str = "127.0.0.1"
    port: int = 8079


def node_names(count: int) -> list[str]:
    """node1, node2, ...: the names the test bed gives the links (`node1-to-node2`)."""
    return [f"node{index + 1}" for index in range(count)]


def load_page() -> bytes:
    """The page, shipped as package data next to this module (pyproject.toml)."""
    return resources.files("dht.testbed").joinpath("cockpit.html").read_bytes()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Cockpit:
    """The handlers, sharing one client session for the app's lifetime (connections to
    the nodes are reused from one poll to the next)."""

    def __init__(self, config: CockpitConfig) -> None:
        self.config = config
        self.names = node_names(len(config.nodes))
        self.page = load_page()
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the app's cleanup context opens the session"
        return self._session

    async def session_context(self, app: web.Application) -> AsyncIterator[None]:
        # Opened inside the running loop (a session binds to it) and kept: its pooled
        # keep-alive connections serve every poll, so a refresh costs no new handshakes.
        self._session = aiohttp.ClientSession()
        try:
            yield
        finally:
            await self._session.close()

    def app(self) -> web.Application:
        app = web.Application()
        app.cleanup_ctx.append(self.session_context)
        app.router.add_get("/", self.index, allow_head=False)
        app.router.add_get("/cockpit.json", self.manifest, allow_head=False)
        app.router.add_get("/nodes/{index}/{path:" + _NODE_PATHS + "}", self.node, allow_head=False)
        for method in ("GET", "POST", "DELETE"):
            app.router.add_route(method, "/toxiproxy/{path:.*}", self.toxiproxy)
        return app

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.page,
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "no-store"},
        )

    async def manifest(self, request: web.Request) -> web.Response:
        nodes = [
            {"name": name, "url": url}
            for name, url in zip(self.names, self.config.nodes, strict=True)
        ]
        return web.json_response(
            {"nodes": nodes, "toxiproxy": self.config.toxiproxy is not None},
            headers={"Cache-Control": "no-store"},
        )

    async def node(self, request: web.Request) -> web.Response:
        text = request.match_info["index"]
        index = int(text) if text.isascii() and text.isdigit() else -1
        if not 0 <= index < len(self.config.nodes):
            raise web.HTTPNotFound(
                text=f"no node {text}: the cluster has nodes 0 to {len(self.config.nodes) - 1}\n"
            )
        name, url = self.names[index], self.config.nodes[index]
        target = f"{url}/{request.match_info['path']}"
        return await self._forward(
            "GET", target, None, None, NODE_TIMEOUT, f"{name} ({url})", "1 s"
        )

    async def toxiproxy(self, request: web.Request) -> web.Response:
        if self.config.toxiproxy is None:
            raise web.HTTPNotFound(
                text="no Toxiproxy: start the cluster with --chaos to get the link controls\n"
            )
        if not self._local_request(request):
            raise web.HTTPForbidden(
                text=f"the cockpit serves the Toxiproxy API to {self.config.host} only, "
                f"not to Host {request.host}\n"
            )
        if request.method != "GET" and request.headers.get(ACTION_HEADER) != "1":
            raise web.HTTPForbidden(
                text=f"a change to Toxiproxy needs the header {ACTION_HEADER}: 1 (the "
                "cockpit page sends it), so that other web pages cannot make one\n"
            )
        # The raw (still percent-encoded) path and query, so a name reaches Toxiproxy as
        # the page wrote it.
        raw = request.rel_url.raw_path_qs[len("/toxiproxy") :]
        target = self.config.toxiproxy.rstrip("/") + raw
        body = await request.read() if request.method == "POST" else None
        answer = await self._forward(
            request.method,
            target,
            body,
            request.headers.get("Content-Type"),
            TOXIPROXY_TIMEOUT,
            f"Toxiproxy ({self.config.toxiproxy})",
            f"{TOXIPROXY_TIMEOUT.total:.0f} s",
        )
        if request.method != "GET":
            log.info("Toxiproxy %s %s: %d", request.method, raw, answer.status)
        return answer

    def _local_request(self, request: web.Request) -> bool:
        """Whether the Host header names this server, when it listens on loopback only.
        A DNS-rebinding page would send its own host name, and gets nothing."""
        if self.config.host in _WILDCARD_HOSTS:
            return True
        try:
            hostname = URL(f"http://{request.host}").host or ""
        except ValueError:  # a Host header that is no host at all
            return False
        return hostname.strip("[]") in _LOOPBACK_NAMES | {self.config.host}

    async def _forward(
        self,
        method: str,
        target: str,
        body: bytes | None,
        content_type: str | None,
        limit: aiohttp.ClientTimeout,
        who: str,
        deadline: str,
    ) -> web.Response:
        """One call upstream; its status, body and content type come back unchanged, with
        how long it took in Server-Timing (what the page shows as a node's latency). No
        answer is a 502 with one line saying why, which the page shows as is."""
        headers = {"Content-Type": content_type} if content_type else {}
        started = time.perf_counter()
        try:
            async with self.session.request(
                method,
                URL(target, encoded=True),
                data=body,
                headers=headers,
                timeout=limit,
                allow_redirects=False,
            ) as upstream:
                payload = await upstream.read()
                status = upstream.status
                upstream_type = upstream.headers.get("Content-Type")
        except TimeoutError:
            return _bad_gateway(f"{who} did not answer within {deadline}")
        except aiohttp.ClientConnectorError as exc:
            return _bad_gateway(f"{who} refused the connection: {_one_line(exc.os_error)}")
        except aiohttp.ClientError as exc:
            return _bad_gateway(f"{who} failed: {_one_line(exc)}")
        elapsed_ms = (time.perf_counter() - started) * 1000
        response = web.Response(
            status=status,
            body=payload,
            headers={
                "Cache-Control": "no-store",
                "Server-Timing": f"upstream;dur={elapsed_ms:.1f}",
            },
        )
        if upstream_type:
            response.headers["Content-Type"] = upstream_type
        return response


def _bad_gateway(reason: str) -> web.Response:
    return web.Response(status=502, text=reason + "\n", headers={"Cache-Control": "no-store"})


def make_app(config: CockpitConfig) -> web.Application:
    return Cockpit(config).app()


async def serve(config: CockpitConfig) -> None:
    """Serves until SIGTERM or SIGINT; raises OSError if the port cannot be bound."""
    runner = web.AppRunner(make_app(config), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, config.host, config.port).start()
        log.info("dashboard on http://%s:%d/", config.host, config.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run_cockpit(config: CockpitConfig) -> int:
    """Runs the cockpit until a signal; 1 with a one-line error if it cannot listen."""
    import uvloop

    try:
        uvloop.run(serve(config))
    except OSError as exc:  # the port is taken, the address is not ours, ...
        log.error("cannot start the dashboard on %s:%d: %s", config.host, config.port, exc)
        return 1
    return 0
