"""The conformance kit's pure parts (dht/conformance): reading rules out of SPEC.md and
rendering the report; and the promise that every rule of SPEC.md is checked by a test."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from dht.conformance.report import (
    FaultRun,
    RunFacts,
    SpecTestResult,
    count_tiers,
    exit_code,
    opening_lines,
    render,
    without_machine_paths,
)
from dht.conformance.spec import TIERS, Rule, load_rules, read_rules, summarize, tier_of

REPOSITORY = Path(__file__).resolve().parents[3]

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


def test_sections_1_to_5_and_from_14_on_are_the_tiers_of_part_one_the_rest_dht() -> None:
    tiers = [tier_of(f"{section}.1") for section in range(1, 23)]
    assert tiers == [*TIERS[:5], *["dht"] * 8, *TIERS[5:-1], "dht"]


def test_a_long_first_sentence_is_cut_at_a_word() -> None:
    summary = summarize("word " * 40 + ". Next.")
    assert len(summary) <= 110 and summary.endswith("word…")


def test_a_summary_drops_anchors_and_bold_but_keeps_comparisons() -> None:
    """`<=` and `>` in a rule are words of it, not a tag to strip."""
    text = '<a id="rule-3.3"></a>**3.3** Valid (`1 <= A <= F`); `A` > `F` answers 400.'
    assert summarize(text) == "3.3 Valid (`1 <= A <= F`); `A` > `F` answers 400."


def test_spec_md_numbers_its_rules_in_order_in_every_section() -> None:
    rules = load_rules()
    sections: dict[int, list[int]] = {}
    for number in rules:
        section, item = map(int, number.split("."))
        sections.setdefault(section, []).append(item)
    assert sorted(sections) == list(range(1, max(sections) + 1))
    for section, items in sections.items():
        assert items == list(range(1, len(items) + 1)), f"section {section}: {items}"


def test_the_kit_grades_by_the_repositorys_spec_md() -> None:
    """The kit's SPEC.md (package data) is a link to the repository's, so the rules it
    grades by are the ones the repository states. A copy drifts the first time one of
    the two is edited, and `sed -i` over the tree silently turns the link into a copy."""
    kits = REPOSITORY / "dht" / "conformance" / "SPEC.md"
    assert kits.is_symlink() and kits.resolve() == (REPOSITORY / "SPEC.md").resolve(), (
        "dht/conformance/SPEC.md must be a link to the repository's: "
        "ln -sf ../../SPEC.md dht/conformance/SPEC.md"
    )


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


COURSE_PASSES = [
    result("test_core_api.py::test_put", "core", ("1.2",), "passed"),
    result("test_range.py::test_order", "range", ("2.3",), "passed"),
    result("test_replication.py::test_quorum", "replication", ("3.5",), "passed"),
    result("test_strict.py::test_big", "strict", ("16.1",), "failed", "expected 201, got <413>"),
    result("test_durability.py::test_kill", "durability", ("4.1",), "passed"),
]
ALL_TIERS = ("core", "range", "replication", "durability", "faults", "convergence", "strict")
NOTHING_WRONG = {"stable": 30, "lost": 0, "stale": 0, "never read": 20, "undone": 0}


def counted(**found: int) -> dict[str, int]:
    return NOTHING_WRONG | {"invented": 0, "indeterminate": 3} | found


def test_the_report_opens_with_the_course_contract_kept_whatever_the_strict_tier_says() -> None:
    runs = [FaultRun("runs/faults-kill-20261124-120000-42", "ok", True, counted())]
    contract, data = opening_lines(COURSE_PASSES, runs, ALL_TIERS)
    assert contract.startswith("**Keeps the course's contract?** **Yes**: all 3 rules pass")
    assert data == (
        "**Loses, undoes or invents data under faults?** **None found** (kill -9 and "
        "restart (4.1) passes; 1 fault scenario(s), 50 acknowledged writes judged): "
        "nothing lost, stale, undone or invented."
    )
    report = render(COURSE_PASSES, RULES, dataclasses.replace(FACTS, tiers=ALL_TIERS), runs)
    assert report.startswith(f"# Conformance report\n\n{contract}\n\n{data}\n\n- Implementation")


def test_a_failed_course_rule_makes_the_first_line_no_and_names_it() -> None:
    results = [*COURSE_PASSES, result("test_core_api.py::test_x", "core", ("1.8",), "failed")]
    contract, _ = opening_lines(results, [], ("core", "strict"))
    assert contract == (
        "**Keeps the course's contract?** **No**: 1 of its 2 rules fail "
        "(1.8; core; not run: range, replication)."
    )


def test_the_second_line_gives_the_worst_kind_found_with_its_first_example() -> None:
    stale = FaultRun(
        "runs/faults-kill-20261124-120000-42", "", True, counted(stale=2), {"stale": ["s1"]}
    )
    undone = FaultRun(
        "runs/faults-pause-20261124-120100-42-2", "", True, counted(undone=1), {"undone": ["u1"]}
    )
    # convergence reads at 1/3: its row is shown, never graded.
    ignored = FaultRun("runs/convergence-20261124-120200-42", "", True, counted(lost=9), {})
    _, data = opening_lines(COURSE_PASSES, [stale, undone, ignored], ALL_TIERS)
    section = render(COURSE_PASSES, RULES, FACTS, [stale, ignored]).split("## Fault runs", 1)[1]
    assert "| convergence-20261124-120200-42 (shown, not graded) | 30 | 9 |" in section
    assert "| faults-kill-20261124-120000-42 | 30 | 0 | 2 |" in section
    assert data == (
        "**Loses, undoes or invents data under faults?** **Yes** (kill -9 and restart "
        "(4.1) passes; 2 fault scenario(s), 102 acknowledged writes judged): 1 undone, "
        "2 stale. The worst: undone in faults-pause: `u1`"
    )
    lost_on_kill = result("test_durability.py::test_kill", "durability", ("4.1",), "failed", "k1")
    _, data = opening_lines([lost_on_kill], [stale], ALL_TIERS)
    assert data.endswith(
        "2 stale, acknowledged writes not kept through kill -9. "
        "The worst: after kill -9 and restart (4.1), k1"
    ), data


def test_lines_whose_tiers_did_not_run_say_not_judged() -> None:
    skipped = [result("test_durability.py::test_kill", "durability", ("4.1",), "skipped")]
    contract, data = opening_lines(skipped, [], ("durability",))
    assert contract.startswith("**Keeps the course's contract?** Not judged: none of its tiers")
    assert data.startswith("**Loses, undoes or invents data under faults?** Not judged")


def test_machine_folders_are_cut_from_a_text_longest_first() -> None:
    text = (
        "ran /home/ann/kit/venv/bin/python /home/ann/impl/node.py in /home/ann/kit; GET /v0/status"
    )
    folders = ["/home/ann", "/home/ann/kit", "/home/ann/kit/venv/bin"]
    assert without_machine_paths(text, folders) == (
        "ran …/python …/impl/node.py in …; GET /v0/status"
    )
