"""A cluster the kit did not start (`dht-conformance --nodes URL,...`): nodes already
running in containers, on other hosts or under a course's own launcher, graded through
their URLs and acted on only through the commands the user gave (`--kill-command`,
`--start-command`, `--stop-command`, `--pause-command`, `--resume-command`).

What the suite does to the nodes it starts (kill -9, SIGTERM, SIGSTOP, SIGCONT, a new
start) it does here by running those commands. What it can only do to processes it
starts itself (a network namespace, a fake clock, a power-loss filesystem, a small
volume, a node not started yet, flags of its own), and what needs a store of its own
(an empty one, a cluster of another size, a node alone), is skipped with the reason,
never failed. The cluster outlives every test, so each test's keys carry a prefix of
their own (`Node.namespace`, new for every run of the kit too), and each test leaves
the nodes as it found them: serving, none paused or down.
"""

from __future__ import annotations

import secrets
import shlex
import signal
import string
import subprocess
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dht.conformance.http_client import status_code
from dht.conformance.launcher import (
    NODES_ENV,
    READY_DEADLINE,
    STOP_DEADLINE,
    Cluster,
    Node,
    NodeNotReady,
    node_workdir,
)

# What the kit would otherwise do to a node process itself, in the order --help gives.
CONTROLS = ("kill", "start", "stop", "pause", "resume")
CONTROL_ENV = {name: f"DHT_{name.upper()}_COMMAND" for name in CONTROLS}
CONTROL_MEANING = {
    "kill": "kill the node at once, as kill -9 does (e.g. podman kill -s KILL NAME)",
    "start": "start a node that was killed or stopped, on its data (e.g. podman start NAME)",
    "stop": "stop it gracefully with SIGTERM and return once it exited "
    "(e.g. podman stop -t 10 NAME)",
    "pause": "freeze it, as SIGSTOP does (e.g. podman pause NAME)",
    "resume": "let a paused node run on, as SIGCONT does (e.g. podman unpause NAME)",
}
# A control that takes a node away needs the one that gives it back: each test leaves
# the cluster as it found it, for the next.
RESTORED_BY = {"kill": "start", "stop": "start", "pause": "resume"}
PLACEHOLDERS = ("index", "number", "url", "host", "port")
PLACEHOLDER_HELP = """\
  {index}     the node's place in --nodes, from 0
  {number}    the same from 1: node1, node2, ... in the report (and dht-1, dht-2, ...
              in compose.yaml)
  {url}       the node's URL as --nodes gives it; {host} and {port} its parts
"""
# How long one control command may take (a container's start included) before the test
# that ran it fails.
CONTROL_DEADLINE = 60.0
WHERE = "on a running cluster (--nodes)"
# The tiers graded only on nodes the kit starts, and why.
TIER_REASONS = {
    "range": "needs an empty store of its own for each test: a range reads every key "
    "the cluster holds",
    "robustness": "needs nodes the kit starts: after each abuse it checks the node's "
    "process and log, and it sends raw bytes to 127.0.0.1",
    "strict": "needs nodes the kit starts: clusters of 1, 2 and 3 nodes, and ranges over "
    "an empty store",
    "clock": "needs each node's clock faked from outside (libfaketime preloaded into a "
    "process the kit starts)",
    "partition": "needs each node in a network namespace the kit makes when it starts it",
    "power": "needs each node's folder on a power-loss filesystem the kit mounts before "
    "it starts the node",
    "disk": "needs each node's folder on a small volume the kit mounts before it starts the node",
    "nemesis": "applies kill -9, pauses, link faults, clock offsets, power cuts and a full "
    "disk to nodes the kit starts",
}
# Fixtures that make what only the kit's own start of a node can make, and why.
FIXTURE_REASONS = {
    "unstarted_node": "needs a node process the kit starts itself (from its first moment)",
    "start_linked_cluster": "link faults need each node in a network namespace the kit "
    "makes when it starts it",
    "start_powered_cluster": TIER_REASONS["power"],
    "start_clocked_cluster": TIER_REASONS["clock"],
}


class ControlFailed(RuntimeError):
    """A control command could not be run, or exited with an error: the test that ran it
    fails with the command and its last words."""


def parse_node_urls(text: str) -> list[str]:
    """The URLs of `--nodes`, each `http://HOST:PORT`, in order; ValueError with one line
    saying what is wrong otherwise."""
    urls = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(urls):
        raise ValueError(f"--nodes {text!r}: give comma-separated URLs http://HOST:PORT")
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if (
            parts.scheme != "http"
            or not parts.hostname
            or port is None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username is not None
        ):
            raise ValueError(f"--nodes: {url!r} is not a node's URL http://HOST:PORT")
    canonical = [url.rstrip("/") for url in urls]
    if len(set(canonical)) != len(canonical):
        raise ValueError(f"--nodes {text!r} names a node twice")
    return canonical


