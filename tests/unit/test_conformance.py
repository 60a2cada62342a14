"""The conformance kit's pure parts (dht/conformance): reading rules out of SPEC.md and
rendering the report; and the promise that every rule of SPEC.md is checked by a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dht.conformance.report import (
    FaultRun,
    RunFacts,
    SpecTestResult,
    count_tiers,
    exit_code,
    render,
    without_machine_paths,
)
from dht.conformance.spec import TIERS, Rule, load_rules, read_rules, summarize, tier_of

REPOSITORY = Path(__file__).resolve().parents[2]

SPEC = """\
# Part one
## 1. Core
- <a id="rule-1.1"></a>**1.1** `GET /v0/status` answers 200. It does so
  within one second.
- <a id="rule-1.2"></a>**1.2** PUT answers 201.
  - a nested item that is not a rule
## 6. dht
- <a id="rule-6.1"></a>**6.1** A node is one process.
- a plain item
"""


def test_rules_are_read_with_their_number_tier_and_first_sentence() -> None:
    rules = read_rules(SPEC)
    assert list(rules) == ["1.1", "1.2", "6.1"]
    assert rules["1.1"] == Rule("1.1", "core", "`GET /v0/status` answers 200.")
    assert rules["6.1"].tier == "dht"
    assert rules["1.2"].anchor == "rule-1.2"


def test_a_rule_numbered_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"rule 1\.1 is numbered twice"):
        read_rules(SPEC + '- <a id="rule-1.1"></a>**1.1** Again.\n')


def test_sections_1_to_5_14_and_15_are_the_tiers_of_part_one_and_the_rest_is_dht() -> None:
    tiers = [tier_of(f"{section}.1") for section in range(1, 17)]
    assert tiers == [*TIERS[:5], *["dht"] * 8, "faults", "convergence", "dht"]


def test_a_long_first_sentence_is_cut_at_a_word() -> None:
    summary = summarize("word " * 40 + ". Next.")
    assert len(summary) <= 110 and summary.endswith("word…")


def test_spec_md_numbers_its_rules_in_order_in_every_section() -> None:
    rules = load_rules()
    sections: dict[int, list[int]] = {}
    for number in rules:
        section, item = map(int, number.split("."))
        sections.setdefault(section, []).append(item)
    assert sorted(sections) == list(range(1, max(sections) + 1))
    for section, items in sections.items():
        assert items == list(range(1, len(items) + 1)), f"section {section}: {items}"


def test_every_rule_of_spec_md_is_checked_by_some_test() -> None:
    named = {
        number.strip("\"' ")
        for path in [
            *REPOSITORY.glob("tests/**/test_*.py"),
            *REPOSITORY.glob("chaos/test_*.py"),
            *REPOSITORY.glob("dht/conformance/suite/test_*.py"),
        ]
        for arguments in re.findall(r"^@rule\(([^)]*)\)", path.read_text(), re.M)
        for number in arguments.split(",")
    }
    unchecked = sorted(set(load_rules()) - named, key=lambda n: tuple(map(int, n.split("."))))
    assert not unchecked, f"rules no test names: {unchecked}"
    assert not named - set(load_rules()), "a test names a rule SPEC.md does not have"


def result(
    test: str, tier: str, rules: tuple[str, ...], outcome: str, message: str = ""
) -> SpecTestResult:
    return SpecTestResult(test, tier, rules, outcome, message, 0.1)


RESULTS = [
    result("test_core.py::test_put", "core", ("1.2",), "passed"),
    result("test_core.py::test_status", "core", ("1.1",), "passed"),
    result("test_repl.py::test_a", "replication", ("3.1",), "failed", "expected 200, got <404>"),
    result("test_repl.py::test_b", "replication", ("3.1",), "failed", "expected 200, got <500>"),
    result("test_repl.py::test_c", "replication", ("3.2",), "passed"),
    result("test_dur.py::test_d", "durability", ("4.1",), "skipped", "needs root"),
]
RULES = read_rules(SPEC) | {"3.1": Rule("3.1", "replication", "Any node coordinates.")}
FACTS = RunFacts("java -jar my.jar", ("core", "replication", "durability"), "now", 12.0, "SPEC.md")


def test_tiers_count_rules_and_tests() -> None:
    core, replication, durability = count_tiers(RESULTS, ["core", "replication", "durability"])
    assert (core.rules_passed, core.rules_failed, core.rules_total, core.verdict) == (
        2,
        0,
        2,
        "passes",
    )
    assert (replication.rules_passed, replication.rules_failed, replication.verdict) == (
        1,
        1,
        "fails",
    )
    assert (replication.tests_passed, replication.tests_failed) == (1, 2)
    assert (durability.tests_skipped, durability.verdict) == (1, "not run")


def test_the_report_has_a_row_per_tier_and_one_line_per_failed_rule() -> None:
    report = render(RESULTS, RULES, FACTS)
    assert "| core | passes | 2 | 0 | 2 | 2 | 0 | 0 |" in report
    assert "| replication | fails | 1 | 1 | 2 | 1 | 2 | 0 |" in report
    (line,) = [line for line in report.splitlines() if line.startswith("- [**3.1**]")]
    assert line == (
        "- [**3.1**](SPEC.md#rule-3.1) Any node coordinates. — `test_repl.py::test_a`: "
        "expected 200, got <404> (and 1 more of its 2 tests)"
    )
    assert "`test_dur.py::test_d`: needs root" in report
    assert exit_code(RESULTS) == 1
    assert exit_code(RESULTS[:2]) == 0


def test_the_report_links_each_fault_run_and_shows_its_plot() -> None:
    runs = [
        FaultRun("runs/faults-kill-1", "ops=10 acked=5 lost=0", True),
        FaultRun("runs/convergence-2", "ops=4 acked=4 lost=2", False),
    ]
    report = render(RESULTS, RULES, FACTS, runs)
    section = report.split("## Fault runs\n", 1)[1]
    assert "### faults-kill-1" in section and "`ops=10 acked=5 lost=0`" in section
    assert "[history.jsonl](runs/faults-kill-1/history.jsonl)" in section
    assert "![the run faults-kill-1](runs/faults-kill-1/plot.png)" in section
    assert "runs/convergence-2/plot.png" not in section
    assert "## Fault runs" not in render(RESULTS, RULES, FACTS)


def test_the_report_shows_what_became_of_each_scenarios_writes() -> None:
    counts = {
        "stable": 40,
        "lost": 2,
        "stale": 1,
        "never read": 90,
        "undone": 0,
        "invented": 0,
        "indeterminate": 7,
    }
    lost = ["'key-03': acknowledged PUT b'client1-7' [3.100, 3.140] through node1 lost"]
    runs = [
        FaultRun("runs/faults-kill-1", "ops=10", True, counts, {"lost": lost}),
        FaultRun("runs/faults-pause-2", "ops=4", False),
    ]
    section = render(RESULTS, RULES, FACTS, runs).split("## Fault runs\n", 1)[1]
    assert (
        "| run | stable | lost | stale | never read | undone | invented | indeterminate |"
        in section
    )
    assert "| faults-kill-1 | 40 | 2 | 1 | 90 | 0 | 0 | 7 |" in section
    # A folder without its classification shows unknown counts, not zeros.
    assert "| faults-pause-2 | ? | ? | ? | ? | ? | ? | ? |" in section
    assert f"- lost (2), the first 1:\n  - `{lost[0]}`" in section
    assert "[classification.json](runs/faults-kill-1/classification.json)" in section
    assert "runs/faults-pause-2/classification.json" not in section


def test_machine_folders_are_cut_from_a_text_longest_first() -> None:
    text = (
        "ran /home/ann/kit/venv/bin/python /home/ann/impl/node.py in /home/ann/kit; GET /v0/status"
    )
    folders = ["/home/ann", "/home/ann/kit", "/home/ann/kit/venv/bin"]
    assert without_machine_paths(text, folders) == (
        "ran …/python …/impl/node.py in …; GET /v0/status"
    )
