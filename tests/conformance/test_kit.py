"""The conformance kit's own test: run as a user runs it (`python -m dht.conformance`),
it must grade a simple, non-replicated, non-durable implementation (simple_node.py) as
passing `core` and `range` and failing `replication` and `durability`, each failed rule
with a line saying what was expected and what came back; it must pass dht; and a hung
implementation must fail its rules, not hang the run."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPOSITORY = HERE.parents[1]
KIT_DEADLINE = 600.0


def node_command(script: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / script))} --port {{port}}"


@dataclass
class KitRun:
    exit_code: int
    output: str
    report: str
    results: list[dict[str, object]]

    def outcomes(self, tier: str) -> set[object]:
        return {result["outcome"] for result in self.results if result["tier"] == tier}

    def failed_rule_lines(self, tier: str) -> list[str]:
        section = self.report.split(f"## {tier}: ", 1)[1].split("\n## ", 1)[0]
        return [line for line in section.splitlines() if line.startswith("- [**")]


def run_kit(out: Path, *args: str) -> KitRun:
    completed = subprocess.run(
        [sys.executable, "-m", "dht.conformance", "--out", str(out), *args],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=KIT_DEADLINE,
    )
    report_path, results_path = out / "report.md", out / "results.jsonl"
    return KitRun(
        completed.returncode,
        completed.stdout + completed.stderr,
        report_path.read_text() if report_path.exists() else "",
        [json.loads(line) for line in results_path.read_text().splitlines()]
        if results_path.exists()
        else [],
    )


@pytest.mark.alone  # rule 1.1 among the core's: ci22, beside my own node tests, met 1.17 s
def test_the_kit_passes_a_simple_implementation_on_core_and_range_only(tmp_path: Path) -> None:
    simple = node_command("simple_node.py") + " --cluster {cluster}"
    run = run_kit(
        tmp_path, "--node-command", simple, "--tiers", "core,range,replication,durability"
    )
    assert run.exit_code == 1, run.output
    assert run.outcomes("core") == {"passed"}, run.report
    assert run.outcomes("range") == {"passed"}, run.report
    assert "failed" in run.outcomes("replication"), run.report
    assert "failed" in run.outcomes("durability"), run.report
    assert "| core | passes | 9 | 0 | 9 |" in run.report, run.report
    # The two lines a student reads first: the course's contract (core, range,
    # replication) is not kept, and writes acknowledged before kill -9 are gone.
    assert (
        "**Keeps the course's contract?** **No**: 6 of its 21 rules fail "
        "(3.1, 3.2, 3.3, 3.4, 3.5, 3.6; core, range, replication)." in run.report
    ), run.report
    assert (
        "**Loses, undoes or invents data under faults?** **Yes** (kill -9 and restart (4.1) "
        "fails): acknowledged writes not kept through kill -9. The worst: after kill -9 and "
        "restart (4.1), key-001 after kill -9 and restart: expected 200" in run.report
    ), run.report
    assert "| replication | fails |" in run.report, run.report
    assert "| durability | fails |" in run.report, run.report
    for tier in ("replication", "durability"):
        lines = run.failed_rule_lines(tier)
        assert lines, run.report
        for line in lines:
            # The rule's own words, its failing test, then what was expected and what came.
            assert "— `test_" in line and "expected" in line, line
    (kill_9,) = [line for line in run.failed_rule_lines("durability") if "**4.1**" in line]
    assert "after kill -9 and restart: expected 200" in kill_9 and "got <404" in kill_9, kill_9
    (coordinates,) = [line for line in run.failed_rule_lines("replication") if "**3.1**" in line]
    assert "expected 200" in coordinates and "got <404" in coordinates, coordinates


@pytest.mark.alone  # rule 1.1, a node serving within a second of its start, among them
def test_the_kit_passes_dht_on_core(tmp_path: Path) -> None:
    run = run_kit(tmp_path, "--tiers", "core")
    assert run.exit_code == 0, run.output + run.report
    assert "| core | passes | 9 | 0 | 9 |" in run.report, run.report
    assert (tmp_path / "junit.xml").read_text().count("<testcase ") == len(run.results)


def test_a_hung_implementation_fails_its_rules_and_the_run_still_reports(tmp_path: Path) -> None:
    run = run_kit(
        tmp_path,
        "--node-command",
        node_command("hung_node.py"),
        "--tiers",
        "core",
        "--rule-timeout",
        "3",
        "-k",
        "test_put_answers_201 or test_get_of_absent_key_answers_404",
    )
    assert run.exit_code == 1, run.output
    assert [result["outcome"] for result in run.results] == ["failed", "failed"], run.results
    assert all("Timeout" in str(result["message"]) for result in run.results), run.results
    assert "| core | fails | 0 | 2 | 2 |" in run.report, run.report


def test_the_kit_refuses_a_node_command_it_cannot_start(tmp_path: Path) -> None:
    run = run_kit(tmp_path, "--node-command", "my-server --listen 8080")
    assert run.exit_code == 2
    assert "--node-command must contain {port}" in run.output
    run = run_kit(tmp_path, "--tiers", "core,quorum")
    assert run.exit_code == 2
    assert "unknown tier quorum" in run.output
    exits = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(\"no flag --dir\")' {{port}}"
    run = run_kit(tmp_path, "--node-command", exits)
    assert run.exit_code == 2
    assert "does not start a node" in run.output and "exited with code 1" in run.output
    assert "no flag --dir" in run.output, run.output
    assert not run.results, "no rule may run when the command cannot start a node"


# A node that finds itself in {cluster} as the course's implementations do: by the exact
# string http://localhost:PORT; it exits 1 before serving when that string is not there.
COURSE_NODE = (
    node_command("simple_node.py") + " --cluster {cluster} --self {self} --course-topology"
)


def test_the_kit_names_nodes_as_the_course_does_so_an_implementation_finds_itself(
    tmp_path: Path,
) -> None:
    run = run_kit(
        tmp_path, "--node-command", COURSE_NODE, "--tiers", "core", "-k", "test_put_answers_201"
    )
    assert run.exit_code == 0, run.output + run.report
    assert [result["outcome"] for result in run.results] == ["passed"], run.results
    assert "{cluster} and {self} name nodes http://localhost:PORT" in run.output, run.output


def test_topology_host_127_0_0_1_gives_the_numeric_form(tmp_path: Path) -> None:
    run = run_kit(
        tmp_path, "--node-command", COURSE_NODE, "--topology-host", "127.0.0.1", "--tiers", "core"
    )
    assert run.exit_code == 2, run.output
    assert "does not start a node" in run.output and "exited with code 1" in run.output
    assert "is not in --cluster http://127.0.0.1:" in run.output, run.output
    assert not run.results
