"""The fault-injection test bed: a Toxiproxy server with one proxy per directed link.

Node A reaches node B through the proxy named `nodeA-to-nodeB`, so every node-to-node
byte crosses Toxiproxy, and one link can be slowed or cut without touching the others
(a single proxy per node could only cut a node's incoming traffic, not a two-way
partition). Clients talk to nodes directly. Here the nodes are told (`--route`) to dial
their peers through the links; netns.py gives the same links to nodes that cannot be
told, and shares with this module what makes a link a fault: `ToxiproxyServer`, `Link`
and `LinkFaults`.

Needs toxiproxy-python (the `test` extra) and a toxiproxy-server binary: `make test`
builds one into .tools/bin; $DHT_TOXIPROXY_SERVER or PATH can name another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from toxiproxy.proxy import Proxy

from dht.config import url_port
from dht.testbed.workers import BLOCK, in_share, shared_range

log = logging.getLogger(__name__)

_REPO_BINARY = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "toxiproxy-server"
_START_DEADLINE = 10.0
# A call to Toxiproxy's API that is not /reset: creating a proxy, cutting one, adding a
# toxic. toxiproxy-python's own calls wait for ever; a test bed's must not.
_CALL_TIMEOUT = 10.0


def find_toxiproxy_server() -> str:
    for candidate in (
        os.environ.get("DHT_TOXIPROXY_SERVER"),
        str(_REPO_BINARY) if _REPO_BINARY.exists() else None,
        shutil.which("toxiproxy-server"),
    ):
        if candidate:
            return candidate
    raise FileNotFoundError(
        "toxiproxy-server not found: run `make test` once (it builds .tools/bin/"
        "toxiproxy-server), or set DHT_TOXIPROXY_SERVER"
    )


def node_name(index: int) -> str:
    return f"node{index + 1}"


def link_name(source: int, target: int) -> str:
    return f"{node_name(source)}-to-{node_name(target)}"


# Linux's range of ports it gives a connection as its own end (connect() without bind).
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# How many ports below that range are drawn from.
LISTEN_SPAN = 12_000


def listen_ports() -> Sequence[int]:
    """The ports to choose for a process that will listen later: below the kernel's
    ephemeral range, which it never gives a connection as its own end. A port chosen
    inside that range could be taken, before its node binds it, as the local end of any
    connection (a peer started earlier connecting out): found as "address already in
    use" by CI runs. Only this test worker's share of them (workers.py), so workers
    running at once never choose the same port. Empty where the range cannot be read
    (the kernel then chooses)."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    start = max(1024, low - LISTEN_SPAN)
    return shared_range(start, low) if low - start >= 1000 else range(0)


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port`: its sockets' inodes
    (/proc/PID/fd) against the listeners of its own network namespace
    (/proc/PID/net/tcp and tcp6, state 0A). False for a process gone; True on a system
    without /proc, which cannot tell."""
    if not Path("/proc/self/fd").is_dir():
        return True
    listeners: set[str] = set()
    try:
        for table in ("tcp", "tcp6"):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    listeners.add(f"socket:[{fields[9]}]")
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except (OSError, IndexError, ValueError):
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(descriptor) in listeners:
                return True
    return False


def free_ports(count: int, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """`count` distinct free ports, none of them in `avoid` (ports promised to processes
    that have not bound them yet), drawn from `listen_ports`: every socket stays bound
    until all are chosen, or the same port could be chosen twice."""
    avoided = set(avoid)
    candidates = listen_ports()
    draw = random.Random()
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        for _ in range(100 * count if candidates else 0):
            if len(chosen) == count:
                break
            port = draw.choice(candidates)
            if port in avoided or port in chosen:
                continue
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue
            chosen.append(port)
        while len(chosen) < count:  # no range to draw from, or too few free in it
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in avoided and port not in chosen and in_share(port):
                chosen.append(port)
        return chosen


def consecutive_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` (at most BLOCK) consecutive free ports, for a command that numbers its
    nodes from one (`dht cluster --base-port`): inside one block of this test worker's
    share (workers.py), below the kernel's ephemeral range like `free_ports`."""
    if not 1 <= count <= BLOCK:
        raise ValueError(f"between 1 and {BLOCK} consecutive ports, not {count}")
    ports = listen_ports()
    bases = [port for port in ports if port % BLOCK == 0 and port + count - 1 <= ports[-1]]
    if not bases:  # no range to draw from: the kernel's choices
        bases = [port for port in free_ports(100) if in_share(port + count - 1)]
    for base in random.Random().sample(bases, min(200, len(bases))):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind((host, port))
            except OSError:
                continue
        return list(range(base, base + count))
    raise RuntimeError(f"no {count} consecutive free ports")


