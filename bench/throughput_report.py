"""bench.throughput's rows and what its report says of them (pure): the table, the
verdicts on issue 30's targets and issue 51's goals, the generator ceiling and the cost
of metrics, TLS and syncing."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from bench.process_cpu import ThreadCpu
from bench.wrk import SATURATED_CORE_SHARE, WrkRun

WORKLOADS = ("PUT", "GET")
BARE = "bare aiohttp"
RAW = "raw uvloop Protocol"
ONE_NODE = "1 node"
THREE_1_1 = "3 nodes, 1/1"
THREE_2_3 = "3 nodes, 2/3 (default)"
NO_METRICS = ", --no-metrics"
WITH_TLS = ", TLS between nodes"
NO_LEAN = ", --no-lean-http"
NO_SYNC = ", --durability none"
SYNC_EACH = ", --durability each"
# Issue 40's goals for the group commit (the default) against no fsync at all.
GROUP_COMMIT_MAX_COST = 0.10
GROUP_COMMIT_MAX_ADDED_P99_MS = 2.0


@dataclass
class Row:
    """One row of the table: every round's wrk run, and every round's ratio to the bare
    server's run just before it (paired, so drift on the shared machine cancels)."""

    pinning: str
    name: str
    workload: str
    runs: list[WrkRun] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    # Every round's server CPU (user + system, all threads, every process of the row)
    # per request, in microseconds.
    cpu_us: list[float] = field(default_factory=list)
    # Every round's ratio to the raw uvloop server's run of the same round, when one ran.
    raw_ratios: list[float] = field(default_factory=list)
    # Every round's server CPU per request by thread, µs (`cpu_us` split).
    threads: list[ThreadCpu] = field(default_factory=list)

    @property
    def median(self) -> WrkRun:
        """The round with the median rate (the lower middle for an even count), so its
        latencies and rate come from one real run."""
        middle = statistics.median_low(run.rate for run in self.runs)
        return next(run for run in self.runs if run.rate == middle)

    @property
    def median_threads(self) -> ThreadCpu:
        """The CPU by thread of the round with the median rate (`median`)."""
        return self.threads[self.runs.index(self.median)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def raw_ratio(self) -> str:
        """The median share of the raw uvloop server, or a dash with none measured."""
        return f"{statistics.median(self.raw_ratios):.2f}" if self.raw_ratios else "-"

    def share_of(self, other: Row) -> float:
        """The median over rounds of this row's rate over `other`'s in the same round
        (the two ran in turn in every round, as a row and its bare server do)."""
        return statistics.median(
            run.rate / twin.rate if twin.rate else 0.0
            for run, twin in zip(self.runs, other.runs, strict=True)
        )

    @property
    def cpu_per_request(self) -> float:
        """The median of the rounds' server CPU per request, µs."""
        return statistics.median(self.cpu_us) if self.cpu_us else 0.0

    @property
    def errors(self) -> int:
        return sum(run.errors for run in self.runs)

    @property
    def generator_bound(self) -> bool:
        return any(run.generator_bound for run in self.runs)


@dataclass(frozen=True)
class Target:
    """A goal from issue 30: this row's ratio to the bare server at least `share`, or
    the CPU it adds per request over the bare server at most `added_us[workload]`."""

    pinning: str
    name: str
    share: float | None = None
    added_us: tuple[tuple[str, float], ...] = ()


TARGETS = (
    Target("pinned", ONE_NODE, added_us=(("PUT", 24.0), ("GET", 10.0))),
    Target("unpinned", THREE_2_3, share=0.40),
)


@dataclass(frozen=True)
class Goal:
    """Issue 51's goals for one row and workload, each bound optional: its rate at least
    `share` of the bare server's and at least `share_of_unsynced` of its `--durability
    none` twin's, its p99 at most `p99_over_bare` times the bare server's and at most
    `p99_ms`, its server CPU (every process of the row) at most `cpu_us` per request."""

    pinning: str
    name: str
    workload: str
    share: float | None = None
    share_of_unsynced: float | None = None
    p99_over_bare: float | None = None
    p99_ms: float | None = None
    cpu_us: float | None = None


ISSUE_51_GOALS = (
    Goal("pinned", ONE_NODE, "PUT", share=0.85, share_of_unsynced=0.95, p99_over_bare=1.5),
    Goal("pinned", ONE_NODE, "GET", share=1.3, p99_over_bare=1.5),
    Goal("unpinned", THREE_2_3, "PUT", share=0.45, cpu_us=150.0, p99_ms=15.0),
    Goal("unpinned", THREE_2_3, "GET", share=0.6, p99_ms=15.0),
)


def latency(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def table(rows: list[Row]) -> str:
    lines = [
        "| pinning | server | workload | req/s | p50 | p99 | vs bare | vs raw "
        "| server CPU µs/req | errors | wrk CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        run = row.median
        bound = " (generator-bound)" if row.generator_bound else ""
        lines.append(
            f"| {row.pinning} | {row.name} | {row.workload} | {run.rate:,.0f} | "
            f"{latency(run.p50_ms)} | {latency(run.p99_ms)} | {row.ratio:.2f} | "
            f"{row.raw_ratio} | {row.cpu_per_request:.0f} | {row.errors} | "
            f"{run.cpu_share:.0%}{bound} |"
        )
    return "\n".join(lines)


def cpu_added(rows: list[Row]) -> list[str]:
    """One line per dht row: the server CPU per request it costs over the bare server
    measured beside it (same pinning and workload). Issue 30's targets use this figure:
    far steadier across machines than a ratio of rates."""
    lines = []
    for row in rows:
        bare = find_row(rows, row.pinning, BARE, row.workload)
        if row.name in (BARE, RAW) or bare is None:
            continue
        added = row.cpu_per_request - bare.cpu_per_request
        lines.append(
            f"{row.name} ({row.pinning}) adds {added:.0f} µs of CPU per {row.workload} "
            f"({row.cpu_per_request:.0f} against {bare.cpu_per_request:.0f} µs for bare "
            "aiohttp)"
        )
    return lines


def find_row(rows: list[Row], pinning: str, name: str, workload: str) -> Row | None:
    return next(
        (r for r in rows if (r.pinning, r.name, r.workload) == (pinning, name, workload)), None
    )


def verdicts(rows: list[Row]) -> list[str]:
    """One line per target and workload, ending in "met" or "missed"; a second line says
    why a figure does not count (a generator-bound run, or errors), if it does not."""
    lines = []
    for target in TARGETS:
        for workload in WORKLOADS:
            row = find_row(rows, target.pinning, target.name, workload)
            bare = find_row(rows, target.pinning, BARE, workload)
            if row is None or bare is None:
                continue
            if target.share is not None:
                outcome = "met" if row.ratio >= target.share else "missed"
                lines.append(
                    f"target {workload} {target.name} >= {target.share:.2f} x bare "
                    f"({target.pinning}): {row.ratio:.2f} {outcome}"
                )
            elif (limit := dict(target.added_us).get(workload)) is not None:
                added = row.cpu_per_request - bare.cpu_per_request
                outcome = "met" if added <= limit else "missed"
                lines.append(
                    f"target {workload} {target.name} adds <= {limit:.0f} µs of CPU over bare "
                    f"({target.pinning}): {added:.0f} µs {outcome}"
                )
            else:
                continue
            lines += [f"  does not count: {reason}" for reason in doubts(row, bare)]
    return lines


def issue_51_verdicts(rows: list[Row]) -> list[str]:
    """One line per bound of issue 51's goals, ending in "met" or "missed", each followed
    by why its figure does not count, if it does not; nothing for a goal whose row or
    bare server did not run (a bound against the `--durability none` twin needs it too)."""
    lines = []
    for goal in ISSUE_51_GOALS:
        row = find_row(rows, goal.pinning, goal.name, goal.workload)
        bare = find_row(rows, goal.pinning, BARE, goal.workload)
        if row is None or bare is None:
            continue
        unsynced = find_row(rows, goal.pinning, goal.name + NO_SYNC, goal.workload)
        for bound, figure, met, against in judgements(goal, row, bare, unsynced):
            lines.append(
                f"issue 51 {goal.workload} {goal.name} {bound} ({goal.pinning}): {figure} "
                f"{'met' if met else 'missed'}"
            )
            lines += [f"  does not count: {reason}" for reason in doubts(row, *against)]
    return lines


class Judgement(NamedTuple):
    """One bound of a goal on one row: the bound, the figure measured, whether the bound
    holds, and the rows the figure is measured against (whose doubts it shares)."""

    bound: str
    figure: str
    met: bool
    against: tuple[Row, ...] = ()


def judgements(goal: Goal, row: Row, bare: Row, unsynced: Row | None) -> Iterator[Judgement]:
    """Each bound of `goal` on `row`; a rate's figure also as a share of the raw uvloop
    server, when it ran."""
    run, bare_run = row.median, bare.median
    on_raw = f" ({row.raw_ratio} x raw uvloop)" if row.raw_ratios else ""
    if goal.share is not None:
        met = row.ratio >= goal.share
        yield Judgement(f">= {goal.share:.2f} x bare", f"{row.ratio:.2f}{on_raw}", met, (bare,))
    if goal.share_of_unsynced is not None and unsynced is not None:
        share, least = row.share_of(unsynced), goal.share_of_unsynced
        bound = f">= {least:.2f} x `{NO_SYNC.strip(', ')}`"
        both = f"{row.raw_ratio} against {unsynced.raw_ratio} x raw uvloop"
        figure = f"{share:.2f} ({both})" if row.raw_ratios else f"{share:.2f}"
        yield Judgement(bound, figure, share >= least, (bare, unsynced))
    if goal.p99_over_bare is not None:
        times = f"{run.p99_ms / bare_run.p99_ms:.2f}" if bare_run.p99_ms else "-"
        figure = f"{latency(run.p99_ms)}, {times} x bare's {latency(bare_run.p99_ms)}"
        met = run.p99_ms <= goal.p99_over_bare * bare_run.p99_ms
        yield Judgement(f"p99 <= {goal.p99_over_bare:g} x bare's", figure, met, (bare,))
    if goal.p99_ms is not None:
        met = run.p99_ms <= goal.p99_ms
        yield Judgement(f"p99 <= {goal.p99_ms:g} ms", latency(run.p99_ms), met)
    if goal.cpu_us is not None:
        bound, cpu = f"server CPU <= {goal.cpu_us:g} µs per request", row.cpu_per_request
        yield Judgement(bound, f"{cpu:.0f} µs", cpu <= goal.cpu_us)


def doubts(row: Row, *references: Row) -> list[str]:
    """Why a figure is not a measurement of dht: the generator set a rate, or requests
    failed (a fast error is not throughput), on the row or a row it is compared with."""
    measured = (*references, row)
    reasons = [
        f"wrk used >= {SATURATED_CORE_SHARE:.0%} of its core on {r.name}"
        for r in measured
        if r.generator_bound
    ]
    reasons += [f"{r.errors} errors on {r.name}" for r in measured if r.errors]
    return reasons


def ceiling(rows: list[Row]) -> list[str]:
    """The evidence that wrk was not the bottleneck: per pinning and workload, the rate
    it reached on the bare server against the fastest dht row, and its CPU share."""
    lines = []
    for pinning in dict.fromkeys(row.pinning for row in rows):
        for workload in WORKLOADS:
            bare = find_row(rows, pinning, BARE, workload)
            raw = find_row(rows, pinning, RAW, workload)
            others = [
                r
                for r in rows
                if (r.pinning, r.workload) == (pinning, workload) and r.name not in (BARE, RAW)
            ]
            if bare is None or not others:
                continue
            fastest, run = max(others, key=lambda r: r.median.rate), bare.median
            # Its CPU per request is roughly fixed, so a full core would send about this.
            full_core = f"{run.rate / run.cpu_share:,.0f}" if run.cpu_share else "?"
            on_raw = (
                f"; on the raw uvloop server {raw.median.rate:,.0f} req/s using "
                f"{raw.median.cpu_share:.0%}, {raw.median.rate / fastest.median.rate:.1f}x"
                if raw is not None
                else ""
            )
            lines.append(
                f"{pinning} {workload}: wrk reached {run.rate:,.0f} req/s on the bare server "
                f"using {run.cpu_share:.0%} of its core (~{full_core} req/s at a full core), "
                f"{run.rate / fastest.median.rate:.1f}x the fastest dht row "
                f"({fastest.name}, {fastest.median.rate:,.0f} req/s){on_raw}"
            )
    bound = [f"{r.pinning} {r.name} {r.workload}" for r in rows if r.generator_bound]
    lines.append(
        "generator-bound rows (wrk >= "
        f"{SATURATED_CORE_SHARE:.0%} of a core in some round): {', '.join(bound) or 'none'}"
    )
    return lines


def metrics_costs(rows: list[Row]) -> list[str]:
    """What counting for /metrics costs (rows with a --no-metrics twin)."""
    return twin_costs(rows, NO_METRICS, "metrics cost", 0.05, costly_twin=False)


def tls_costs(rows: list[Row]) -> list[str]:
    """What TLS between nodes costs (rows with a TLS twin)."""
    return twin_costs(rows, WITH_TLS, "TLS cost", 0.15, costly_twin=True)


def lean_gains(rows: list[Row]) -> list[str]:
    """What the lean HTTP path saves (rows with a --no-lean-http twin): CPU per request
    and share of the bare server, with and without it."""
    lines = []
    for row in rows:
        twin = find_row(rows, row.pinning, row.name + NO_LEAN, row.workload)
        if twin is None:
            continue
        lean, aiohttp_path = row.cpu_per_request, twin.cpu_per_request
        saved = 1 - lean / aiohttp_path if aiohttp_path else 0.0
        lines.append(
            f"lean HTTP {row.pinning} {row.name} {row.workload}: {lean:.0f} µs of CPU per "
            f"request against {aiohttp_path:.0f} with `--no-lean-http` ({saved:.0%} less); "
            f"{row.ratio:.2f} against {twin.ratio:.2f} x bare"
        )
    return lines


def twin_costs(
    rows: list[Row], suffix: str, what: str, target: float, costly_twin: bool
) -> list[str]:
    """One line per row with a twin named `suffix` longer: both rates as shares of the
    bare server, both p99s, and the cost (1 - costly/cheap, from the median shares) of
    the twin (`costly_twin`) or of the row."""
    lines = []
    for row in rows:
        twin = find_row(rows, row.pinning, row.name + suffix, row.workload)
        if twin is None:
            continue
        costly, cheap = (twin, row) if costly_twin else (row, twin)
        cost = 1 - costly.ratio / cheap.ratio if cheap.ratio else 0.0
        lines.append(
            f"{what} {row.pinning} {row.name} {row.workload}: {row.ratio:.2f} x bare "
            f"(p99 {latency(row.median.p99_ms)}) against {twin.ratio:.2f} x bare with "
            f"`{suffix.strip(', ')}` (p99 {latency(twin.median.p99_ms)}): {cost:+.1%} "
            f"(target under {target:.0%})"
        )
    return lines


def durability_costs(rows: list[Row]) -> list[str]:
    """What syncing costs (rows with a `--durability none` twin): the group commit (the
    row itself) and a sync per write (its `--durability each` twin, if measured) against
    no sync, as shares of the bare server and p99s, with issue 40's verdict on the group
    commit: at most 10% of the unsynced rate, at most 2 ms added to its p99. PUT rows
    only: a GET syncs nothing, whatever the durability."""
    lines = []
    for row in rows:
        unsynced = find_row(rows, row.pinning, row.name + NO_SYNC, row.workload)
        if unsynced is None or row.workload != "PUT":
            continue
        cost = 1 - row.ratio / unsynced.ratio if unsynced.ratio else 0.0
        added = row.median.p99_ms - unsynced.median.p99_ms
        met = cost <= GROUP_COMMIT_MAX_COST and added <= GROUP_COMMIT_MAX_ADDED_P99_MS
        lines.append(
            f"group commit {row.pinning} {row.name} {row.workload}: {row.ratio:.2f} x bare "
            f"(p99 {latency(row.median.p99_ms)}) against {unsynced.ratio:.2f} x bare "
            f"unsynced (p99 {latency(unsynced.median.p99_ms)}): costs {cost:.1%} of the "
            f"rate and {added:+.2f} ms of p99 (goal <= {GROUP_COMMIT_MAX_COST:.0%}, "
            f"<= {GROUP_COMMIT_MAX_ADDED_P99_MS:g} ms): {'met' if met else 'missed'}"
        )
        lines += [f"  does not count: {reason}" for reason in doubts(row, unsynced)]
        each = find_row(rows, row.pinning, row.name + SYNC_EACH, row.workload)
        if each is not None:
            each_cost = 1 - each.ratio / unsynced.ratio if unsynced.ratio else 0.0
            lines.append(
                f"sync per write {row.pinning} {row.name} {row.workload}: {each.ratio:.2f} x "
                f"bare (p99 {latency(each.median.p99_ms)}): costs {each_cost:.1%} of the "
                "unsynced rate"
            )
    return lines
