"""Installs of dht as a user makes them, for the tests that check them: the wheel this
clone builds, installed with some of its extras into a fresh venv outside the clone.

The wheel (built from a copy of the clone's files) and every wheel its extras pull in
(at requirements.lock's versions) are fetched once into a wheelhouse, and each venv
installs from it with no index: one download per test session however many venvs, the
same versions as the clone's .venv, and no network after the first step. The venvs get
no pip of their own (the clone's installs into them), and bytecode only for the modules
a test runs (`Install.compile_imports`), not for all of matplotlib and numpy."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
# Building the wheel, and fetching what the extras pull in from the package index.
BUILD_DEADLINE = 600.0
# Installing from the wheelhouse, with no index: seconds.
INSTALL_DEADLINE = 300.0
COMMAND_DEADLINE = 120.0
# Everything the two installs pull in between them.
EVERY_PART = "node,kit"
COMPILE_IMPORTS = """\
import importlib, importlib.util, py_compile, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
for module in list(sys.modules.values()):
    source = getattr(module, "__file__", None) or ""
    if source.startswith(sys.prefix) and source.endswith(".py"):
        py_compile.compile(source, importlib.util.cache_from_source(source), doraise=True)
"""


def pip(*args: str | Path, deadline: float) -> None:
    """The clone's pip; its output only if it fails."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=deadline)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def canonical(project: str) -> str:
    """A project's name as pip compares it (PEP 503): `prometheus_client` is
    `prometheus-client`."""
    return re.sub(r"[-_.]+", "-", project).lower()


@dataclass(frozen=True)
class Install:
    """A venv with the wheel installed, and an empty folder outside the clone to run its
    commands in."""

    venv: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def environment(self) -> dict[str, str]:
        """This process's environment with nothing of the clone in it."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DHT_")}
        environment.pop("PYTHONPATH", None)
        return environment

    def argv(self, program: str, *args: str) -> list[str]:
        """One of the venv's commands (`dht-conformance`, `python`, ...)."""
        return [str(self.venv / "bin" / program), *args]

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """One of the venv's commands, run to its end from the empty folder."""
        return subprocess.run(
            self.argv(program, *args),
            cwd=self.workdir,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=COMMAND_DEADLINE,
        )

    def compile_imports(self, *modules: str) -> None:
        """Writes the bytecode of every module of the venv that importing `modules`
        loads, as a user's pip does at install. Else a Python told not to write any
        (PYTHONDONTWRITEBYTECODE) compiles them again in every process it starts, and
        a node's start is timed (rule 1.1: 200 within a second)."""
        done = self.run("python", "-c", COMPILE_IMPORTS, *modules)
        assert done.returncode == 0, done.stderr

    def distributions(self) -> set[str]:
        """Every project installed in the venv, canonical names."""
        listed = self.run(
            "python",
            "-c",
            "import importlib.metadata as m; print(*(d.metadata['Name'] for d in "
            "m.distributions()), sep='\\n')",
        )
        assert listed.returncode == 0, listed.stderr
        return {canonical(name) for name in listed.stdout.split()}


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path
    wheel: Path

    def install(self, root: Path, extras: str) -> Install:
        """A fresh venv in `root` with the wheel and `extras` ("node", "kit", "node,kit"
        or "" for the bare wheel) installed from the wheelhouse alone."""
        venv, workdir = root / "venv", root / "empty"
        workdir.mkdir(parents=True)
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            check=True,
            timeout=INSTALL_DEADLINE,
        )
        requirement = f"{self.wheel}[{extras}]" if extras else str(self.wheel)
        pip(
            "--python",
            venv / "bin" / "python",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            self.folder,
            "--no-compile",
            requirement,
            deadline=INSTALL_DEADLINE,
        )
        return Install(venv, workdir)


def copy_of_the_clone(folder: Path) -> Path:
    """The clone's files as git sees them (tracked, and new ones not ignored), symlinks
    as symlinks, copied into `folder`: a wheel built in the clone itself would also
    carry whatever an earlier build left in its build/ folder, modules since moved or
    deleted included."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPOSITORY,
        capture_output=True,
        check=True,
        timeout=COMMAND_DEADLINE,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPOSITORY / name
        if os.path.lexists(source):  # not a file deleted since its last commit
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name, follow_symlinks=False)
    return folder


def shared_wheelhouse(folder: Path) -> Wheelhouse:
    """The wheelhouse in `folder`, built by the first of a run's test workers to ask for
    it while the others wait on a lock, then taken as it is: one build per run, not one
    per worker (about a minute of both cores)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = folder / "built"
        if built.exists():
            (wheel,) = (folder / "wheels").glob("dht-*.whl")
            return Wheelhouse(folder / "wheels", wheel)
        shutil.rmtree(folder / "source", ignore_errors=True)
        shutil.rmtree(folder / "wheels", ignore_errors=True)
        made = build_wheelhouse(folder)
        built.touch()
        return made


def build_wheelhouse(folder: Path) -> Wheelhouse:
    """The wheel this clone builds, and the wheels of everything both of its installs
    pull in, at requirements.lock's versions, in `folder`/wheels."""
    source = copy_of_the_clone(folder / "source")
    wheels = folder / "wheels"
    pip("wheel", "--no-deps", "-q", "-w", wheels, source, deadline=BUILD_DEADLINE)
    (wheel,) = wheels.glob("dht-*.whl")
    lock = REPOSITORY / "requirements.lock"
    pip(
        "wheel",
        "-q",
        "-w",
        wheels,
        "-c",
        lock,
        f"{wheel}[{EVERY_PART}]",
        deadline=BUILD_DEADLINE,
    )
    return Wheelhouse(wheels, wheel)