def ports_needed(nodes: int) -> int:
    """Ports a test bed listens on: its API and one proxy per directed link."""
    return 1 + nodes * (nodes - 1)


class Link(Proxy):  # type: ignore[misc]  # toxiproxy-python has no type hints
    """A toxiproxy-python `Proxy` bound to the server that holds it. The library's own
    calls go to one API address for the whole process (a class attribute), and wait for
    ever; a test bed with a server per network namespace needs each proxy to reach its
    own server, within a deadline. The methods a scenario calls keep their names."""

    def __init__(self, api_url: str, **fields: Any) -> None:
        super().__init__(**fields)
        self.api_url = api_url

    def _call(self, method: str, path: str, body: Any = None) -> requests.Response:
        answer = requests.request(
            method, f"{self.api_url}/proxies/{self.name}{path}", json=body, timeout=_CALL_TIMEOUT
        )
        answer.raise_for_status()
        return answer

    def disable(self) -> None:
        """Drops the link's connections and refuses new ones."""
        self._call("POST", "", {"enabled": False})
        self.enabled = False

    def enable(self) -> None:
        self._call("POST", "", {"enabled": True})
        self.enabled = True

    def add_toxic(self, **toxic: Any) -> None:
        """`type`, `stream`, `name`, `toxicity` and `attributes`, as toxiproxy-python takes
        them."""
        stream = toxic.get("stream", "downstream")
        self._call(
            "POST",
            "/toxics",
            {
                "name": toxic.get("name", f"{toxic['type']}_{stream}"),
                "type": toxic["type"],
                "stream": stream,
                "toxicity": toxic.get("toxicity", 1.0),
                "attributes": toxic.get("attributes", {}),
            },
        )

    def toxics(self) -> dict[str, dict[str, Any]]:
        return {toxic["name"]: toxic for toxic in self._call("GET", "/toxics").json()}

    def destroy_toxic(self, name: str) -> None:
        self._call("DELETE", f"/toxics/{name}")

    def destroy(self) -> None:
        self._call("DELETE", "")


