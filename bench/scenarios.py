"""Runs every benchmark scenario in one command and writes a report with plots.

For each scenario (a bare aiohttp server as the reference, one node, 3 nodes with 1/1,
3 nodes with the default 2/3, and 2/3 with one node down behind Toxiproxy) and each
workload (PUT of new keys, GET over a filled key space), it searches the highest
constant rate whose p99 stays under the bound (50 ms) with no errors, sending with
vegeta (open model; `make bench-tools` builds it). A figure counts only if the generator
was not the bottleneck, so the report also says, for the first rate each search failed
at, whether vegeta still sent on schedule (then the server set the bound) and how much
CPU it used. It writes REPORT.md, spectrum.png and throughput.png under the results
folder. Run from the repo root:

    .venv/bin/python -m bench.scenarios --out results

A full run takes about 10 minutes; --step-seconds and --max-rate trade time for precision.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.vegeta import (
    PERCENTILES,
    VEGETA,
    Report,
    attack,
    check_vegeta,
    get_targets,
    put_targets,
    target_count,
)
from locustfiles.prefill import prefill, run_prefix
from tests.launcher import Cluster, chaos_cluster, free_port, request, wait_for

P99_BOUND_MS = 50.0
PREFILL_KEYS = 10_000
WORKLOADS = ("put", "get")
START_RATE = 250.0
REQUEST_TIMEOUT = 2.0
# vegeta's CPU use from which it cuts into the bare server's share of the machine: the
# bare server runs on one thread and needs a whole core of its own.
HEAVY_GENERATOR_CORES = 0.9 * max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int  # 0: the bare reference server
    replicas: str | None = None
    node_down: bool = False


SCENARIOS = (
    Scenario("bare aiohttp (reference)", 0),
    Scenario("1 node", 1),
    Scenario("3 nodes, 1/1", 3, "1/1"),
    Scenario("3 nodes, 2/3", 3),
    Scenario("3 nodes, 2/3, one node down", 3, node_down=True),
)


def sustains(result: Report, bound_ms: float = P99_BOUND_MS) -> bool:
    """A rate is sustained when p99 is under the bound, every request was answered with
    2xx/3xx, vegeta really sent at that rate and the answers kept up with it."""
    return (
        result.percentile_ms("p99") < bound_ms
        and result.failures == 0
        and result.kept_pace
        and result.throughput >= 0.95 * result.rate
    )


def highest_sustained(
    measure: Callable[[float], Report], start: float, limit: float, refinements: int = 3
) -> Report | None:
    """Doubles the rate from `start` until it is not sustained (or passes `limit`), then
    bisects between the last good and the first bad rate `refinements` times. Returns
    the measurement at the highest sustained rate, or None if even `start` was not."""
    best: Report | None = None
    rate, failed_at = start, None
    while rate <= limit:
        result = measure(rate)
        if not sustains(result):
            failed_at = rate
            break
        best = result
        rate *= 2
    if best is None or failed_at is None:
        return best
    low, high = best.rate, failed_at
    for _ in range(refinements):
        middle = (low + high) / 2
        result = measure(middle)
        if sustains(result):
            best, low = result, middle
        else:
            high = middle
    return best


@contextlib.contextmanager
def topology(scenario: Scenario, root: Path) -> Iterator[str]:
    """Starts what a scenario needs and yields the URL the load goes to."""
    if scenario.nodes == 0:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "bench.bare_server", "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: _answers(url), bool, deadline=10)
            yield url
        finally:
            server.terminate()
            server.wait()
        return
    settings = ["--log-level", "WARNING"]
    if scenario.node_down:
        cluster, testbed = chaos_cluster(root, scenario.nodes, settings)
        try:
            cluster.start()
            testbed.cut(testbed.links_into(scenario.nodes - 1))
            yield cluster[0].url
        finally:
            cluster.stop()
            testbed.stop()
        return
    cluster = Cluster(root, scenario.nodes, settings).start()
    try:
        yield cluster[0].url
    finally:
        cluster.stop()


def _answers(url: str) -> bool:
    try:
        return request("GET", url + "/v0/status", timeout=1).status == 200
    except OSError:
        return False


@dataclass
class Search:
    """Every step of one scenario's search, and the highest sustained one."""

    steps: list[Report] = field(default_factory=list)
    best: Report | None = None

    @property
    def first_failure(self) -> Report | None:
        """The lowest rate that was not sustained: what bounded the search."""
        failed = [step for step in self.steps if not sustains(step)]
        return min(failed, key=lambda step: step.rate, default=None)


