"""`python -m dht cluster`: a local cluster of N node processes in one command.

Starts every node, waits until each answers /v0/status, prints the URLs, and on Ctrl-C or
SIGTERM stops them all (SIGTERM, then SIGKILL for any that linger): no orphans. Then it
starts the dashboard (`python -m dht cockpit`, dht/testbed/cockpit.py) as one more child, which is
stopped with the nodes; the cluster runs on without it if it cannot start.

While it runs, `python -m dht cluster add` and `python -m dht cluster remove URL` change
its membership. The running command writes `<data-dir>/cluster.json` (its pid, host, node
URLs, and the port and token of a control server on 127.0.0.1), and the control server,
in threads of its own, does the work: starts the new node with `--join` or stops the
removed one, and drives the change (dht/testbed/membership.py) in between, streaming
each step back to the command that asked. The nodes and their processes are shared by the
main loop, which watches them, and those threads: `LocalCluster` keeps them under a lock.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from dht.config import node_flags, url_port
from dht.model.topology import STABLE, TopologyState

if TYPE_CHECKING:
    from dht.testbed.membership import ChangeReport
    from dht.testbed.toxiproxy import Testbed

log = logging.getLogger("dht.testbed.cluster")

START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
DASHBOARD_DEADLINE = 10.0
CONTROL_FILE = "cluster.json"
TOKEN_HEADER = "X-Dht-Cluster-Token"
# How long `cluster add`/`remove` waits for the next line from the running cluster: more
# than a step of the change may take without a word (its step deadline is 120 s).
ACTION_READ_TIMEOUT = 300.0


def node_command(
    port: int, data_dir: Path, cluster: list[str], host: str, extra: list[str]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dht",
        "node",
        "--port",
        str(port),
        "--host",
        host,
        "--data-dir",
        str(data_dir),
        "--cluster",
        ",".join(cluster),
        *extra,
    ]


def passed_settings(args: argparse.Namespace) -> list[str]:
    """The node flags given to `cluster`, as command-line arguments for each node: every
    shared setting (dht/config.py) but the ones that travel in the environment."""
    flags: list[str] = []
    for flag in node_flags():
        declared = flag.setting
        if declared.scope != "shared" or declared.environment is not None:
            continue
        value = getattr(args, flag.name)
        if declared.action == "store_true":
            flags += [flag.flag] if value else []
        elif declared.action == "store_false":
            flags += [] if value else [flag.flag]
        else:
            flags += [flag.flag, str(value)]
    return flags


def wait_until_serving(url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"node {url} exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/v0/status", timeout=0.5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"node {url} did not answer within {START_DEADLINE:.0f}s")


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_DEADLINE
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("node pid %d ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()


def start_testbed(urls: list[str], data_dir: Path, dashboard_port: int) -> Testbed:
    """Toxiproxy on free ports other than the nodes' and the dashboard's, which nothing
    listens on yet."""
    from dht.testbed.toxiproxy import Testbed

    data_dir.mkdir(parents=True, exist_ok=True)
    return Testbed(urls, data_dir / "toxiproxy.log", avoid=[dashboard_port]).start()


def dashboard_command(
    args: argparse.Namespace, urls: list[str], testbed: Testbed | None
) -> list[str]:
    command = [sys.executable, "-m", "dht", "cockpit", "--port", str(args.dashboard_port)]
    command += ["--host", args.host, "--log-level", args.log_level]
    for url in urls:
        command += ["--node", url]
    if testbed is not None:
        command += ["--toxiproxy", testbed.api_url]
    return command


def start_dashboard(
    args: argparse.Namespace, urls: list[str], testbed: Testbed | None
) -> subprocess.Popen[bytes] | None:
    """Starts the cockpit and waits until it answers; None, with the reason logged, if it
    does not. The dashboard is a convenience: a taken port must not stop the cluster."""
    url = f"http://{args.host}:{args.dashboard_port}"
    process = subprocess.Popen(dashboard_command(args, urls, testbed))
    deadline = time.monotonic() + DASHBOARD_DEADLINE
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.error(
                    "the dashboard exited with code %d; the cluster runs on without it "
                    "(--dashboard-port picks another port, 0 none)",
                    process.returncode,
                )
                return None
            try:
                with urllib.request.urlopen(url + "/cockpit.json", timeout=0.5) as response:
                    if response.status == 200:
                        return process
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
    except BaseException:  # Ctrl-C or SIGTERM while waiting: no orphan
        stop_all([process])
        raise
    log.error(
        "the dashboard did not answer on %s within %.0fs; the cluster runs on without it",
        url,
        DASHBOARD_DEADLINE,
    )
    stop_all([process])
    return None


def run_cluster(args: argparse.Namespace) -> int:
    urls = [f"http://{args.host}:{args.base_port + i}" for i in range(args.nodes)]
    extra = passed_settings(args)
    # Closed to forged replica writes out of the box: the nodes share a secret, generated
    # unless one is given. It reaches them through the environment, not argv, so other
    # users of the machine cannot read it from the process list.
    environment = os.environ | {"DHT_SECRET": args.secret or secrets.token_hex(16)}
    cluster = LocalCluster(args.host, args.data_dir, extra, environment, chaos=args.chaos)
    dashboard: subprocess.Popen[bytes] | None = None
    testbed: Testbed | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: Python leaves it ignored when the process starts with it ignored, as
    # a shell that is not interactive starts `python -m dht cluster &`.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.chaos:
            testbed = start_testbed(urls, args.data_dir, args.dashboard_port)
        processes = []
        for index in range(len(urls)):
            data_dir = args.data_dir / f"node-{index + 1}"
            routes = testbed.route_args(index) if testbed else []
            command = node_command(
                args.base_port + index, data_dir, urls, args.host, extra + routes
            )
            process = subprocess.Popen(command, env=environment)
            cluster.supervise(urls[index], process, data_dir)
            processes.append(process)
        deadline = time.monotonic() + START_DEADLINE
        for url, process in zip(urls, processes, strict=True):
            wait_until_serving(url, process, deadline)
        if args.dashboard_port:
            dashboard = start_dashboard(args, urls, testbed)
        cluster.serve_control()
        print(f"dht cluster of {len(urls)} nodes is up; data in {args.data_dir.resolve()}")
        for url in urls:
            print(f"  {url}")
        print(f"try: curl -X PUT -d hello '{urls[0]}/v0/entity?id=greeting'")
        if testbed is not None:
            print(f"Toxiproxy API: {testbed.api_url}  (links: curl {testbed.api_url}/proxies)")
            print("  node1 dials node2 through the proxy node1-to-node2, and so on")
        elif cluster.control is not None:
            print(
                f"python -m dht cluster add --data-dir {args.data_dir} adds a node, "
                "... remove URL removes one"
            )
        if dashboard is not None:
            print(f"dashboard: http://{args.host}:{args.dashboard_port}/")
        print("Ctrl-C stops every node.", flush=True)
        while True:
            if (exited := cluster.exited()) is not None:
                url, code = exited
                log.error("node %s exited with code %d; stopping the cluster", url, code)
                return 1
            if dashboard is not None and dashboard.poll() is not None:
                log.error(
                    "the dashboard exited with code %d; the cluster runs on without it",
                    dashboard.returncode,
                )
                dashboard = None
            time.sleep(0.5)
    except KeyboardInterrupt:
        log.info("stopping the cluster")
        return 0
    except (RuntimeError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 1
    finally:
        stop_all(cluster.close() + ([dashboard] if dashboard is not None else []))
        if testbed is not None:
            testbed.stop()


# -- membership changes of a running cluster ------------------------------------------------


class ActionFailed(Exception):
    """An add or remove that cannot be done, or did not finish; the message says why."""


@dataclass(frozen=True)
class Change:
    """An add or remove whose membership change has begun and not ended: the next add or
    remove finishes it first (the change resumes from the step the nodes reached)."""

    action: str  # "add" or "remove"
    url: str  # the node added or removed
    new: tuple[str, ...]  # every node once it is done


class LocalCluster:
    """The nodes of a running `cluster` and their processes, shared by the main loop,
    which stops the cluster when one exits, and the control server's threads, which add
    and remove nodes; `lock` guards every field the two share."""

    def __init__(
        self,
        host: str,
        data_dir: Path,
        extra: list[str],
        environment: dict[str, str],
        *,
        chaos: bool = False,
    ) -> None:
        self.host = host
        self.data_dir = data_dir
        self.extra = extra
        self.environment = environment
        self.chaos = chaos
        self.token = secrets.token_hex(16)
        self.control: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()
        self.urls: list[str] = []  # the members, in the order they came
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # watched by the main loop
        # Started and not a member yet, or removed and being stopped: stopped on exit with
        # the others, but their exit is no failure of the cluster.
        self.unwatched: dict[str, subprocess.Popen[bytes]] = {}
        self.data_dirs: dict[str, Path] = {}
        self.highest_port = 0  # of any node this run started: a port is never used twice
        self.highest_index = 0  # N of the node-N folders
        self.closing = False
        # One add or remove at a time; `unfinished` is only touched while holding it.
        self.changing = threading.Lock()
        self.unfinished: Change | None = None

    @property
    def secret(self) -> str | None:
        return self.environment.get("DHT_SECRET") or None

    def supervise(self, url: str, process: subprocess.Popen[bytes], data_dir: Path) -> None:
        with self.lock:
            self.urls.append(url)
            self.processes[url] = process
            self.data_dirs[url] = data_dir
            self.highest_port = max(self.highest_port, url_port(url))
            self.highest_index += 1

    def exited(self) -> tuple[str, int] | None:
        """A watched node that has exited, and its exit code."""
        with self.lock:
            for url, process in self.processes.items():
                code = process.poll()
                if code is not None:
                    return url, code
        return None

    # -- the control server and cluster.json ---------------------------------------------

    def serve_control(self) -> None:
        """Serves add and remove on a free port of 127.0.0.1 and says where in
        cluster.json; without them (logged) if that fails."""
        try:
            server = _ControlServer(self)
            self.control = server
            threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
            with self.lock:
                self._write_control_file()
        except OSError as exc:
            log.error("cannot serve cluster add/remove: %s", exc)
            self._stop_control()

    def _write_control_file(self) -> None:
        """Called with `lock` held. Readable by this user only: it holds the token."""
        assert self.control is not None
        data = {
            "pid": os.getpid(),
            "host": self.host,
            "nodes": self.urls,
            "control_port": self.control.server_address[1],
            "token": self.token,
            "chaos": self.chaos,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / CONTROL_FILE
        temporary = path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w") as file:
            json.dump(data, file, indent=2)
            file.write("\n")
        os.replace(temporary, path)

    def _stop_control(self) -> None:
        if self.control is None:
            return
        self.control.shutdown()
        self.control.server_close()
        path = self.data_dir / CONTROL_FILE
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError, AttributeError):
            pass
        self.control = None

    def close(self) -> list[subprocess.Popen[bytes]]:
        """Stops the control server; every node process, to stop. No node starts after."""
        self._stop_control()
        locked = self.lock.acquire(timeout=5.0)  # never hang Ctrl-C on a stuck thread
        try:
            self.closing = True
            return list(self.processes.values()) + list(self.unwatched.values())
        finally:
            if locked:
                self.lock.release()

    # -- add and remove -----------------------------------------------------------------

    def add(self, say: Callable[[str], None]) -> None:
        with self._one_change():
            if self.unfinished is not None:
                self._resume(say, "add", None)
                return
            with self.lock:
                urls = list(self.urls)
            self._check_stable(urls)
            url = self._start_joining(urls, say)
            new = (*urls, url)
            self.unfinished = Change("add", url, new)
            self._change(urls, new, say)
            self._finish(say)

    def remove(self, url: str, say: Callable[[str], None]) -> None:
        with self._one_change():
            if self.unfinished is not None:
                self._resume(say, "remove", url)
                return
            with self.lock:
                urls = list(self.urls)
            if url not in urls:
                raise ActionFailed(f"{url} is not a node of this cluster: {', '.join(urls)}")
            if len(urls) == 1:
                raise ActionFailed(f"{url} is the cluster's last node: stop the cluster instead")
            self._check_stable(urls)
            new = tuple(u for u in urls if u != url)
            self.unfinished = Change("remove", url, new)
            self._change(urls, new, say)
            self._finish(say)

    def _one_change(self) -> _Held:
        if self.chaos:
            raise ActionFailed(
                "a --chaos cluster cannot add or remove nodes: its Toxiproxy links are "
                "made for the nodes it started with"
            )
        if not self.changing.acquire(blocking=False):
            raise ActionFailed("another add or remove is under way on this cluster; wait for it")
        return _Held(self.changing)

    def _start_joining(self, urls: list[str], say: Callable[[str], None]) -> str:
        """Starts a node joining `urls`, not watched yet, and waits until it serves."""
        with self.lock:
            if self.closing:
                raise ActionFailed("the cluster is stopping")
            port = free_port_after(self.host, self.highest_port)
            index = self.highest_index + 1
            while (self.data_dir / f"node-{index}").exists():  # left by an earlier run
                index += 1
            url = f"http://{self.host}:{port}"
            data_dir = self.data_dir / f"node-{index}"
            command = node_command(port, data_dir, [*urls, url], self.host, self.extra)
            process = subprocess.Popen([*command, "--join"], env=self.environment)
            self.unwatched[url] = process
            self.data_dirs[url] = data_dir
            self.highest_port, self.highest_index = port, index
        say(f"started node {url} (data in {data_dir}), joining {len(urls)} nodes")
        try:
            wait_until_serving(url, process, time.monotonic() + START_DEADLINE)
        except RuntimeError as exc:
            stop_all([process])
            with self.lock:
                self.unwatched.pop(url, None)
            raise ActionFailed(str(exc)) from None
        return url

    def _check_stable(self, urls: list[str]) -> None:
        state = topology_state(urls)
        if state.phase != STABLE:
            raise ActionFailed(
                f"a change to {', '.join(state.next or ())} is under way ({state.phase}, "
                f"epoch {state.epoch}): finish it with `python -m dht membership` first"
            )

    def _change(self, via: list[str], new: tuple[str, ...], say: Callable[[str], None]) -> None:
        import asyncio

        import aiohttp

        from dht.testbed.membership import ChangeFailed, change_membership

        try:
            report = asyncio.run(change_membership(via, list(new), secret=self.secret, say=say))
        except ChangeFailed as exc:
            raise ActionFailed(
                f"{exc} (the next `cluster add` or `cluster remove` resumes it first)"
            ) from None
        except (aiohttp.ClientError, OSError, ValueError, KeyError) as exc:  # timeouts too
            raise ActionFailed(
                f"the change stopped: {exc or type(exc).__name__} (the next `cluster add` "
                "or `cluster remove` resumes it first)"
            ) from None
        for line in summary_lines(report):
            say(line)

    def _finish(self, say: Callable[[str], None]) -> None:
        """The unfinished change is done: watch the node it added, or stop the one it
        removed."""
        change = self.unfinished
        assert change is not None
        self.unfinished = None
        with self.lock:
            self.urls = list(change.new)
            if change.action == "add":
                self.processes[change.url] = self.unwatched.pop(change.url)
            else:
                self.unwatched[change.url] = self.processes.pop(change.url)
            if self.control is not None:
                self._write_control_file()
        if change.action == "add":
            say(f"{change.url} is a member; the cluster has {len(change.new)} nodes")
            return
        say(f"stopping {change.url}; the cluster has {len(change.new)} nodes")
        with self.lock:
            process = self.unwatched[change.url]
        stop_all([process])
        with self.lock:
            self.unwatched.pop(change.url, None)
        say(f"{change.url} stopped; its data stays in {self.data_dirs[change.url]}")

    def _resume(self, say: Callable[[str], None], action: str, url: str | None) -> None:
        change = self.unfinished
        assert change is not None
        say(f"first finishing the unfinished {change.action} of {change.url}")
        with self.lock:
            urls = list(self.urls)
        state = topology_state(urls)
        if not (state.phase == STABLE and set(state.current) == set(change.new)):
            self._change(urls, change.new, say)
        self._finish(say)
        if (action, url) != (change.action, change.url if action == "remove" else None):
            say(f"that was all: run `cluster {action}` again for the change you asked for")


class _Held:
    """Releases a lock already acquired when its `with` block ends."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def free_port_after(host: str, port: int) -> int:
    """The first port above `port` nothing listens on (a bind says so)."""
    for candidate in range(port + 1, 65536):
        with socket.socket() as sock:
            try:
                sock.bind((host, candidate))
            except OSError:
                continue
        return candidate
    raise ActionFailed(f"no free port above {port}")