class ToxiproxyServer:
    """One toxiproxy-server process, its API on `host`:`port`, and the proxies made on
    it, remembered so that a new process can be given the same ones (`restart`).
    `prefix` goes before the server's argv and `preexec_fn` runs in the child before it
    starts (netns.py uses them to start it in a network namespace, dying with its
    parent)."""

    def __init__(
        self,
        host: str,
        port: int,
        log_path: Path | None = None,
        prefix: Sequence[str] = (),
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.log_path = log_path
        self.prefix = list(prefix)
        self.preexec_fn = preexec_fn
        self.process: subprocess.Popen[bytes] | None = None
        self.proxies: dict[str, Link] = {}

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.launch()
        self.wait_until_running()

    def launch(self) -> None:
        """Starts the process without waiting for its API: a test bed launches all its
        servers, then waits for them together."""
        command = [*self.prefix, find_toxiproxy_server(), "-host", self.host]
        command += ["-port", str(self.port)]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec_fn
            )
        finally:
            if self.log_path:
                log.close()  # type: ignore[union-attr]

    def wait_until_running(self) -> None:
        """Until this process answers on its API port. Another Toxiproxy answering on
        the same port is not this one: this one then exits (the port is taken), and a
        test bed that took the other's answer would fault and heal the other's links."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + _START_DEADLINE
        while not (self.running() and listens_on(self.process.pid, self.port)):
            exit_code = self.process.poll()
            if exit_code is not None or time.monotonic() > deadline:
                self.stop()
                why = f"it exited ({exit_code})" if exit_code is not None else "no answer"
                taken = " another process answers there" if self.running() else ""
                raise RuntimeError(
                    f"toxiproxy-server did not start on {self.api_url}: {why};{taken}"
                )
            time.sleep(0.02)

    def running(self) -> bool:
        try:
            return requests.get(f"{self.api_url}/version", timeout=0.5).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def create(self, name: str, listen: str, upstream: str) -> Link:
        answer = requests.post(
            f"{self.api_url}/proxies",
            json={"name": name, "listen": listen, "upstream": upstream, "enabled": True},
            timeout=_CALL_TIMEOUT,
        )
        if not answer.ok:
            raise RuntimeError(
                f"Toxiproxy on {self.api_url} refused the proxy {name} on {listen}: "
                f"{answer.status_code} {answer.text.strip()}"
            )
        fields = answer.json()
        link = Link(self.api_url, **{key: fields[key] for key in _PROXY_FIELDS})
        self.proxies[name] = link
        return link

    def restart(self) -> dict[str, Link]:
        """A new process on the same port with the same proxies, healed: every
        connection through them is dropped. For a server whose control port stopped
        answering (it then may not answer SIGTERM either: SIGKILL). Returns the new
        proxies by name."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.start()
        made, self.proxies = self.proxies, {}
        for name, proxy in made.items():
            self.create(name, proxy.listen, proxy.upstream)
        return self.proxies

    def reset(self, timeout: float) -> bool:
        """Enables every proxy and removes every toxic; False if the server did not
        within `timeout`. Toxiproxy's control port can hang while it removes a latency
        toxic under traffic (Shopify/toxiproxy#558: /reset answers 503 after 25 s, or
        not at all, and the fault stays), even with the proxy disabled first; deleting
        the proxy does not hang. So a proxy with a latency toxic is deleted and made
        anew (the connections through it are dropped, as a restart would drop every
        one), then /reset removes the other toxics, keeping their connections, and
        enables every proxy; it is asked with a deadline, again while there is time
        left."""
        deadline = time.monotonic() + timeout
        try:
            self._remake_toxic_proxies()
        except requests.RequestException as exc:
            log.warning("Toxiproxy %s did not remake its faulted proxies: %s", self.api_url, exc)
        while (left := deadline - time.monotonic()) > 0:
            try:
                answer = requests.post(f"{self.api_url}/reset", timeout=left)
                if answer.ok:
                    return True
                log.warning(
                    "Toxiproxy %s's reset answered %d; trying again",
                    self.api_url,
                    answer.status_code,
                )
            except requests.RequestException as exc:
                log.warning("Toxiproxy %s's reset did not answer: %s", self.api_url, exc)
            time.sleep(0.2)
        return False

    def _remake_toxic_proxies(self) -> None:
        listing = requests.get(f"{self.api_url}/proxies", timeout=_CALL_TIMEOUT)
        listing.raise_for_status()
        for name, proxy in listing.json().items():
            if any(toxic["type"] == "latency" for toxic in proxy["toxics"]):
                gone = requests.delete(f"{self.api_url}/proxies/{name}", timeout=_CALL_TIMEOUT)
                gone.raise_for_status()
                self.create(name, proxy["listen"], proxy["upstream"])


_PROXY_FIELDS = ("name", "listen", "upstream", "enabled")