def control_problem(name: str, template: str) -> str | None:
    """Why `template` cannot be --NAME-command, in one line; None if it can."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field]
    except ValueError as error:
        return f"--{name}-command: {error}"
    unknown = [field for field in fields if field not in PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + placeholder + "}" for placeholder in PLACEHOLDERS)
        return f"--{name}-command: unknown placeholder {{{unknown[0]}}}; use {known}"
    if not shlex.split(template):
        return f"--{name}-command is empty"
    return None


def control_argv(template: str, index: int, url: str) -> list[str]:
    """One control command for the node at `index` of --nodes, split as a shell would
    split it, without one (as the node command is)."""
    parts = urllib.parse.urlsplit(url)
    line = template.format(
        index=index, number=index + 1, url=url, host=parts.hostname, port=parts.port
    )
    return shlex.split(line)


@dataclass(frozen=True)
class Controls:
    """The control commands given, by name (CONTROLS)."""

    commands: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> Controls:
        return cls(
            {name: environment[env] for name, env in CONTROL_ENV.items() if environment.get(env)}
        )

    def environment(self) -> dict[str, str]:
        return {CONTROL_ENV[name]: command for name, command in self.commands.items()}

    def missing(self, used: Iterable[str]) -> list[str]:
        """The controls a test that uses `used` needs and were not given: with each one
        that takes a node away, the one that gives it back."""
        used = set(used)
        needed = used | {RESTORED_BY[name] for name in used if name in RESTORED_BY}
        return [name for name in CONTROLS if name in needed and name not in self.commands]


def skip_reason(
    tier: str | None,
    fixtures: Iterable[str],
    used: Iterable[str],
    lone_because: str | None,
    controls: Controls,
    size: int,
) -> str | None:
    """Why a test cannot be graded on a running cluster of `size` nodes with `controls`,
    in one line for the report; None when it can. `used`: the controls the test
    declares (`@pytest.mark.controls`); `lone_because`: why it needs its node alone in
    its cluster, if it does (`@pytest.mark.lone_node`)."""
    if tier in TIER_REASONS:
        return f"{WHERE}: {tier} {TIER_REASONS[tier]}"
    for fixture in fixtures:
        if fixture in FIXTURE_REASONS:
            return f"{WHERE}: {FIXTURE_REASONS[fixture]}"
    if lone_because is not None and size > 1:
        return (
            f"{WHERE}: needs its node alone in its cluster ({lone_because}); --nodes gives {size}"
        )
    missing = controls.missing(used)
    if missing:
        flags = ", ".join(f"--{name}-command" for name in missing)
        return f"{WHERE}: needs {flags}, not given"
    return None


@dataclass(repr=False)
class RunningNode(Node):
    """A node of a running cluster: reached at its URL, acted on through the control
    commands. Its exit code cannot be seen from outside: `stop`, `kill` and
    `stop_timed` give 0 once nothing answers at its URL any more, None while something
    still does."""

    index: int = 0
    controls: Controls = field(default_factory=Controls)
    down: bool = False
    paused: bool = False
    # Every node of its cluster, itself included (RunningCluster sets it).
    cluster_nodes: list[RunningNode] = field(default_factory=list, compare=False)

    def start(self, wait: bool = True) -> None:
        """Runs --start-command; with `wait`, until the node serves and, when no node of
        the cluster is down or paused, until every node reaches every other again. A
        cluster the kit starts has breakers patient enough that a node just back is
        taken at once; a running cluster keeps its own, and a peer may still hold the
        node for down (an open circuit, a connection to reconnect) for seconds: a test's
        next read through that peer would then fail for a reason that is not its rule's
        (found under load: rule 3.5's read through node 1, 58 ms after node 3 came
        back, a 504 on compose's cluster)."""
        self._control("start", CONTROL_DEADLINE)
        self.down = self.paused = False
        if wait:
            self.wait_ready()
            if all(node.running and not node.paused for node in self.cluster_nodes):
                wait_connected(self.cluster_nodes)

    def wait_ready(self, deadline: float = READY_DEADLINE) -> float:
        started = time.monotonic()
        while time.monotonic() - started < deadline:
            if status_code(self.url) == 200:
                return time.monotonic() - started
            time.sleep(0.05)
        raise NodeNotReady(f"node {self.url}: /v0/status did not answer 200 within {deadline} s")

    def stop(self) -> int | None:
        return self.stop_timed(signal.SIGTERM, STOP_DEADLINE)[0]

    def kill(self) -> int | None:
        return self.stop_timed(signal.SIGKILL, STOP_DEADLINE)[0]

    def stop_timed(self, signum: signal.Signals, within: float) -> tuple[int | None, float]:
        """SIGTERM runs --stop-command, SIGKILL --kill-command, within `within` seconds;
        then waits, in what is left of them, until nothing answers at the node's URL."""
        names = {signal.SIGTERM: "stop", signal.SIGKILL: "kill"}
        if signum not in names:
            raise ValueError(f"a running cluster's node takes SIGTERM or SIGKILL, not {signum}")
        started = time.monotonic()
        finished = self._control(names[signum], within)
        self.down, self.paused = True, False
        while finished and time.monotonic() - started < within:
            if status_code(self.url, timeout=0.5) is None:
                return 0, time.monotonic() - started
            time.sleep(0.05)
        return None, time.monotonic() - started

    def pause(self) -> None:
        self._control("pause", CONTROL_DEADLINE)
        self.paused = True

    def resume(self) -> None:
        self._control("resume", CONTROL_DEADLINE)
        self.paused = False

    @property
    def running(self) -> bool:
        return not self.down

    def log_tail(self, lines: int = 20) -> str:
        return "(a node of a running cluster: its log is where its operator keeps it)"

    def last_log_line(self) -> str:
        return "its log is not the kit's to read (a running cluster)"

    def _control(self, name: str, deadline: float) -> bool:
        """Runs --NAME-command for this node: True once it exited 0, False if it was still
        running at `deadline` (it is killed). A control not given skips the test: one
        that declares its controls (@pytest.mark.controls) is skipped before it starts."""
        template = self.controls.commands.get(name)
        if template is None:
            pytest.skip(f"{WHERE}: needs --{name}-command, not given")
        argv = control_argv(template, self.index, self.url)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=deadline, cwd=node_workdir()
            )
        except subprocess.TimeoutExpired:
            return False
        except OSError as error:
            raise ControlFailed(f"--{name}-command {shlex.join(argv)!r}: {error}") from error
        if done.returncode != 0:
            words = (done.stderr or done.stdout).strip().splitlines()
            raise ControlFailed(
                f"--{name}-command {shlex.join(argv)!r} exited with {done.returncode}: "
                + (words[-1] if words else "(no output)")
            )
        return True


