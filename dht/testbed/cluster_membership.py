"""The membership changes of a running `python -m dht cluster`: `add` starts a node with
`--join` and `remove` stops one (or, if its process is gone, removes it as dead), with
the change (dht/membership/driver.py) driven in between; an unfinished change is
finished by the next. A mixin of `LocalCluster` (local_cluster.py), whose lock guards
every field used here.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dht.model.topology import STABLE, TopologyState
from dht.testbed.cluster_control import ActionFailed, Held, one_at_a_time
from dht.testbed.node_processes import START_DEADLINE, stop_all, wait_until_serving
from dht.testbed.workers import shared_range


@dataclass(frozen=True)
class Change:
    """An add or remove whose membership change has begun and not ended: the next add or
    remove finishes it first (the change resumes from the step the nodes reached)."""

    action: str  # "add" or "remove"
    url: str  # the node added or removed
    new: tuple[str, ...]  # every node once it is done
    dead: tuple[str, ...] = ()  # removed nodes whose process is gone: asked nothing


class MembershipChanges:
    # The fields of LocalCluster these methods share with it, under `lock`.
    lock: threading.Lock
    changing: threading.Lock  # one add, remove, restart or wipe at a time
    unfinished: Change | None
    fixed_membership: str | None
    chaos: bool
    closing: bool
    host: str
    data_dir: Path
    environment: dict[str, str]
    urls: list[str]
    processes: dict[str, subprocess.Popen[bytes]]
    unwatched: dict[str, subprocess.Popen[bytes]]
    data_dirs: dict[str, Path]
    highest_port: int
    highest_index: int
    command_for: Callable[[str, Path, list[str]], list[str]]
    control: object | None

    if TYPE_CHECKING:  # LocalCluster's, which mixes this in

        @property
        def secret(self) -> str | None: ...

        def _write_control_file(self) -> None: ...

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
            with self.lock:
                gone = self.processes[url].poll() is not None
            if gone:
                say(
                    f"{url} is down: removing it as dead (the nodes that stay hand off "
                    "what it held from their own copies)"
                )
            self.unfinished = Change("remove", url, new, (url,) if gone else ())
            self._change(urls, new, say, self.unfinished.dead)
            self._finish(say)

    def _one_change(self) -> Held:
        if self.fixed_membership is not None:
            raise ActionFailed(self.fixed_membership)
        if self.chaos:
            raise ActionFailed(
                "a --chaos cluster cannot add or remove nodes: its Toxiproxy links are "
                "made for the nodes it started with"
            )
        return one_at_a_time(self.changing)

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
            command = self.command_for(url, data_dir, [*urls, url])
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

    def _change(
        self,
        via: list[str],
        new: tuple[str, ...],
        say: Callable[[str], None],
        dead: tuple[str, ...] = (),
    ) -> None:
        import asyncio

        import aiohttp

        from dht.membership.driver import ChangeFailed, change_membership, summary_lines

        try:
            report = asyncio.run(
                change_membership(
                    [url for url in via if url not in dead],
                    list(new),
                    dead=list(dead),
                    secret=self.secret,
                    say=say,
                )
            )
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
            self._change(urls, change.new, say, change.dead)
        self._finish(say)
        if (action, url) != (change.action, change.url if action == "remove" else None):
            say(f"that was all: run `cluster {action}` again for the change you asked for")


def free_port_after(host: str, port: int) -> int:
    """The first port above `port` nothing listens on (a bind says so), in this test
    worker's share of ports (workers.py; all of them outside a test run)."""
    for candidate in shared_range(port + 1, 65536):
        with socket.socket() as sock:
            try:
                sock.bind((host, candidate))
            except OSError:
                continue
        return candidate
    raise ActionFailed(f"no free port above {port}")


def topology_state(urls: list[str]) -> TopologyState:
    """The membership state of the first of `urls` that answers."""
    from dht.transport.wire import TOPOLOGY_PATH

    errors = []
    for url in urls:
        try:
            with urllib.request.urlopen(url + TOPOLOGY_PATH, timeout=5.0) as response:
                return TopologyState.from_json(json.loads(response.read()))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    raise ActionFailed("no node answered: " + "; ".join(errors))
