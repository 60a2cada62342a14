"""The cockpit: one live page over a running cluster, served by `python -m dht cockpit`
(and started by `python -m dht cluster`, on --dashboard-port).

The page (dht/testbed/cockpit.html) polls every node's `/v0/status` and `/metrics` and, with the
chaos test bed, Toxiproxy's API, and computes everything it shows itself. This server is
mostly a thin reverse proxy in front of those APIs, so the browser talks to one origin:
the nodes and Toxiproxy send no CORS headers, and Toxiproxy refuses any request that
looks like it comes from a browser. What it keeps itself: the fault timeline
(fault_timeline.py), the probe load and its figures (probe.py), recorded experiments
(experiment.py), and, for a cluster started by `python -m dht cluster`, the process
faults it asks of that command (cockpit_faults.py).

Routes:
    GET  /                              the page
    GET  /cockpit.json                  what there is: nodes, Toxiproxy, process faults, probe
    GET  /nodes/{index}/v0/status       proxied to node `index` (0-based), 1 s deadline
    GET  /nodes/{index}/metrics         the same for its Prometheus metrics
    GET|POST|DELETE /toxiproxy/{path}   proxied to Toxiproxy's API (404 without one)
    GET  /processes                     each node's process state, from the cluster
    POST /processes/{index}/{action}    kill, pause, resume, restart or wipe node `index`
    GET  /timeline                      the faults applied, newest first
    GET  /probe                         the probe's figures per node, over its window
    GET  /experiment                    recording or not, and the experiments recorded
    POST /experiment/start|stop         the record switch
    GET  /runs/{folder}/{file}          a recorded experiment's files (plot, summary, ...)

Every route needs the cockpit's token (cockpit_access.py): the cookie that opening the
URL `cluster` prints sets, `Authorization: Bearer TOKEN` or `?token=TOKEN`. Every POST and
DELETE also needs the header X-Cockpit: 1 and a Host naming this server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import aiohttp
from aiohttp import web
from yarl import URL

from dht.history.run_folder import (
    FAULTS_FILE,
    FINAL_FILE,
    HISTORY_FILE,
    PLOT_FILE,
    RUN_FILE,
    SUMMARY_FILE,
)
from dht.testbed.cockpit_access import TOKEN_QUERY, CockpitAccess, new_token, page_url
from dht.testbed.cockpit_faults import (
    PROCESS_ACTIONS,
    ControlAccess,
    ProcessFaults,
    note_link_change,
)
from dht.testbed.experiment import Experiment, ExperimentError
from dht.testbed.fault_timeline import FaultTimeline
from dht.testbed.probe import WINDOW, Probe

log = logging.getLogger("dht.testbed.cockpit")

# A node that cannot answer its status within a second is down as far as an operator is
# concerned; waiting longer would only make the page lag behind the cluster.
NODE_TIMEOUT = aiohttp.ClientTimeout(total=1.0)
# Toxiproxy's /reset and toxic removal can hang for 25 s before answering 503
# (Shopify/toxiproxy#558), so its calls get longer than that, and the page says so.
TOXIPROXY_TIMEOUT = aiohttp.ClientTimeout(total=30.0)
_NODE_PATHS = "v0/status|metrics"
_RUN_FILES = frozenset({PLOT_FILE, SUMMARY_FILE, HISTORY_FILE, FAULTS_FILE, FINAL_FILE, RUN_FILE})


@dataclass(frozen=True)
class CockpitConfig:
    """What the cockpit serves: the nodes' URLs in cluster order (named node1, node2, ...
    like the test bed's links), Toxiproxy's API URL when the test bed runs, the cluster's
    control server when the cluster command runs the nodes, the probe's rate and where
    recorded experiments go."""

    nodes: tuple[str, ...]
    toxiproxy: str | None = None
    host: str = "127.0.0.1"
    port: int = 8079
    # The cluster command's control server, for process faults (None: no such buttons).
    control: ControlAccess | None = None
    # The probe load's operations a second, over every node; 0: none (and no recording).
    probe_rate: float = 5.0
    runs: Path = field(default_factory=lambda: Path.cwd() / "artifacts" / "cockpit-runs")
    # What a request must prove it holds (cockpit_access.py); a fresh one unless given.
    token: str = field(default_factory=new_token, repr=False)
    # Whether the line that says where it serves shows the token: `cluster` gives the
    # token and prints the URL itself.
    show_token: bool = True


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
        self.access = CockpitAccess(config.host, config.port, config.token)
        self._session: aiohttp.ClientSession | None = None
        self.timeline = FaultTimeline()
        self.probe = Probe(list(config.nodes), config.probe_rate)
        self.experiment = Experiment(self.probe, self.timeline, config.runs)
        self.processes = (
            None
            if config.control is None
            else ProcessFaults(config.control, self.names, config.nodes, self.timeline)
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the app's cleanup context opens the session"
        return self._session

    async def session_context(self, app: web.Application) -> AsyncIterator[None]:
        # Opened inside the running loop (a session binds to it) and kept: its pooled
        # keep-alive connections serve every poll, so a refresh costs no new handshakes.
        # The probe has a session of its own, so that its requests waiting on a paused
        # node never hold the connections the page's polls need.
        self._session = aiohttp.ClientSession()
        probe_session = aiohttp.ClientSession()
        tasks = [asyncio.create_task(self.probe.run(probe_session), name="probe")]
        if self.processes is not None:
            tasks.append(asyncio.create_task(self.processes.watch(self.session), name="watch"))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await probe_session.close()
            await self._session.close()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.access.middleware])
        app.cleanup_ctx.append(self.session_context)
        app.router.add_get("/", self.index, allow_head=False)
        app.router.add_get("/cockpit.json", self.manifest, allow_head=False)
        app.router.add_get("/nodes/{index}/{path:" + _NODE_PATHS + "}", self.node, allow_head=False)
        for method in ("GET", "POST", "DELETE"):
            app.router.add_route(method, "/toxiproxy/{path:.*}", self.toxiproxy)
        app.router.add_get("/processes", self.process_states, allow_head=False)
        app.router.add_post("/processes/{index}/{action}", self.process_action)
        app.router.add_get("/timeline", self.faults, allow_head=False)
        app.router.add_get("/probe", self.probe_figures, allow_head=False)
        app.router.add_get("/experiment", self.experiment_state, allow_head=False)
        app.router.add_post("/experiment/{switch:start|stop}", self.record)
        app.router.add_get("/runs/{folder}/{file}", self.run_file, allow_head=False)
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
            {
                "nodes": nodes,
                "toxiproxy": self.config.toxiproxy is not None,
                "processes": self.processes is not None,
                "probe": {"rate": self.config.probe_rate, "window": WINDOW},
            },
            headers={"Cache-Control": "no-store"},
        )

    def _index(self, request: web.Request) -> int:
        text = request.match_info["index"]
        index = int(text) if text.isascii() and text.isdigit() else -1
        if not 0 <= index < len(self.config.nodes):
            raise web.HTTPNotFound(
                text=f"no node {text}: the cluster has nodes 0 to {len(self.config.nodes) - 1}\n"
            )
        return index

    async def node(self, request: web.Request) -> web.Response:
        index = self._index(request)
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
        if not self.access.names_this_server(request):
            raise web.HTTPForbidden(
                text=f"the cockpit serves the Toxiproxy API to {self.config.host} only, "
                f"not to Host {request.host}\n"
            )
        if request.method != "GET":
            self.access.check_action(request)
        # The raw (still percent-encoded) path and query, so a name reaches Toxiproxy as
        # the page wrote it; without the cockpit's token, if the query carried it, which
        # is no business of Toxiproxy's nor of the log line below (found by review).
        url = request.rel_url
        if TOKEN_QUERY in url.query:
            url = url.without_query_params(TOKEN_QUERY)
        raw = url.raw_path_qs[len("/toxiproxy") :]
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
            if answer.status < 300:
                note_link_change(self.timeline, request.method, raw, body or b"")
        return answer

    # -- process faults, the timeline, the probe and recorded experiments ------------------

    def _control(self) -> ProcessFaults:
        if self.processes is None:
            raise web.HTTPNotFound(
                text="no process faults: the nodes were not started by `python -m dht "
                "cluster` (or the cockpit was not given its --cluster-dir)\n"
            )
        return self.processes

    async def process_states(self, request: web.Request) -> web.Response:
        processes = self._control()
        try:
            states = await processes.states(self.session)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            return _bad_gateway(f"the cluster's control server did not answer: {_one_line(exc)}")
        return web.json_response({"nodes": states}, headers={"Cache-Control": "no-store"})

    async def process_action(self, request: web.Request) -> web.Response:
        processes = self._control()
        self.access.check_action(request)
        index = self._index(request)
        action = request.match_info["action"]
        if action not in PROCESS_ACTIONS:
            raise web.HTTPNotFound(text=f"no action {action}: {', '.join(PROCESS_ACTIONS)}\n")
        status, text = await processes.act(self.session, action, index)
        return web.Response(status=status, text=text + "\n", headers={"Cache-Control": "no-store"})

    async def faults(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"faults": self.timeline.as_json()}, headers={"Cache-Control": "no-store"}
        )

    async def probe_figures(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"rate": self.probe.rate, "window": WINDOW, "nodes": self.probe.stats()},
            headers={"Cache-Control": "no-store"},
        )

    async def experiment_state(self, request: web.Request) -> web.Response:
        return web.json_response(self.experiment.as_json(), headers={"Cache-Control": "no-store"})

    async def record(self, request: web.Request) -> web.Response:
        self.access.check_action(request)
        try:
            if request.match_info["switch"] == "start":
                self.experiment.start()
            else:
                await self.experiment.stop(self.session)
        except ExperimentError as exc:
            raise web.HTTPConflict(text=f"{exc}\n") from None
        return web.json_response(self.experiment.as_json(), headers={"Cache-Control": "no-store"})

    async def run_file(self, request: web.Request) -> web.StreamResponse:
        folder, name = request.match_info["folder"], request.match_info["file"]
        known = {result.folder for result in self.experiment.results}
        if folder not in known or name not in _RUN_FILES:
            raise web.HTTPNotFound(text=f"no {folder}/{name} among the recorded experiments\n")
        path = self.config.runs / folder / name
        if not path.is_file():
            raise web.HTTPNotFound(text=f"{folder} has no {name}\n")
        return web.FileResponse(path, headers={"Cache-Control": "no-store"})

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
        if config.show_token:
            log.info("dashboard on %s", page_url(config.host, config.port, config.token))
        else:
            log.info(
                "dashboard on http://%s:%d/ (with the token it was given)", config.host, config.port
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run_cockpit(config: CockpitConfig) -> int:
    """Runs the cockpit until a signal; 1 with a one-line error if it cannot listen.
    asyncio's own loop: the cockpit is the kit's, which installs without uvloop."""
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # the port is taken, the address is not ours, ...
        log.error("cannot start the dashboard on %s:%d: %s", config.host, config.port, exc)
        return 1
    return 0
