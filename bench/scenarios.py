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
import tempfile
from pathlib import Path

from bench.rate_search import START_RATE, Search, highest_sustained, sustains
from bench.scenario_setup import (
    PREFILL_KEYS,
    REQUEST_TIMEOUT,
    SCENARIOS,
    WORKLOADS,
    Scenario,
    topology,
)
from bench.scenarios_report import plot, report
from bench.vegeta import (
    VEGETA,
    Report,
    attack,
    check_vegeta,
    get_targets,
    put_targets,
    target_count,
)
from locustfiles.prefill import prefill, run_prefix


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
