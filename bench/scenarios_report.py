"""bench.scenarios' report: REPORT.md (the highest sustained rates, their ratios to the
bare server, the generator-ceiling table and the verdict on the reference) and its two
plots, spectrum.png and throughput.png."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

from bench.rate_search import P99_BOUND_MS, START_RATE, Search, bound_by, why_over
from bench.scenario_setup import PREFILL_KEYS, REQUEST_TIMEOUT, SCENARIOS, WORKLOADS
from bench.vegeta import PERCENTILES, Report

# vegeta's CPU use from which it cuts into the bare server's share of the machine: the
# bare server runs on one thread and needs a whole core of its own.
HEAVY_GENERATOR_CORES = 0.9 * max(1, (os.cpu_count() or 2) - 1)


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
