"""The nodes of a running `python -m dht cluster` and their processes: their start and
restart, and the control server and `cluster.json`. The nodes are shared by the main
loop, which watches them, and the control server's threads (cluster_control.py), which
add, remove, restart and fault them: `LocalCluster` keeps them under a lock. The changes
of its membership (add, remove) are in cluster_membership.py, the faults of one node's
process (kill, pause, resume, wipe, skew) in node_faults.py: mixins over the same
fields.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from dht.config import url_port
from dht.testbed.certificates import LOCAL_HOSTS, LocalCA
from dht.testbed.cluster_control import CONTROL_FILE, ActionFailed, ControlServer, one_at_a_time
from dht.testbed.cluster_membership import Change, MembershipChanges
from dht.testbed.node_faults import NodeFaults
from dht.testbed.node_processes import START_DEADLINE, node_command, stop_all, wait_until_serving

# The one logger of `python -m dht cluster`, whichever module of it speaks.
log = logging.getLogger("dht.testbed.cluster")


class LocalCluster(NodeFaults, MembershipChanges):
    """The nodes of a running `cluster` and their processes, shared by the main loop,
    which logs a node that exits and starts the processes restarts ask for, and the
    control server's threads, which add, remove and restart nodes; `lock` guards every
    field the two share."""

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
        self.toxiproxy: str | None = None  # the API of the --chaos links
        self.token = secrets.token_hex(16)
        self.cockpit: str | None = None  # the cockpit's URL, with its token
        self.control: ControlServer | None = None
        self.lock = threading.Lock()
        self.urls: list[str] = []  # the members, in the order they came
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # watched by the main loop
        # Started and not a member yet, or removed and being stopped: stopped on exit with
        # the others, but their exit is no failure of the cluster.
        self.unwatched: dict[str, subprocess.Popen[bytes]] = {}
        self.data_dirs: dict[str, Path] = {}
        # Members whose process exited while the cluster runs, with the exit code: the
        # others serve on, and `restart` starts them again on their data.
        self.down: dict[str, int] = {}
        self.paused: set[str] = set()  # members stopped with SIGSTOP, until SIGCONT
        self.restarting: set[str] = set()  # no kill, pause or resume meanwhile
        # How a member's process is started (set by the command: with --chaos, in its
        # links), and the restarts waiting for the main thread to start them: a process
        # in a network namespace dies with the thread that started it, and the control
        # server's threads end with each request.
        self.launch: Callable[[str, list[str]], subprocess.Popen[bytes]] = lambda url, command: (
            subprocess.Popen(command, env=self.environment)
        )
        self.to_start: list[tuple[str, list[str], Future[subprocess.Popen[bytes]]]] = []
        # The argv that starts member `url` on its data folder in a cluster of `urls`:
        # dht's own node, unless the command runs another implementation's.
        self.command_for: Callable[[str, Path, list[str]], list[str]]
        self.command_for = lambda url, data_dir, urls: node_command(
            url_port(url), data_dir, urls, self.host, self.extra + self.tls_flags(url)
        )
        # With `cluster --tls`: the CA each node's certificate comes from.
        self.authority: LocalCA | None = None
        # Why `add` and `remove` are refused, if they are: nodes that are not dht's have
        # no membership API for them to drive.
        self.fixed_membership: str | None = None
        # Members restarted with their clock skewed (`skew`), by how many seconds; None
        # when the nodes are not dht's (--node-command), which take no such flag.
        self.skews: dict[str, float] | None = {}
        self.highest_port = 0  # of any node this run started: a port is never used twice
        self.highest_index = 0  # N of the node-N folders
        self.closing = False
        # One add or remove at a time; `unfinished` is only touched while holding it.
        self.changing = threading.Lock()
        self.unfinished: Change | None = None

    def tls_flags(self, url: str) -> list[str]:
        """The TLS flags of node `url` (its certificate, made on first use), if any."""
        if self.authority is None:
            return []
        hosts = tuple(dict.fromkeys([*LOCAL_HOSTS, self.host]))
        return self.authority.issue(f"node-{url_port(url)}", hosts).flags()

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
        """A watched node that has exited since the last call, and its exit code; it is
        down from then until `restart`."""
        with self.lock:
            for url, process in self.processes.items():
                code = process.poll()
                if code is not None and url not in self.down:
                    self.down[url] = code
                    return url, code
        return None

    def start_waiting(self) -> None:
        """Starts, from the calling (main) thread, the processes restarts wait for. Each
        is unwatched from the moment it is started, so that `close()` stops it even if
        the restart's thread has not taken it in yet."""
        with self.lock:
            waiting, self.to_start = self.to_start, []
        for url, command, started in waiting:
            if self.closing:
                started.set_exception(ActionFailed("the cluster is stopping"))
                continue
            try:
                process = self.launch(url, command)
            except OSError as exc:
                started.set_exception(exc)
                continue
            with self.lock:
                self.unwatched[url] = process
            started.set_result(process)

    def restart(self, url: str, say: Callable[[str], None]) -> None:
        """Starts member `url` again on its data folder, stopping it first if it runs,
        and waits until it serves. Never on its own: a node that keeps dying is restarted
        only when asked. One add, remove or restart at a time: two restarts of one node
        would start two processes on its data folder, and a restart during the remove of
        its node would bring the node back."""
        with one_at_a_time(self.changing):
            self._restart(url, say)

    def _restart(self, url: str, say: Callable[[str], None]) -> None:
        with self.lock:
            self._check_member(url)
            if self.closing:
                raise ActionFailed("the cluster is stopping")
            old = self.processes[url]
            if url in self.paused and old.poll() is None:
                old.send_signal(signal.SIGCONT)  # a stopped process cannot stop cleanly
            self.paused.discard(url)
            command = self.command_for(url, self.data_dirs[url], list(self.urls))
            if self.skews and url in self.skews:
                command += ["--clock-skew", f"{self.skews[url]:g}"]  # the last one counts
            started: Future[subprocess.Popen[bytes]] = Future()
            if old.poll() is None:
                self.down[url] = 0  # stopping it is no failure of the cluster
            self.restarting.add(url)
        try:
            if old.poll() is None:
                say(f"stopping {url}")
                stop_all([old])
            with self.lock:
                self.to_start.append((url, command, started))
            process = started.result(timeout=START_DEADLINE)  # unwatched by the main thread
            say(f"started {url} again on {self.data_dirs[url]}")
            try:
                wait_until_serving(url, process, time.monotonic() + START_DEADLINE)
            except RuntimeError as exc:
                raise ActionFailed(str(exc)) from None
            finally:
                with self.lock:
                    self.unwatched.pop(url, None)
                    self.processes[url] = process
                    if process.poll() is None:
                        self.down.pop(url, None)  # watched again: its next exit is told
        finally:
            with self.lock:
                self.restarting.discard(url)
        say(f"{url} serves again")

    # -- the control server and cluster.json ---------------------------------------------

    def serve_control(self) -> None:
        """Serves add and remove on a free port of 127.0.0.1 and says where in
        cluster.json; without them (logged) if that fails."""
        try:
            server = ControlServer(self)
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
            "toxiproxy": self.toxiproxy,
            "cockpit": self.cockpit,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / CONTROL_FILE
        temporary = path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w") as file:
            json.dump(data, file, indent=2)
            file.write("\n")
        os.replace(temporary, path)

    def note_cockpit(self, url: str) -> None:
        """Keeps the cockpit's URL and token in cluster.json, where its owner finds it."""
        with self.lock:
            self.cockpit = url
            if self.control is not None:
                self._write_control_file()

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
