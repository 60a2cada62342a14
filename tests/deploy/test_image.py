"""The node's image and its compose cluster (deploy/, compose.yaml), through the real
path: `make image`, `podman-compose up`, requests from the host to the published ports.

Slow: a first `make image` on a fresh machine takes about 4-5 min (mmdebstrap's base,
the wheels, the build) and, with all of it cached, 20 s; each compose cluster then takes
about 10 s to start and stop. `make test` runs them (DHT_IMAGE_TESTS=1) on one worker,
first, while the others run the rest of the suite; a plain `pytest` skips them unless
DHT_IMAGE_TESTS=1 (`make image-test`), and they skip, with the reason, where podman or
podman-compose is missing or the user is not root (the image is built by rootful
podman). Podman runs with deploy/containers.conf unless CONTAINERS_CONF names another.
Traffic goes only to 127.0.0.1 and the clusters' own networks.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dht.conformance.http_client import Response, request
from dht.testbed.toxiproxy import free_ports
from tests.fixtures import IMAGE_GROUP

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/dht:latest"
SERVICES = ("dht-1", "dht-2", "dht-3")
# Compose's start, plus a node's own (its clock check of the peers, LevelDB).
START_DEADLINE = 60.0


def _unavailable() -> str | None:
    if os.environ.get("DHT_IMAGE_TESTS") != "1":
        return "builds an image and starts containers, minutes: set DHT_IMAGE_TESTS=1"
    for command in ("podman", "podman-compose"):
        if shutil.which(command) is None:
            return f"{command} not found: `make podman` installs it (as root)"
    if os.geteuid() != 0:
        return "the image is built and run by rootful podman: run as root"
    return None


# What every test of the image carries: skipped with the reason where it cannot run,
# and run on the one worker that builds the image, once.
IMAGE_MARKS = [
    pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable())),
    pytest.mark.xdist_group(IMAGE_GROUP),
]
pytestmark = [*IMAGE_MARKS, pytest.mark.timeout(900)]


def _environment(**extra: str) -> dict[str, str]:
    environment = dict(os.environ, **extra)
    environment.setdefault("CONTAINERS_CONF", str(ROOT / "deploy" / "containers.conf"))
    return environment


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], env=_environment(), capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="session")
def image() -> str:
    """The image, built once a run by `make image` (cached layers make a rebuild of an
    unchanged tree take seconds). `-o` takes the virtualenv running this test as made.
    One build at a time in this clone (a lock in build/): two at once, from two test
    workers or a `make image` by hand, would write the same wheel folder."""
    started = time.monotonic()
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "image"],
            cwd=ROOT,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=1200,
        )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    print(f"make image: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return IMAGE


@dataclass
class ComposeCluster:
    project: str
    urls: list[str]
    files: list[str]

    def container(self, service: str) -> str:
        found = _podman(
            "ps", "--all", "--format", "{{.Names}}",
            "--filter", f"label=com.docker.compose.project={self.project}",
            "--filter", f"label=com.docker.compose.service={service}",
        )  # fmt: skip
        names = found.stdout.split()
        assert len(names) == 1, (service, found.stdout, found.stderr)
        return names[0]

    def url(self, service: str) -> str:
        return self.urls[SERVICES.index(service)]


def _wait_serving(url: str, deadline: float) -> None:
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = request("GET", f"{url}/v0/status", timeout=2)
            if last.status == 200:
                return
        except OSError as error:
            last = error
        time.sleep(0.2)
    raise AssertionError(f"{url} not serving within its deadline: {last}")


def _compose_up(folder: Path, files: list[str], project: str) -> Iterator[ComposeCluster]:
    """A compose cluster of `files` under `project` (so never the user's own), on free
    loopback ports, with its secrets from `folder`; taken down with its volumes and
    network however the test ended."""
    ports = free_ports(len(SERVICES))
    environment = _environment(
        DHT_SECRETS=str(folder),
        **{f"DHT_PORT_{index}": str(port) for index, port in enumerate(ports, start=1)},
    )
    compose = ["podman-compose", "-p", project, *(arg for f in files for arg in ("-f", f))]
    cluster = ComposeCluster(project, [f"http://127.0.0.1:{port}" for port in ports], files)
    try:
        up = subprocess.run(
            [*compose, "up", "-d"],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        deadline = time.monotonic() + START_DEADLINE
        for url in cluster.urls:
            _wait_serving(url, deadline)
        yield cluster
    finally:
        subprocess.run(
            [*compose, "down", "--volumes", "-t", "10"],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            timeout=300,
        )
        _podman("network", "rm", "--force", f"{project}_default")


def _secrets_folder(folder: Path) -> Path:
    """A cluster secret readable by the node's user in the container (another uid), in
    a folder only its owner can open, as `make image` writes deploy/secrets."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    secret = folder / "cluster-secret"
    secret.write_text(os.urandom(32).hex() + "\n")
    secret.chmod(0o444)
    return folder


@pytest.fixture(scope="module")
def cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    """compose.yaml's three nodes."""
    folder = _secrets_folder(tmp_path_factory.mktemp("secrets"))
    yield from _compose_up(folder, ["compose.yaml"], f"dht-image-test-{os.getpid()}")


@pytest.fixture(scope="module")
def tls_cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeCluster]:
    """compose.yaml's three nodes with deploy/compose.tls.yaml: TLS between them, with
    certificates from deploy/certificates.py."""
    folder = _secrets_folder(tmp_path_factory.mktemp("secrets"))
    made = subprocess.run(
        [sys.executable, "deploy/certificates.py", str(folder / "tls")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    files = ["compose.yaml", "deploy/compose.tls.yaml"]
    yield from _compose_up(folder, files, f"dht-image-tls-test-{os.getpid()}")


def _put(url: str, key: str, value: bytes, replicas: str = "") -> Response:
    return request("PUT", f"{url}/v0/entity?id={key}{replicas}", body=value)


def _get(url: str, key: str, replicas: str = "") -> Response:
    return request("GET", f"{url}/v0/entity?id={key}{replicas}")


def test_a_value_put_through_one_container_is_read_through_another(
    cluster: ComposeCluster,
) -> None:
    assert _put(cluster.url("dht-1"), "across", b"containers", "&replicas=3/3").status == 201
    answer = _get(cluster.url("dht-3"), "across", "&replicas=3/3")
    assert (answer.status, answer.body) == (200, b"containers")


def test_the_nodes_refuse_internal_requests_without_the_compose_secret(
    cluster: ComposeCluster,
) -> None:
    assert request("GET", f"{cluster.url('dht-2')}/internal/v0/records").status == 403


def test_the_healthcheck_reports_healthy(cluster: ComposeCluster) -> None:
    """The image's HEALTHCHECK, run by podman (`podman healthcheck run`: podman runs it
    on a timer only where systemd is, so the test runs it itself)."""
    for service in SERVICES:
        name = cluster.container(service)
        checked = _podman("healthcheck", "run", name)
        assert checked.returncode == 0, (service, checked.stdout, checked.stderr)
        state = json.loads(_podman("inspect", name).stdout)[0]["State"]
        assert state["Health"]["Status"] == "healthy", (service, state["Health"])


def test_sigterm_stops_a_container_cleanly_and_two_of_three_still_take_writes(
    cluster: ComposeCluster,
) -> None:
    """`podman stop` sends the image's STOPSIGNAL, SIGTERM, to the node (PID 1): it
    finishes its requests, closes LevelDB, logs that it stopped and exits 0, well
    before podman's 10 s would have killed it (137). Started again, it finds the
    records it held on its own volume."""
    assert _put(cluster.url("dht-2"), "before-stop", b"kept", "&replicas=3/3").status == 201
    name = cluster.container("dht-2")
    stopped = _podman("stop", "--time", "10", name)
    assert stopped.returncode == 0, stopped.stderr
    state = json.loads(_podman("inspect", name).stdout)[0]["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0), state
    logs = _podman("logs", name)
    assert "dht.node: stopped; " in logs.stdout + logs.stderr, logs.stderr[-2000:]

    assert _put(cluster.url("dht-1"), "two-of-three", b"ok", "&replicas=2/3").status == 201
    answer = _get(cluster.url("dht-3"), "two-of-three", "&replicas=2/3")
    assert (answer.status, answer.body) == (200, b"ok")

    started = _podman("start", name)
    assert started.returncode == 0, started.stderr
    _wait_serving(cluster.url("dht-2"), time.monotonic() + START_DEADLINE)
    logs = _podman("logs", name)
    held = re.findall(r"anti-entropy: trees of (\d+) records", logs.stdout + logs.stderr)
    assert len(held) == 2 and int(held[-1]) >= 1, held


def test_the_tls_compose_file_puts_tls_between_the_containers(
    tls_cluster: ComposeCluster,
) -> None:
    for url in tls_cluster.urls:
        status = json.loads(request("GET", f"{url}/v0/status").body)
        assert status["tls"]["enabled"] is True, (url, status["tls"])
    assert _put(tls_cluster.urls[0], "sealed", b"between nodes", "&replicas=3/3").status == 201
    answer = _get(tls_cluster.urls[2], "sealed", "&replicas=3/3")
    assert (answer.status, answer.body) == (200, b"between nodes")
    for url in tls_cluster.urls:
        assert json.loads(request("GET", f"{url}/v0/status").body)["tls"]["refused"] == {}
