"""The conformance report in Markdown (pure): two opening lines a student reads first
(does the implementation keep the course's contract; did it lose, undo or invent data
under a fault), then per tier how many rules and tests passed, and for each failed rule
one line with the spec's words, the failing test and what it expected against what came
back."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dht.conformance.spec import COURSE_TIERS, TIERS, Rule
from dht.history.classification import COUNTED

# What a history may show wrong, the worst first: the report's second line gives an
# example of the first kind found.
DATA_FAULTS = ("lost", "undone", "invented", "stale")
# Scenarios whose history is shown but not graded: convergence reads each key at 1/3
# through one node, not at an overlapping quorum (SPEC.md rule 15.1 judges it).
SHOWN_NOT_GRADED = ("convergence",)
# The rule whose failure is data lost on a crash (SPEC.md 4.1: kill -9 and restart).
KILL_RULE = "4.1"


@dataclass(frozen=True, slots=True)
class SpecTestResult:
    test: str  # the pytest id within its file, e.g. "test_core_api.py::test_put_answers_201"
    tier: str
    rules: tuple[str, ...]
    outcome: str  # passed, failed, skipped, not run
    message: str  # why it failed or was skipped, one line
    seconds: float


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the report says about the run itself."""

    command: str
    tiers: tuple[str, ...]
    started: str  # an ISO time
    seconds: float
    spec_link: str  # where a rule's anchor is appended, e.g. "SPEC.md"
    # A running cluster's control commands (--kill-command, ...), by name.
    controls: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FaultRun:
    """A run folder a fault scenario left in the report folder, with what became of its
    writes (`classification.json`: counts by kind, the first few of each; empty when
    the folder has none)."""

    folder: str  # relative to the report, e.g. "runs/faults-kill-20261124-120000-42"
    summary: str  # the checker's one line
    has_plot: bool
    counts: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, list[str]] = field(default_factory=dict)
    # Lines said under the run's heading: a nemesis run's seed and schedule, its shrink.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TierCount:
    tier: str
    rules_passed: int
    rules_failed: int
    rules_total: int
    tests_passed: int
    tests_failed: int
    tests_skipped: int

    @property
    def verdict(self) -> str:
        if self.rules_total == 0:
            return "not run"
        if self.rules_failed:
            return "fails"
        return "passes" if self.tests_passed else "not run"


def rule_outcomes(results: Iterable[SpecTestResult]) -> dict[str, list[SpecTestResult]]:
    """The tests of each rule, by rule number."""
    by_rule: dict[str, list[SpecTestResult]] = defaultdict(list)
    for result in results:
        for number in result.rules:
            by_rule[number].append(result)
    return by_rule


def failed(result: SpecTestResult) -> bool:
    return result.outcome in ("failed", "error")


def count_tiers(results: list[SpecTestResult], tiers: Iterable[str]) -> list[TierCount]:
    counts = []
    for tier in tiers:
        in_tier = [result for result in results if result.tier == tier]
        by_rule = rule_outcomes(in_tier)
        rules_failed = sum(1 for tests in by_rule.values() if any(map(failed, tests)))
        rules_passed = sum(
            1
            for tests in by_rule.values()
            if not any(map(failed, tests)) and any(t.outcome == "passed" for t in tests)
        )
        counts.append(
            TierCount(
                tier,
                rules_passed,
                rules_failed,
                len(by_rule),
                sum(1 for t in in_tier if t.outcome == "passed"),
                sum(1 for t in in_tier if failed(t)),
                sum(1 for t in in_tier if t.outcome == "skipped"),
            )
        )
    return counts


def render(
    results: list[SpecTestResult],
    rules: Mapping[str, Rule],
    facts: RunFacts,
    runs: Iterable[FaultRun] = (),
) -> str:
    """The whole report."""
    counts = count_tiers(results, [tier for tier in TIERS if tier in facts.tiers])
    runs = list(runs)
    first, second = opening_lines(results, runs, facts.tiers)
    lines = [
        "# Conformance report",
        "",
        first,
        "",
        second,
        "",
        f"- Implementation: `{facts.command}`",
        *(
            [f"- Controls: {', '.join(f'{name} `{command}`' for name, command in facts.controls)}"]
            if facts.controls
            else []
        ),
        f"- Tiers: {', '.join(facts.tiers)}",
        f"- Run: {facts.started}, {facts.seconds:.0f} s",
        "",
        "| tier | verdict | rules passed | rules failed | rules | tests passed | tests failed "
        "| tests skipped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {c.tier} | {c.verdict} | {c.rules_passed} | {c.rules_failed} | {c.rules_total} "
        f"| {c.tests_passed} | {c.tests_failed} | {c.tests_skipped} |"
        for c in counts
    ]
    by_rule = rule_outcomes(results)
    for count in counts:
        failing = [
            (number, tests)
            for number, tests in sorted(by_rule.items(), key=lambda item: rule_key(item[0]))
            if any(t.tier == count.tier and failed(t) for t in tests)
        ]
        if not failing:
            continue
        lines += ["", f"## {count.tier}: {count.rules_failed} rule(s) failed", ""]
        for number, tests in failing:
            lines.append(failed_rule_line(number, tests, rules, facts.spec_link))
    lines += fault_run_lines(runs)
    skipped = [t for t in results if t.outcome == "skipped"]
    if skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- `{t.test}`: {t.message}" for t in skipped]
    return "\n".join(lines) + "\n"


