"""The two installs of dht (pyproject.toml's extras, dht/extras.py), each from the wheel
this clone builds into a fresh venv, run from an empty folder outside the clone: what
each pulls in, that its commands run, and that a command of the part it lacks says in
one line what to install. The kit with the node beside it, grading dht's own nodes, is
tests/conformance/test_installed_kit.py's."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dht.testbed.toxiproxy import free_ports
from tests.wheelhouse import REPOSITORY, Install, Wheelhouse

# Only the node's part brings these.
NODE_PACKAGES = {"plyvel", "uvloop"}
# Only the kit's part brings these: the test tools, the plots, the faults' clients.
KIT_PACKAGES = {
    "pytest",
    "pytest-timeout",
    "hypothesis",
    "toxiproxy-python",
    "requests",
    "matplotlib",
    "numpy",
    "mfusepy",
    "trustme",
    "cryptography",
}
# Both installs: the HTTP stack, the ring's hash, the metrics' text format.
SHARED_PACKAGES = {"dht", "aiohttp", "yarl", "mmh3", "prometheus-client"}
# The repository's own tools, in neither install.
DEVELOPMENT_PACKAGES = {"pytest-asyncio", "locust", "selenium", "ruff", "mypy", "import-linter"}

# What runs in each install, imported module by module. The lazy filesystem is left out:
# importing mfusepy loads the system's libfuse3, which a machine without FUSE lacks (the
# power-loss tier then says so and skips).
NODE_MODULES = (
    "dht.__main__,dht.command_line,dht.node,dht.metrics,dht.membership,dht.web,"
    "dht.coordination,dht.replication,dht.transport,dht.storage,dht.model,dht.config,"
    "dht.extras"
)
KIT_MODULES = "dht.conformance,dht.testbed,dht.history"
NOT_IMPORTED = ("dht.testbed.lazy_filesystem",)
IMPORT_EVERY_MODULE = """\
import importlib, pkgutil, sys
names = []
for package in sys.argv[1].split(","):
    names.append(package)
    module = importlib.import_module(package)
    if hasattr(module, "__path__"):
        names += [found.name for found in pkgutil.walk_packages(module.__path__, package + ".")]
for name in names:
    if name not in sys.argv[2:]:
        importlib.import_module(name)
print(len(names))
"""

SIMPLE_NODE = REPOSITORY / "tests" / "conformance" / "simple_node.py"
START_DEADLINE = 30.0


@pytest.fixture(scope="module")
def node_install(wheelhouse: Wheelhouse, tmp_path_factory: pytest.TempPathFactory) -> Install:
    install = wheelhouse.install(tmp_path_factory.mktemp("node-install"), "node")
    install.compile_imports("dht.__main__", "dht.node")
    return install


@pytest.fixture(scope="module")
def kit_install(wheelhouse: Wheelhouse, tmp_path_factory: pytest.TempPathFactory) -> Install:
    install = wheelhouse.install(tmp_path_factory.mktemp("kit-install"), "kit")
    install.compile_imports("dht.conformance.command", "dht.conformance.fixtures", "pytest")
    return install


def imports_every_module(install: Install, packages: str, *left_out: str) -> None:
    imported = install.run("python", "-c", IMPORT_EVERY_MODULE, packages, *left_out)
    assert imported.returncode == 0, imported.stderr
    assert int(imported.stdout) > 10, imported.stdout


def says_in_one_line(done: subprocess.CompletedProcess[str], install: str) -> None:
    """A command whose part is missing: exit 2, and one line on stderr that names the pip
    command to run, not a traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert f"pip install '{install}'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_node_install_pulls_in_the_node_and_nothing_for_testing(
    node_install: Install,
) -> None:
    installed = node_install.distributions()
    assert SHARED_PACKAGES | NODE_PACKAGES <= installed, sorted(installed)
    assert installed & (KIT_PACKAGES | DEVELOPMENT_PACKAGES) == set(), sorted(installed)
    imports_every_module(node_install, NODE_MODULES)