class LinkFaults:
    """The faults of a test bed whose links are Toxiproxy proxies, on one server
    (`Testbed`) or one per network namespace (netns.py's `NetnsTestbed`): written once,
    so that scenario code works with either. `links[source, target]` is the proxy node
    `source` reaches node `target` through; `servers` every server holding a proxy
    of the test bed."""

    def __init__(self) -> None:
        self.links: dict[tuple[int, int], Link] = {}
        self.servers: list[ToxiproxyServer] = []
        # (start, end) on the monotonic clock of each restart `heal` made: every
        # connection through the restarted server's links was dropped then, a fault of
        # its own.
        self.restarts: list[tuple[float, float]] = []

    def links_into(self, target: int) -> list[Link]:
        return [proxy for (_, dst), proxy in self.links.items() if dst == target]

    def links_out_of(self, source: int) -> list[Link]:
        return [proxy for (src, _), proxy in self.links.items() if src == source]

    def cut(self, links: Iterable[Link]) -> None:
        """Disables links: connections on them are dropped and new ones refused."""
        for proxy in links:
            proxy.disable()

    def isolate(self, index: int) -> None:
        """A two-way partition of one node from all the others."""
        self.cut([*self.links_into(index), *self.links_out_of(index)])

    def add_toxic(
        self, links: Iterable[Link], kind: str, stream: str = "downstream", **attributes: Any
    ) -> None:
        """Adds a toxic (latency, timeout, reset_peer, slicer, bandwidth, ...) to links:
        on `downstream` (the answers coming back) or `upstream` (the requests going out)."""
        for proxy in links:
            proxy.add_toxic(
                type=kind, stream=stream, name=f"{kind}_{stream}", attributes=attributes
            )

    def heal(self, reset_timeout: float = 30.0) -> None:
        """Enables every link and removes every toxic, on every server at once. A server
        that does not reset within `reset_timeout` (ToxiproxyServer.reset says why it
        may not) is restarted with the same links, recorded in `restarts`, rather than
        holding the run up. The restart is made from the calling thread: netns.py's
        servers die with the thread that started them."""
        with ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            healed = list(pool.map(lambda server: server.reset(reset_timeout), self.servers))
        for server, ok in zip(self.servers, healed, strict=True):
            if not ok:
                self.restart_server(server)

    def restart_server(self, server: ToxiproxyServer) -> None:
        """`server` anew with the same proxies; `links` then names the new ones."""
        started = time.monotonic()
        fresh = server.restart()
        for key, proxy in self.links.items():
            if proxy.api_url == server.api_url:
                self.links[key] = fresh[proxy.name]
        self.restarts.append((started, time.monotonic()))
        log.warning("restarted Toxiproxy %s, whose control port stopped answering", server.api_url)


class Testbed(LinkFaults):
    """Starts toxiproxy-server on a free loopback port and a proxy for every link between
    `node_urls` (http://host:port of each node, in cluster order)."""

    __test__ = False  # a name pytest would otherwise try to collect from test modules

    def __init__(
        self,
        node_urls: list[str],
        log_path: Path | None = None,
        ports: list[int] | None = None,
        avoid: Iterable[int] = (),
    ) -> None:
        """`ports` (ports_needed(len(node_urls)) of them) are where the API and the links
        listen; by default free ones, chosen now, other than the nodes' ports and `avoid`
        (the nodes may not listen yet)."""
        super().__init__()
        self.node_urls = node_urls
        self._ports = ports or free_ports(
            ports_needed(len(node_urls)), avoid=[*map(url_port, node_urls), *avoid]
        )
        self.server = ToxiproxyServer("127.0.0.1", self._ports[0], log_path)
        self.servers = [self.server]

    @property
    def api_port(self) -> int:
        return self.server.port

    @property
    def api_url(self) -> str:
        return self.server.api_url

    def start(self) -> Testbed:
        self.server.start()
        link_ports = iter(self._ports[1:])
        for source in range(len(self.node_urls)):
            for target in range(len(self.node_urls)):
                if source != target:
                    self.links[source, target] = self.server.create(
                        link_name(source, target),
                        f"127.0.0.1:{next(link_ports)}",
                        urlsplit(self.node_urls[target]).netloc,
                    )
        return self

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        """A new toxiproxy-server on the same ports with the same links, healed: every
        connection through a link is dropped. For a server whose control port stopped
        answering."""
        self.restart_server(self.server)

    def route_args(self, source: int) -> list[str]:
        """The `--route` flags that make node `source` dial its peers through the links."""
        args: list[str] = []
        for (src, target), proxy in self.links.items():
            if src == source:
                args += ["--route", f"{self.node_urls[target]}=http://{proxy.listen}"]
        return args