class RunningCluster(Cluster):
    """The nodes of --nodes, one object for the whole run of the suite: the fixtures
    hand it to every test that asks for a cluster of its size."""

    def __init__(self, urls: list[str], controls: Controls) -> None:
        self.urls = urls
        self.controls = controls
        nodes: list[RunningNode] = []
        for index, url in enumerate(urls):
            parts = urllib.parse.urlsplit(url)
            assert parts.hostname is not None and parts.port is not None, url
            nodes.append(
                RunningNode(
                    parts.port,
                    Path(),
                    url,
                    urls,
                    host=parts.hostname,
                    index=index,
                    controls=controls,
                )
            )
        for node in nodes:
            node.cluster_nodes = nodes
        self.nodes = list(nodes)
        # Keys written by another run of the kit against the same nodes are not this
        # run's either.
        self.run = secrets.token_hex(3)
        self.tests = 0

    def start(self) -> RunningCluster:
        """Checks that every node serves; the kit starts none."""
        for node in self.nodes:
            node.wait_ready()
        return self

    def stop(self) -> None:
        """Never stopped by the kit: it is left as each test found it."""
        self.restore()

    def begin_test(self) -> None:
        """A prefix of its own for the next test's keys, on a cluster that serves with
        every node reaching every other (`wait_connected`)."""
        self.tests += 1
        for node in self.nodes:
            node.namespace = f"r{self.run}-t{self.tests}-"
        self.start()
        self.wait_connected()

    def restore(self) -> None:
        """Resumes what a test paused and starts what it killed or stopped."""
        for node in self.nodes:
            if isinstance(node, RunningNode) and node.paused:
                node.resume()
            if isinstance(node, RunningNode) and node.down:
                node.start(wait=False)
        self.start()

    def wait_connected(self, deadline: float = READY_DEADLINE) -> None:
        """A cluster started for each test never has a node that was just down, so
        neither may the next test here (`wait_connected` below)."""
        wait_connected(self.nodes, deadline)


def wait_connected(nodes: Sequence[Node], deadline: float = READY_DEADLINE) -> None:
    """Waits until a GET of an absent key at replicas=N/N through each node answers 404:
    every node coordinates with every other again. A node back from a fault serves at
    once, but its peers may still hold it for down (an open circuit, a connection to
    reconnect) for a few seconds."""
    started = time.monotonic()
    everyone = f"{len(nodes)}/{len(nodes)}"
    for node in nodes:
        while (answer := absent_key_status(node, everyone)) != 404:
            if time.monotonic() - started > deadline:
                raise NodeNotReady(
                    f"{node.url}: GET replicas={everyone} still answers {answer} "
                    f"{deadline} s after the nodes were back"
                )
            time.sleep(0.1)


def absent_key_status(node: Node, replicas: str) -> int | None:
    """What a GET of a key no test writes answers through `node`; None for no answer."""
    try:
        return node.get("never-written-connected", replicas).status
    except OSError:
        return None


def running_cluster(environment: Mapping[str, str]) -> RunningCluster | None:
    """The running cluster the kit was given (DHT_NODES set), else None."""
    text = environment.get(NODES_ENV)
    if not text:
        return None
    return RunningCluster(parse_node_urls(text), Controls.from_environment(environment))