def opening_lines(
    results: list[SpecTestResult], runs: list[FaultRun], tiers: Iterable[str]
) -> tuple[str, str]:
    """The two lines a student reads first: does it keep the course's contract, and did
    it lose, undo or invent data under any fault."""
    return contract_line(results, tiers), data_line(results, runs)


def contract_line(results: list[SpecTestResult], tiers: Iterable[str]) -> str:
    """Does it keep the course's contract: the rules of the tiers that ask exactly what
    the course's own tests ask (SPEC.md sections 1 to 3)."""
    run = [tier for tier in COURSE_TIERS if tier in tiers]
    head = "**Keeps the course's contract?**"
    if not run:
        return f"{head} Not judged: none of its tiers ({', '.join(COURSE_TIERS)}) was run."
    by_rule = rule_outcomes(result for result in results if result.tier in run)
    failing = sorted(
        (number for number, tests in by_rule.items() if any(map(failed, tests))), key=rule_key
    )
    judged = [number for number, tests in by_rule.items() if any(map(judging, tests))]
    missing = [tier for tier in COURSE_TIERS if tier not in run]
    scope = f"{', '.join(run)}" + (f"; not run: {', '.join(missing)}" if missing else "")
    if failing:
        return (
            f"{head} **No**: {len(failing)} of its {len(by_rule)} rules fail "
            f"({', '.join(failing)}; {scope})."
        )
    if not judged:
        return f"{head} Not judged: every test of {scope} was skipped."
    return (
        f"{head} **Yes**: all {len(by_rule)} rules pass ({scope}), as the course's own "
        "tests ask them: its keys, 1 KiB values, `replicas` refused for A = 0 or A > F."
    )


def data_line(results: list[SpecTestResult], runs: list[FaultRun]) -> str:
    """Did it lose, undo or invent data under any fault: rule 4.1 (kill -9) and the
    history of every graded fault scenario, with the worst example found."""
    head = "**Loses, undoes or invents data under faults?**"
    kill_run = [r for r in results if KILL_RULE in r.rules and r.outcome != "not run"]
    # A skipped test of rule 4.1 (a running cluster of several nodes) judges nothing.
    kill_tests = [r for r in kill_run if judging(r)]
    graded = [run for run in runs if scenario_of(run) not in SHOWN_NOT_GRADED and run.counts]
    if not kill_tests and not graded:
        return (
            f"{head} Not judged: the durability tier and the fault tiers (faults, power, "
            "partition, clock, disk, nemesis) judge it, and ran no rule."
        )
    found = {kind: sum(run.counts.get(kind, 0) for run in graded) for kind in DATA_FAULTS}
    kill_failures = [r for r in kill_tests if failed(r)]
    parts = []
    if kill_tests:
        parts.append(f"kill -9 and restart ({KILL_RULE}) {'fails' if kill_failures else 'passes'}")
    elif kill_run:
        parts.append(f"kill -9 and restart ({KILL_RULE}) skipped")
    if graded:
        parts.append(
            f"{len(graded)} fault scenario(s), {acknowledged(graded):,} acknowledged writes judged"
        )
    judged = "; ".join(parts)
    if not any(found.values()) and not kill_failures:
        return f"{head} **None found** ({judged}): nothing lost, stale, undone or invented."
    counts = [f"{found[kind]} {kind}" for kind in DATA_FAULTS if found[kind]]
    if kill_failures:
        counts.append("acknowledged writes not kept through kill -9")
    return f"{head} **Yes** ({judged}): {', '.join(counts)}. The worst: " + worst(
        graded, kill_failures
    )


