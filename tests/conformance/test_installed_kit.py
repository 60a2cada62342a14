"""The kit as a user gets it: the wheel this clone builds, installed into a fresh venv,
run as `dht-conformance` from an empty folder outside the clone. It must need nothing of
the clone (no tests/, no chaos/, no SPEC.md at the top), and its report folder must be
portable: the spec it links is inside it, and no path of this machine is in it."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from dht.testbed.toxiproxy import find_toxiproxy_server
from tests.wheelhouse import Wheelhouse

REPOSITORY = Path(__file__).resolve().parents[2]
KIT_DEADLINE = 900.0


@dataclass(frozen=True)
class InstalledKit:
    venv: Path
    workdir: Path  # an empty folder outside the clone

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "dht-conformance"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        # Nothing of the clone may leak in through the environment.
        env = {key: value for key, value in os.environ.items() if not key.startswith("DHT_")}
        env.pop("PYTHONPATH", None)
        # The one thing a user provides: a toxiproxy-server for the link faults (on PATH,
        # or named so); here the one `make test` built.
        env["DHT_TOXIPROXY_SERVER"] = find_toxiproxy_server()
        return subprocess.run(
            [str(self.command), *args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=KIT_DEADLINE,
        )


@pytest.fixture(scope="module")
def installed_kit(wheelhouse: Wheelhouse, tmp_path_factory: pytest.TempPathFactory) -> InstalledKit:
    """The kit with dht's node beside it (the nodes it grades by default), from the
    wheel into a fresh venv; tests/installs checks each of the two installs alone."""
    install = wheelhouse.install(tmp_path_factory.mktemp("installed-kit"), "node,kit")
    install.compile_imports("dht.__main__", "dht.node", "dht.conformance.command")
    return InstalledKit(install.venv, install.workdir)


def test_the_wheel_installs_a_command_with_help_and_version(installed_kit: InstalledKit) -> None:
    version = installed_kit.run("--version")
    assert version.returncode == 0 and re.fullmatch(
        r"dht-conformance \d+\.\d+\.\d+\n", version.stdout
    )
    help_text = installed_kit.run("--help")
    assert help_text.returncode == 0
    assert help_text.stdout.startswith("usage: dht-conformance")
    assert "{port}" in help_text.stdout and "--node-command" in help_text.stdout
    module = subprocess.run(
        [str(installed_kit.venv / "bin" / "python"), "-m", "dht.conformance", "--version"],
        cwd=installed_kit.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert module.stdout.startswith("python -m dht.conformance "), module.stdout + module.stderr
    # What it runs is the installed suite, not the clone's.
    where = subprocess.run(
        [
            str(installed_kit.venv / "bin" / "python"),
            "-c",
            "import dht.conformance.suite as s; print(s.__file__)",
        ],
        cwd=installed_kit.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(installed_kit.venv)), where.stdout + where.stderr


COUNTED = ("stable", "lost", "stale", "never read", "undone", "invented", "indeterminate")
FAILING = ("lost", "stale", "undone", "invented")
# `| faults-kill-20261126-090000-42 | 40 | 0 | ... |`
COUNTS_ROW = re.compile(r"^\| (faults-[a-z-]+?)-\d{8}-[^|]*((?:\| \d+ )+)\|$", re.MULTILINE)


def scenario_counts(report: str) -> dict[str, dict[str, int]]:
    """The report's table of what became of each fault scenario's writes, by scenario
    (its run folder's name without the time and process)."""
    rows = {}
    for name, cells in COUNTS_ROW.findall(report):
        rows[name] = dict(zip(COUNTED, map(int, cells.split("|")[1:]), strict=True))
    return rows


@pytest.mark.alone  # rule 1.1, a node serving within a second of its start, among them
def test_the_installed_kit_grades_dht_from_an_empty_folder_into_a_portable_report(
    installed_kit: InstalledKit,
) -> None:
    """dht passes core, two faults scenarios (a node killed; links cut, through the
    installed kit's own Toxiproxy) and convergence through the installed kit (--quick),
    and the report shows each scenario's run folder and plot. (Every faults scenario runs
    on dht from the source tree in dht/conformance/suite: the installed path is the same
    code.)"""
    two_faults = "not paused and not slowed and not in_turn"
    run = installed_kit.run(
        *("--tiers", "core,faults,convergence", "--quick", "-k", two_faults, "--out", "report")
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = installed_kit.workdir / "report"
    text = (report / "report.md").read_text()
    assert "| core | passes | 9 | 0 | 9 |" in text, text
    assert "| faults | passes | 2 | 0 | 2 | 2 | 0 | 0 |" in text, text
    assert "| convergence | passes | 1 | 0 | 1 |" in text, text
    # The two lines a student reads first.
    assert "**Keeps the course's contract?** **Yes**: all 9 rules pass (core; not run:" in text
    assert "**Loses, undoes or invents data under faults?** **None found** (2 fault" in text
    plots = re.findall(r"!\[[^]]*\]\((runs/[^)]+/plot\.png)\)", text)
    assert len(plots) == 3, text
    # Every faults scenario's history judged: its writes counted, none lost, stale,
    # undone or invented.
    rows = scenario_counts(text)
    assert sorted(rows) == ["faults-cut-links", "faults-kill"], text
    for scenario, counts in rows.items():
        assert counts["stable"] > 0, (scenario, counts)
        assert [counts[kind] for kind in FAILING] == [0, 0, 0, 0], (scenario, counts)
    assert all((report / plot).read_bytes().startswith(b"\x89PNG") for plot in plots)
    # Every link of the report resolves inside the folder.
    assert (report / "SPEC.md").read_text() == (REPOSITORY / "SPEC.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (report / target).exists(), target
    # And no path of this machine appears in any of its files.
    machine_paths = [str(REPOSITORY), str(installed_kit.workdir), str(installed_kit.venv)]
    machine_paths += [str(Path.home()), "/tmp/"]
    for path in report.rglob("*"):
        if path.is_file():
            content = path.read_text(errors="replace")
            found = [machine for machine in machine_paths if machine in content]
            assert found == [], f"{path.name} names {found}"


def test_the_installed_kit_finds_the_naive_implementation_never_heals_a_replica(
    installed_kit: InstalledKit,
) -> None:
    """The second implementation (tests/naive: no repair, no hints) fails convergence
    for its real reason, with its plot. (How the kit judges the naive node's fault
    histories is tests/naive's to check, from the source tree: the installed path is the
    same code.)"""
    naive = REPOSITORY / "tests" / "naive" / "node.py"
    python = installed_kit.venv / "bin" / "python"
    command = f"{python} {naive} --port {{port}} --data-dir {{data_dir}} --cluster {{cluster}}"
    run = installed_kit.run(
        "--tiers", "convergence", "--quick", "--out", "naive", "--node-command", command
    )
    assert run.returncode == 1, run.stdout + run.stderr
    text = (installed_kit.workdir / "naive" / "report.md").read_text()
    assert "| convergence | fails | 0 | 1 | 1 |" in text, text
    (line,) = [line for line in text.splitlines() if line.startswith("- [**15.1**]")]
    assert "writes acknowledged while node3 was down are not on it" in line, line
    assert re.search(r"!\[[^]]*\]\(runs/convergence-[^)]+/plot\.png\)", text), text
