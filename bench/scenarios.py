"""Runs every benchmark scenario in one command and writes a report with plots.

For each scenario (a bare aiohttp server as the reference, one node, 3 nodes with 1/1,
3 nodes with the default 2/3, and 2/3 with one node down behind Toxiproxy) and each
workload (PUT of new keys, GET over a filled key space), it searches the highest
constant rate whose p99 stays under the bound (50 ms) with no errors, using
bench.constant_rate. It writes REPORT.md, spectrum.png and throughput.png under the
results folder. Run from the repo root:

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
from dataclasses import dataclass
from pathlib import Path

import uvloop

from bench.constant_rate import Result, Workload, run
from locustfiles.prefill import KEY_PREFIX, prefill
from tests.launcher import Cluster, chaos_cluster, free_port, request, wait_for

P99_BOUND_MS = 50.0
PREFILL_KEYS = 10_000
WORKLOADS = ("put", "get")


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


def sustains(result: Result, bound_ms: float = P99_BOUND_MS) -> bool:
    """A rate is sustained when p99 is under the bound, nothing failed, and the generator
    really sent at that rate."""
    return (
        result.percentile_ms(99.0) < bound_ms
        and result.errors == 0
        and result.achieved_rate >= 0.95 * result.rate
    )


def highest_sustained(
    measure: Callable[[float], Result], start: float, limit: float, refinements: int = 3
) -> Result | None:
    """Doubles the rate from `start` until it is not sustained (or passes `limit`), then
    bisects between the last good and the first bad rate `refinements` times. Returns
    the measurement at the highest sustained rate, or None if even `start` was not."""
    best: Result | None = None
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


def measure_scenario(
    scenario: Scenario, kind: str, step_seconds: float, max_rate: float
) -> Result | None:
    with tempfile.TemporaryDirectory() as tmp, topology(scenario, Path(tmp)) as url:
        if kind == "get" and scenario.nodes:
            prefill(url, PREFILL_KEYS, replicas=scenario.replicas)
        runs = 0

        def measure(rate: float) -> Result:
            nonlocal runs
            runs += 1
            # Each PUT step writes keys of its own; GET reads the prefilled ones.
            prefix = f"run{runs}-" if kind == "put" else KEY_PREFIX
            workload = Workload(kind, PREFILL_KEYS, replicas=scenario.replicas, prefix=prefix)
            result = uvloop.run(run(url, rate, step_seconds, workload))
            verdict = "ok" if sustains(result) else "over"
            print(
                f"  {scenario.name:30} {kind:3} {rate:8,.0f}/s  p99 "
                f"{result.percentile_ms(99):8.2f} ms  errors {result.errors:5}  {verdict}",
                flush=True,
            )
            return result

        return highest_sustained(measure, start=250, limit=max_rate)


def report(
    results: dict[tuple[str, str], Result | None], out: Path, seconds: float, max_rate: float
) -> str:
    reference = {kind: results.get((SCENARIOS[0].name, kind)) for kind in WORKLOADS}
    lines = [
        "# dht benchmark report",
        "",
        f"Run on {datetime.date.today()} on {platform.node()} ({os.cpu_count()} cores, "
        f"Python {platform.python_version()}); load generator (bench.constant_rate, 64 "
        f"connections, open model) on the same machine. Each figure is the highest "
        f"constant rate with p99 < {P99_BOUND_MS:.0f} ms and no errors, found by doubling "
        f"then bisecting, {seconds:g} s per step; the ratio is to the bare aiohttp server "
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
                cells += ["< 250", "", ""]
                continue
            # The search stops doubling at --max-rate: a figure there is a lower bound.
            bound = ">= " if result.rate * 2 > max_rate else ""
            ratio = f"{result.rate / base.rate:.2f}" if base else ""
            p99 = f"{result.percentile_ms(99):.1f} ms"
            cells += [f"{bound}{result.rate:,.0f}", ratio, p99]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "![latency spectrum](spectrum.png)", "", "![throughput](throughput.png)"]
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text)
    return text


def plot(results: dict[tuple[str, str], Result | None], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spectrum = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]
    figure, axes = plt.subplots(1, len(WORKLOADS), figsize=(12, 4.5), sharey=True)
    for axis, kind in zip(axes, WORKLOADS, strict=True):
        for scenario in SCENARIOS:
            result = results.get((scenario.name, kind))
            if result is None:
                continue
            xs = [1 / (1 - p / 100) for p in spectrum]
            ys = [result.percentile_ms(p) for p in spectrum]
            axis.plot(xs, ys, marker="o", label=f"{scenario.name} @ {result.rate:,.0f}/s")
        axis.set_xscale("log")
        axis.set_xticks([1 / (1 - p / 100) for p in spectrum])
        axis.set_xticklabels([f"{p:g}%" for p in spectrum], rotation=45)
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
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], Result | None] = {}
    for scenario in SCENARIOS:
        if args.only and not any(part in scenario.name for part in args.only):
            continue
        for kind in WORKLOADS:
            results[scenario.name, kind] = measure_scenario(
                scenario, kind, args.step_seconds, args.max_rate
            )
    print(report(results, args.out, args.step_seconds, args.max_rate))
    plot(results, args.out)
    print(f"wrote {args.out / 'REPORT.md'}, spectrum.png, throughput.png")


if __name__ == "__main__":
    main()