def topology_state(urls: list[str]) -> TopologyState:
    """The membership state of the first of `urls` that answers."""
    from dht.web.membership_api import TOPOLOGY_PATH

    errors = []
    for url in urls:
        try:
            with urllib.request.urlopen(url + TOPOLOGY_PATH, timeout=5.0) as response:
                return TopologyState.from_json(json.loads(response.read()))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    raise ActionFailed("no node answered: " + "; ".join(errors))


def summary_lines(report: ChangeReport) -> list[str]:
    """What a finished change took: seconds per step, records sent and deleted per node."""
    steps = ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in report.step_seconds.items())
    lines = [
        f"membership changed from {len(report.old)} to {len(report.new)} nodes in "
        f"{report.seconds:.2f} s ({steps})"
    ]
    for url in sorted(report.sent):
        lines.append(
            f"  {url}: {report.sent[url]} records sent, {report.deleted.get(url, 0)} deleted"
        )
    for url, kept in sorted(report.kept.items()):
        lines.append(
            f"  {url} still holds {kept} records its owners refused as too far ahead of "
            "their clocks; it offers them again until they are taken (SPEC.md rule 13.2)"
        )
    return lines


class _ControlServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(("127.0.0.1", 0), _ControlHandler)
        self.cluster = cluster


class _ControlHandler(BaseHTTPRequestHandler):
    """POST /add and POST /remove ({"url": ...}) with the token of cluster.json. Answers
    4xx with one `error:` line for a request refused at once, else 200 and the lines of
    the change as they come, then `ok` or one `error:` line (HTTP/1.0: the end of the
    body is the end of the connection)."""

    server: _ControlServer

    def do_POST(self) -> None:
        cluster = self.server.cluster
        if self.headers.get(TOKEN_HEADER) != cluster.token:
            self._answer(403, "error: wrong or missing cluster token")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body: Any = json.loads(self.rfile.read(length) or b"{}")
            url = body.get("url")
        except (ValueError, AttributeError):
            self._answer(400, "error: the body must be a JSON object")
            return
        if self.path == "/add":
            work: Callable[[Callable[[str], None]], None] = cluster.add
        elif self.path == "/remove" and isinstance(url, str):
            work = lambda say: cluster.remove(url, say)  # noqa: E731
        else:
            self._answer(404, "error: POST /add, or /remove with a url")
            return
        self.started = False
        self.gone = False
        try:
            work(self._say)
        except ActionFailed as exc:
            log.error("cluster %s: %s", self.path.strip("/"), exc)
            self._end(f"error: {exc}", 409)
            return
        except Exception as exc:  # a bug: say so rather than drop the connection
            log.exception("cluster %s failed", self.path.strip("/"))
            self._end(f"error: unexpected {type(exc).__name__}: {exc}", 500)
            return
        self._end("ok", 200)

    def _say(self, line: str) -> None:
        log.info("%s", line)
        self._write(line)

    def _end(self, line: str, status: int) -> None:
        if self.started:
            self._write(line)
        else:
            self._answer(status, line)

    def _write(self, line: str) -> None:
        if not self.started:
            self.started = True
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
        if self.gone:
            return
        try:
            self.wfile.write(line.encode() + b"\n")
            self.wfile.flush()
        except OSError:
            self.gone = True  # the asker left; the change goes on to its end

    def _answer(self, status: int, line: str) -> None:
        body = line.encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("control: " + format, *args)