def worst(graded: list[FaultRun], kill_failures: list[SpecTestResult]) -> str:
    """The first example of the worst kind any scenario showed; a write lost on kill -9
    (rule 4.1) counts as lost."""
    for kind in DATA_FAULTS:
        if kind == "lost" and kill_failures:
            return f"after kill -9 and restart ({KILL_RULE}), {kill_failures[0].message}"
        for run in graded:
            if run.examples.get(kind):
                return f"{kind} in {scenario_of(run)}: `{run.examples[kind][0]}`"
    return "(no example kept)"


def acknowledged(runs: Iterable[FaultRun]) -> int:
    """The acknowledged writes the runs judged: every fate of Jepsen's set checker."""
    fates = ("stable", "lost", "stale", "never read")
    return sum(run.counts.get(kind, 0) for run in runs for kind in fates)


def judging(result: SpecTestResult) -> bool:
    return result.outcome in ("passed", "failed", "error")


def scenario_of(run: FaultRun) -> str:
    """`faults-kill` of `runs/faults-kill-20261124-120000-42` (or `...-42-2`)."""
    return re.sub(r"-\d{8}-\d{6}-\d+(-\d+)?$", "", run_name(run))


RUN_FILES = (
    "summary.txt",
    "schedule.json",
    "classification.json",
    "history.jsonl",
    "faults.jsonl",
    "final.json",
    "run.json",
)


def fault_run_lines(runs: Iterable[FaultRun]) -> list[str]:
    """What became of the writes of each fault scenario's run (a table of counts), then
    each run: the first few of each kind, its files, the checker's line and its plot."""
    runs = list(runs)
    if not runs:
        return []
    lines = ["", "## Fault runs", ""]
    lines += ["What became of each scenario's writes (times in seconds from its start):", ""]
    lines += [
        "| run | " + " | ".join(COUNTED) + " |",
        "| --- |" + " --- |" * len(COUNTED),
    ]
    for run in runs:
        counts = " | ".join(str(run.counts.get(kind, "?")) for kind in COUNTED)
        shown_only = " (shown, not graded)" if scenario_of(run) in SHOWN_NOT_GRADED else ""
        lines.append(f"| {run_name(run)}{shown_only} | {counts} |")
    if any(scenario_of(run) in SHOWN_NOT_GRADED for run in runs):
        lines += [
            "",
            "A run shown, not graded, reads each key at `1/3` through one node after the "
            "others were killed, not at an overlapping quorum: its rule (15.1) judges what "
            "that node holds, and its counts say what it missed.",
        ]
    for run in runs:
        name = run_name(run)
        files = ", ".join(
            f"[{file}]({run.folder}/{file})"
            for file in RUN_FILES
            if (file != "classification.json" or run.counts)
            and (file != "schedule.json" or run.notes)
        )
        lines += ["", f"### {name}", "", f"`{run.summary}`", ""]
        if run.notes:
            lines += [*run.notes, ""]
        for kind in COUNTED:
            if run.examples.get(kind):
                shown = len(run.examples[kind])
                total = run.counts.get(kind, shown)
                lines.append(f"- {kind} ({total}), the first {shown}:")
                lines += [f"  - `{example}`" for example in run.examples[kind]]
        if run.examples:
            lines.append("")
        lines.append(f"Files: {files}.")
        if run.has_plot:
            lines += ["", f"![the run {name}]({run.folder}/plot.png)"]
    return lines


def run_name(run: FaultRun) -> str:
    return run.folder.rsplit("/", 1)[-1]


def failed_rule_line(
    number: str, tests: list[SpecTestResult], rules: Mapping[str, Rule], spec_link: str
) -> str:
    """`- [3.4](SPEC.md#rule-3.4) When fewer than A ...: `test_x`: expected 504, got 201 ...`"""
    rule = rules.get(number)
    summary = rule.summary if rule else "(not in this spec)"
    failures = [t for t in tests if failed(t)]
    first = failures[0]
    more = f" (and {len(failures) - 1} more of its {len(tests)} tests)" if len(failures) > 1 else ""
    return (
        f"- [**{number}**]({spec_link}#rule-{number}) {summary} "
        f"— `{first.test}`: {first.message}{more}"
    )


def without_machine_paths(text: str, folders: Iterable[str]) -> str:
    """`text` with each of these folders of the machine that made it (longest first)
    replaced by `…`, so a report can be sent without them."""
    for folder in sorted({f.rstrip("/") for f in folders if len(f.rstrip("/")) > 1}, key=len)[::-1]:
        text = text.replace(folder, "…")
    return text


def rule_key(number: str) -> tuple[int, ...]:
    return tuple(int(part) for part in number.split("."))


def exit_code(results: list[SpecTestResult]) -> int:
    """0 when no test failed, 1 otherwise (as pytest's own)."""
    return 1 if any(map(failed, results)) else 0