def measure_scenario(
    scenario: Scenario, kind: str, step_seconds: float, max_rate: float, vegeta: Path
) -> Search:
    search = Search()
    with tempfile.TemporaryDirectory() as tmp, topology(scenario, Path(tmp)) as url:
        if kind == "get" and scenario.nodes:
            prefill(url, PREFILL_KEYS, replicas=scenario.replicas)

        def measure(rate: float) -> Report:
            count = target_count(rate, step_seconds)
            step = len(search.steps)
            # Each PUT step writes keys of its own; GET reads the prefilled ones.
            targets = (
                put_targets(url, run_prefix(f"put{step}"), scenario.replicas, count)
                if kind == "put"
                else get_targets(url, PREFILL_KEYS, scenario.replicas, count, seed=step)
            )
            result = attack(targets, rate, step_seconds, REQUEST_TIMEOUT, vegeta)
            search.steps.append(result)
            verdict = "ok" if sustains(result) else "over"
            print(
                f"  {scenario.name:30} {kind:3} {result.rate:8,.0f}/s  p99 "
                f"{result.percentile_ms('p99'):8.2f} ms  failed {result.failures:5}  "
                f"sent {result.sent_rate:8,.0f}/s  vegeta {result.generator_cores:4.2f} cores  "
                f"{verdict}",
                flush=True,
            )
            return result

        search.best = highest_sustained(measure, start=START_RATE, limit=max_rate)
    return search


def bound_by(search: Search) -> str:
    """What stopped a search: "generator" if vegeta could not send at the first rate
    that failed, "server" if it could (so the server's latency or errors did), or
    "--max-rate" if no rate failed."""
    failure = search.first_failure
    if failure is None:
        return "--max-rate"
    return "server" if failure.kept_pace else "generator"


def why_over(result: Report) -> str:
    """Why one step was not sustained, in the report's words."""
    reasons = []
    if result.percentile_ms("p99") >= P99_BOUND_MS:
        reasons.append(f"p99 {result.percentile_ms('p99'):.0f} ms")
    if result.failures:
        reasons.append(f"{result.failures} failed")
    if not result.kept_pace:
        reasons.append("vegeta fell behind")
    if result.throughput < 0.95 * result.rate:
        reasons.append(f"answered {result.throughput:,.0f}/s")
    return ", ".join(reasons)


def ceiling_table(searches: dict[tuple[str, str], Search]) -> list[str]:
    """Per scenario and workload, the first rate over the bound and what vegeta did
    there: the evidence for (or against) each figure being the server's."""
    lines = [
        "| scenario | workload | first rate over | why | vegeta sent | vegeta CPU | bound by |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (name, kind), search in searches.items():
        failure = search.first_failure
        if failure is None:
            lines.append(f"| {name} | {kind.upper()} | none | | | | --max-rate |")
            continue
        lines.append(
            f"| {name} | {kind.upper()} | {failure.rate:,.0f}/s | {why_over(failure)} | "
            f"{failure.sent_rate:,.0f}/s ({failure.sent_rate / failure.rate:.2f}) | "
            f"{failure.generator_cores:.2f} cores, {failure.cpu_us_per_request:.0f} µs/req | "
            f"{bound_by(search)} |"
        )
    return lines


def reference_verdict(searches: dict[tuple[str, str], Search]) -> list[str]:
    """Whether the bare server's figures are its own. They are the denominators of every
    ratio: if vegeta set them, every ratio compares dht with the generator."""
    lines = []
    for kind in WORKLOADS:
        search = searches.get((SCENARIOS[0].name, kind))
        if search is None:
            continue
        bound, failure = bound_by(search), search.first_failure
        if bound == "server" and failure is not None:
            heavy = failure.generator_cores >= HEAVY_GENERATOR_CORES
            lines.append(
                f"- {kind.upper()}: bound by the server. At {failure.rate:,.0f}/s vegeta still "
                f"sent {failure.sent_rate / failure.rate:.0%} of the rate, using "
                f"{failure.generator_cores:.2f} cores"
                + (
                    ", which cut into the server's share of the machine: the bare figure is "
                    "the server's on what vegeta left it, not on a whole machine."
                    if heavy
                    else "."
                )
            )
        elif bound == "generator" and failure is not None:
            lines.append(
                f"- {kind.upper()}: NOT bound by the server: at {failure.rate:,.0f}/s vegeta "
                f"sent only {failure.sent_rate:,.0f}/s. The bare figure is the generator's "
                "ceiling, and every ratio to it compares dht with vegeta, not with the server."
            )
        else:
            lines.append(
                f"- {kind.upper()}: no rate up to --max-rate failed: the bare figure is a lower "
                "bound set by the search, not by the server."
            )
    return lines or ["- not run (--only): the ratios have no reference in this report."]


def report(
    searches: dict[tuple[str, str], Search], out: Path, seconds: float, max_rate: float
) -> str:
    results = {key: search.best for key, search in searches.items()}
    reference = {kind: results.get((SCENARIOS[0].name, kind)) for kind in WORKLOADS}
    lines = [
        "# dht benchmark report",
        "",
        f"Run on {datetime.date.today()} on {platform.node()} ({os.cpu_count()} cores, "
        f"Python {platform.python_version()}); load generator vegeta (open model: it sends "
        f"at the set rate whatever the server does, {REQUEST_TIMEOUT:g} s time-out per "
        "request) on the same machine. Each figure is the highest "
        f"constant rate with p99 < {P99_BOUND_MS:.0f} ms and every request answered 2xx, "
        f"found by doubling from {START_RATE:.0f}/s (up to {max_rate:,.0f}/s) then "
        f"bisecting, {seconds:g} s per step; "
        "the ratio is to the bare aiohttp server "
        "measured in the same run. PUT writes new keys; GET reads a filled key space of "
        f"{PREFILL_KEYS} keys.",
        "",
        "| scenario | PUT req/s | PUT vs bare | PUT p99 | GET req/s | GET vs bare | GET p99 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for scenario in SCENARIOS:
        if not any((scenario.name, kind) in results for kind in WORKLOADS):
            continue  # not run (--only)
        cells = [scenario.name]
        for kind in WORKLOADS:
            result, base = results.get((scenario.name, kind)), reference[kind]
            if result is None:
                cells += [f"< {START_RATE:.0f}", "", ""]
                continue
            # No rate failed before --max-rate: the figure is a lower bound.
            bound = ">= " if bound_by(searches[scenario.name, kind]) == "--max-rate" else ""
            ratio = f"{result.rate / base.rate:.2f}" if base else ""
            p99 = f"{result.percentile_ms('p99'):.1f} ms"
            cells += [f"{bound}{result.rate:,.0f}", ratio, p99]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Generator ceiling",
        "",
        "A figure counts only if the generator was not the bottleneck. For the first rate "
        "each search failed at: why it failed, what vegeta sent (and its share of the rate), "
        'the CPU vegeta used, and so what bounded the figure. "server" means vegeta kept '
        'pace and the server did not; "generator" means vegeta could not send the rate.',
        "",
        *ceiling_table(searches),
        "",
        "The bare server (the reference for every ratio):",
        "",
        *reference_verdict(searches),
        "",
        "![latency spectrum](spectrum.png)",
        "",
        "![throughput](throughput.png)",
    ]
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text)
    return text


