"""The control of a running `python -m dht cluster`: `cluster add`, `cluster remove URL`
and `cluster restart URL` ask it over HTTP on 127.0.0.1, at the port and with the token
the running command wrote in `<data-dir>/cluster.json`, and so does the cockpit for its
process faults (kill -9, pause, resume, restart) and the state of each node's process.
The server, in threads of its own, hands each request to the cluster and streams back the
lines of the change as they come; `run_cluster_action` is the command that asks and
prints them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

# The one logger of `python -m dht cluster`, whichever module of it speaks.
log = logging.getLogger("dht.testbed.cluster")

CONTROL_FILE = "cluster.json"
TOKEN_HEADER = "X-Dht-Cluster-Token"
# How long `cluster add`/`remove` waits for the next line from the running cluster: more
# than a step of the change may take without a word (its step deadline is 120 s).
ACTION_READ_TIMEOUT = 300.0


class ActionFailed(Exception):
    """An add or remove that cannot be done, or did not finish; the message says why."""


class ControlledCluster(Protocol):
    """What the control server serves, to whoever has `token`: membership changes, and
    faults and restarts of one node's process."""

    token: str

    def add(self, say: Callable[[str], None]) -> None: ...

    def remove(self, url: str, say: Callable[[str], None]) -> None: ...

    def restart(self, url: str, say: Callable[[str], None]) -> None: ...

    def kill(self, url: str, say: Callable[[str], None]) -> None: ...

    def pause(self, url: str, say: Callable[[str], None]) -> None: ...

    def resume(self, url: str, say: Callable[[str], None]) -> None: ...

    def wipe(self, url: str, say: Callable[[str], None]) -> None: ...

    def skew(self, url: str, say: Callable[[str], None]) -> None: ...

    def node_states(self) -> list[dict[str, object]]: ...


# The actions on one node (POST /ACTION with {"url": ...}).
NODE_ACTIONS = ("remove", "restart", "kill", "pause", "resume", "wipe", "skew")


class Held:
    """Releases a lock already acquired when its `with` block ends."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def one_at_a_time(changing: threading.Lock) -> Held:
    """Holds `changing` for a `with` block, or raises ActionFailed at once if another
    add, remove, restart, wipe or skew holds it: two of them on one node would start two
    processes on its data folder, or bring back a node being removed."""
    if not changing.acquire(blocking=False):
        raise ActionFailed(
            "another add, remove, restart or wipe is under way on this cluster; wait for it"
        )
    return Held(changing)


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cluster: ControlledCluster) -> None:
        super().__init__(("127.0.0.1", 0), _ControlHandler)
        self.cluster = cluster


class _ControlHandler(BaseHTTPRequestHandler):
    """POST /add, and /ACTION ({"url": ...}) for each of NODE_ACTIONS, with the token of
    cluster.json. Answers 4xx with one `error:` line for a request refused at once, else
    200 and the lines of the change as they come, then `ok` or one `error:` line
    (HTTP/1.0: the end of the body is the end of the connection). GET /nodes answers the
    state of each node's process as JSON."""

    server: ControlServer

    def do_GET(self) -> None:
        if self.headers.get(TOKEN_HEADER) != self.server.cluster.token:
            self._answer(403, "error: wrong or missing cluster token")
        elif self.path != "/nodes":
            self._answer(404, "error: GET /nodes")
        else:
            body = json.dumps({"nodes": self.server.cluster.node_states()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
        action = self.path.strip("/")
        if action == "add":
            work: Callable[[Callable[[str], None]], None] = cluster.add
        elif action in NODE_ACTIONS and isinstance(url, str):
            node_action = getattr(cluster, action)
            work = lambda say: node_action(url, say)  # noqa: E731
        else:
            self._answer(404, f"error: POST /add, or one of /{', /'.join(NODE_ACTIONS)} with a url")
            return
        self.started = False
        self.gone = False
        try:
            work(self._say)
        except ActionFailed as exc:
            log.error("cluster %s: %s", action, exc)
            self._end(f"error: {exc}", 409)
            return
        except Exception as exc:  # a bug: say so rather than drop the connection
            log.exception("cluster %s failed", action)
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