def run_cluster_action(data_dir: Path, action: str, url: str | None) -> int:
    """`cluster add` / `cluster remove URL`: asks the cluster running on `data_dir` and
    prints what it says. 0 once the change is done, 1 with one `error:` line otherwise."""
    path = data_dir / CONTROL_FILE
    try:
        info = json.loads(path.read_text())
        pid, port, token = int(info["pid"]), int(info["control_port"]), str(info["token"])
    except FileNotFoundError:
        return _error(
            f"no cluster is running on {data_dir}: there is no {path} "
            f"(start one with `python -m dht cluster --data-dir {data_dir}`)"
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _error(f"cannot read {path}: {exc}")
    if not _alive(pid):
        return _error(
            f"no cluster is running on {data_dir}: {path} is left by process {pid}, "
            "which has exited"
        )
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/{action}",
        data=json.dumps({"url": url}).encode(),
        headers={TOKEN_HEADER: token, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        response = urllib.request.urlopen(request, timeout=ACTION_READ_TIMEOUT)
    except urllib.error.HTTPError as exc:
        lines = exc.read().decode(errors="replace").strip().splitlines()
        return _error(lines[0].removeprefix("error: ") if lines else f"answer {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return _error(
            f"no cluster is running on {data_dir}: its control port {port} does not "
            f"answer ({reason})"
        )
    try:
        with response:
            for raw in response:
                line = raw.decode(errors="replace").rstrip("\n")
                if line == "ok":
                    return 0
                if line.startswith("error: "):
                    return _error(line.removeprefix("error: "))
                print(line, flush=True)
    except OSError as exc:  # a timeout included
        return _error(f"lost the cluster in the middle of the change: {exc}")
    return _error("the cluster stopped answering before the change ended (was it stopped?)")


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
