"""The kit grades the compose cluster it did not start (`dht-conformance --nodes`), with
podman's own commands as the controls: compose.yaml's three nodes, each a container,
killed, started, stopped and paused by `podman kill`, `start`, `stop`, `pause` and
`unpause`. Off by default like the image's other tests (DHT_IMAGE_TESTS=1, rootful
podman; skipped with the reason elsewhere).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.test_kit import run_kit
from tests.deploy.test_image import (
    IMAGE_MARKS,
    SERVICES,
    ComposeCluster,
    _compose_up,
    _environment,
    _podman,
    _secrets_folder,
    image,  # noqa: F401  (a fixture)
)
from tests.deploy.test_published_port import START_COMMAND

pytestmark = [*IMAGE_MARKS, pytest.mark.timeout(900)]
TIERS = "core,replication,durability,faults,convergence"


@pytest.fixture
def compose_cluster(image: str, tmp_path: Path) -> Iterator[ComposeCluster]:  # noqa: F811
    folder = _secrets_folder(tmp_path / "secrets")
    yield from _compose_up(folder, ["compose.yaml"], f"dht-kit-test-{os.getpid()}")


def node_logs(cluster: ComposeCluster, lines: int = 80) -> str:
    """The last lines each node logged, so a failed grading says what the nodes saw; and
    what the network under them was: each container's address now, podman's events for
    them (starts, deaths, cleanups), the host's neighbour table and the port forwards.
    A kit run failed once with "No route to host" on a node's published port (ci14):
    this says whether a forward pointed at an address no container had."""
    logs = []
    names = [cluster.container(service) for service in SERVICES]
    for name in names:
        printed = _podman("logs", "--tail", str(lines), name)
        logs.append(f"\n--- podman logs {name} (last {lines} lines) ---\n")
        logs.append(printed.stdout + printed.stderr)
        address = _podman(
            "inspect",
            name,
            "--format",
            "{{.State.Status}} {{range .NetworkSettings.Networks}}{{.IPAddress}} "
            "{{.MacAddress}}{{end}}",
        )
        logs.append(f"--- {name} now: {address.stdout.strip()} {address.stderr.strip()}\n")
    filters = [argument for name in names for argument in ("--filter", f"container={name}")]
    events = _podman("events", "--stream=false", "--since", "15m", *filters)
    logs.append("\n--- podman events of the three containers ---\n" + events.stdout)
    for command in (["ip", "-4", "neigh", "show"], ["iptables-save", "-t", "nat"]):
        shown = subprocess.run(command, capture_output=True, text=True, timeout=30)
        text = shown.stdout if command[0] == "ip" else _forwards(shown.stdout)
        logs.append(f"\n--- {' '.join(command)} ---\n{text}{shown.stderr}")
    logs.append("\n--- connections tracked to a published port, not established ---\n")
    logs.append(_tracked_forwards())
    return "".join(logs)


def _tracked_forwards(most: int = 60) -> str:
    """The kernel's tracked connections from this host to a published port that were
    forwarded to a container and are not established: which address each was sent to.
    A new connection that reuses the source port of one of them keeps its forward, so
    one to an address no container has any more would reach no one (ci18: the host's
    neighbour table held an address of none of the three)."""
    try:
        tracked = Path("/proc/net/nf_conntrack").read_text().splitlines()
    except OSError as error:
        return f"(not readable: {error.strerror})\n"
    forwarded = [
        " ".join(line.split()[4:])
        for line in tracked
        if "dst=127.0.0.1" in line and "src=10." in line and "ESTABLISHED" not in line
    ]
    return "".join(line + "\n" for line in forwarded[-most:]) or "(none)\n"


def _forwards(nat_rules: str) -> str:
    """The DNAT rules of the nat table: where each published port forwards to."""
    return "".join(line + "\n" for line in nat_rules.splitlines() if "DNAT" in line)


def test_the_kit_grades_the_compose_cluster_through_podmans_commands(
    compose_cluster: ComposeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = compose_cluster.container(SERVICES[0])
    name = first.replace(SERVICES[0], "dht-{number}")
    assert [name.format(number=n) for n in (1, 2, 3)] == [
        compose_cluster.container(service) for service in SERVICES
    ], name
    monkeypatch.setenv("CONTAINERS_CONF", _environment()["CONTAINERS_CONF"])
    started = time.monotonic()
    run = run_kit(
        tmp_path / "report",
        "--nodes",
        ",".join(compose_cluster.urls),
        "--kill-command",
        f"podman kill -s KILL {name}",
        "--start-command",
        START_COMMAND.format(name=name, port="{port}"),
        "--stop-command",
        f"podman stop -t 10 {name}",
        "--pause-command",
        f"podman pause {name}",
        "--resume-command",
        f"podman unpause {name}",
        "--tiers",
        TIERS,
        "--quick",
    )
    print(f"the kit on the compose cluster: {time.monotonic() - started:.0f} s\n{run.output}")
    assert run.exit_code == 0, run.output + run.report + node_logs(compose_cluster)
    for tier in TIERS.split(","):
        assert f"| {tier} | passes |" in run.report, run.report