def test_the_kit_install_pulls_in_the_kit_and_not_the_node_s_storage_or_loop(
    kit_install: Install,
) -> None:
    installed = kit_install.distributions()
    assert SHARED_PACKAGES | KIT_PACKAGES <= installed, sorted(installed)
    assert installed & (NODE_PACKAGES | DEVELOPMENT_PACKAGES) == set(), sorted(installed)
    imports_every_module(kit_install, KIT_MODULES, *NOT_IMPORTED)


def test_the_node_install_runs_a_node_that_stores_a_value(
    node_install: Install, tmp_path: Path
) -> None:
    for command in (("python", "-m", "dht", "node", "--help"), ("dht", "membership", "--help")):
        done = node_install.run(*command)
        assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    flags = ["--port", str(port), "--data-dir", str(tmp_path / "data"), "--cluster", url]
    node = subprocess.Popen(
        node_install.argv("dht", "node", *flags, "--secret", "installed"),
        cwd=node_install.workdir,
        env=node_install.environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                urllib.request.urlopen(f"{url}/v0/status", timeout=1).close()
                break
            except (urllib.error.URLError, ConnectionError):
                assert node.poll() is None and time.monotonic() < deadline, "no node"
                time.sleep(0.1)
        entity = f"{url}/v0/entity?id=installed"
        put = urllib.request.Request(entity, data=b"a value", method="PUT")
        with urllib.request.urlopen(put, timeout=5) as answer:
            assert answer.status == 201
        with urllib.request.urlopen(entity, timeout=5) as answer:
            assert answer.read() == b"a value"
    finally:
        node.send_signal(signal.SIGTERM)
        _, errors = node.communicate(timeout=30)
    assert node.returncode == 0, errors.decode(errors="replace")


def test_the_kit_install_grades_another_implementation(kit_install: Install) -> None:
    """The kit alone runs the suite, the report and all, on a node command of its user's
    (here the repository's simple implementation, one rule of `core`)."""
    done = kit_install.run("dht-conformance", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: dht-conformance")
    command = f"{kit_install.python} {SIMPLE_NODE} --port {{port}} --cluster {{cluster}}"
    done = kit_install.run(
        "dht-conformance",
        "--node-command",
        command,
        "--tiers",
        "core",
        "-k",
        "test_get_answers_200_with_exactly_the_stored_value",
        "--out",
        "report",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = (kit_install.workdir / "report" / "report.md").read_text()
    assert "| core | passes | 1 | 0 | 1 |" in report, report


NEEDS_THE_KIT = [
    ("dht-conformance", "--help"),
    ("python", "-m", "dht.conformance", "--version"),
    ("python", "-m", "dht", "cluster"),
    ("python", "-m", "dht", "cockpit", "--node", "http://127.0.0.1:1"),
]


@pytest.mark.parametrize("command", NEEDS_THE_KIT, ids=" ".join)
def test_a_command_of_the_kit_in_the_node_install_says_to_install_the_kit(
    node_install: Install, command: tuple[str, ...]
) -> None:
    says_in_one_line(node_install.run(*command), "dht[kit]")


NEEDS_THE_NODE = [
    ("python", "-m", "dht", "node", "--port", "1", "--data-dir", "d", "--cluster", "http://a:1"),
    ("dht", "repair", "--data-dir", "d"),
    ("dht-conformance", "--tiers", "core"),
    ("python", "-m", "dht", "cluster"),
]


@pytest.mark.parametrize("command", NEEDS_THE_NODE, ids=" ".join)
def test_a_command_of_the_node_in_the_kit_install_says_to_install_the_node(
    kit_install: Install, command: tuple[str, ...]
) -> None:
    """dht's own nodes included: the kit and the cluster without --node-command start
    them, and say to give a --node-command or to install the node."""
    done = kit_install.run(*command)
    says_in_one_line(done, "dht[node]")
    if "repair" not in command and "node" not in command:
        assert "give --node-command TEMPLATE" in done.stderr, done.stderr