def plot(results: dict[tuple[str, str], Report | None], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spectrum = list(PERCENTILES.values())  # what vegeta's JSON report gives: p50 .. max
    figure, axes = plt.subplots(1, len(WORKLOADS), figsize=(12, 4.5), sharey=True)
    for axis, kind in zip(axes, WORKLOADS, strict=True):
        for scenario in SCENARIOS:
            result = results.get((scenario.name, kind))
            if result is None:
                continue
            ys = [result.percentile_ms(label) for label in spectrum]
            axis.plot(spectrum, ys, marker="o", label=f"{scenario.name} @ {result.rate:,.0f}/s")
        axis.set_yscale("log")
        axis.set_title(f"{kind.upper()} latency at the highest sustained rate")
        axis.set_xlabel("percentile")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    axes[0].set_ylabel("latency, ms")
    figure.tight_layout()
    figure.savefig(out / "spectrum.png", dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(10, 4.5))
    width = 0.38
    for offset, kind in enumerate(WORKLOADS):
        rates = [(result.rate if (result := results.get((s.name, kind))) else 0) for s in SCENARIOS]
        positions = [i + (offset - 0.5) * width for i in range(len(SCENARIOS))]
        axis.bar(positions, rates, width, label=kind.upper())
    axis.set_xticks(range(len(SCENARIOS)))
    axis.set_xticklabels([s.name for s in SCENARIOS], fontsize=8)
    axis.set_ylabel(f"req/s at p99 < {P99_BOUND_MS:.0f} ms")
    axis.set_title("Highest sustained rate per scenario")
    axis.legend()
    axis.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out / "throughput.png", dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scenarios", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=Path("results"), help="(default results)")
    parser.add_argument("--step-seconds", type=float, default=5.0, help="(default 5)")
    parser.add_argument("--max-rate", type=float, default=64_000.0, help="(default 64000)")
    parser.add_argument(
        "--only", action="append", help="run only scenarios whose name contains this"
    )
    parser.add_argument("--vegeta", type=Path, default=VEGETA, help=f"(default {VEGETA})")
    args = parser.parse_args()
    vegeta = check_vegeta(args.vegeta)
    args.out.mkdir(parents=True, exist_ok=True)
    searches: dict[tuple[str, str], Search] = {}
    for scenario in SCENARIOS:
        if args.only and not any(part in scenario.name for part in args.only):
            continue
        for kind in WORKLOADS:
            searches[scenario.name, kind] = measure_scenario(
                scenario, kind, args.step_seconds, args.max_rate, vegeta
            )
    print(report(searches, args.out, args.step_seconds, args.max_rate))
    plot({key: search.best for key, search in searches.items()}, args.out)
    print(f"wrote {args.out / 'REPORT.md'}, spectrum.png, throughput.png")


if __name__ == "__main__":
    main()
