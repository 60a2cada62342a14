"""Benchmark: what counting for GET /metrics costs, in CPU time per request.

Throughput ratios (`bench.throughput --only metrics`) swing by ±10% from one round to
the next on this shared 2-core machine, more than the cost to be measured. CPU time is
steadier: at a fixed rate (vegeta, open model), the CPU seconds the node processes use
per request answered, with metrics and with `--no-metrics`, measured in turn within each
round (their order alternating), all processes unpinned.

Two 3-node clusters run side by side (one of each kind), plus the bare aiohttp server
as the generator's reference: vegeta must keep the rate on it and on both clusters, and
its CPU share is printed. Each round sends PUTs (new keys, 100 bytes, default 2/3), then
GETs over them, to the first node of each cluster.

    .venv/bin/python -m bench.metrics_cost --rate 1500 --seconds 10 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.pinning import process_tree
from bench.servers import bare_server
from bench.vegeta import Report, attack, check_vegeta, get_targets, put_targets, target_count
from dht.conformance.launcher import Cluster
from locustfiles.prefill import KEY_PREFIX

WORKLOADS = ("PUT", "GET")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by `pids` and their threads."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / _TICKS


@dataclass
class Series:
    """One server's runs of one workload: CPU µs per answered request, per round."""

    name: str
    workload: str
    cpu_us: list[float] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)

    @property
    def median_cpu_us(self) -> float:
        return statistics.median(self.cpu_us)


def node_pids(cluster: Cluster | None) -> list[int]:
    return [
        pid
        for node in (cluster or [])
        if node.process is not None
        for pid in process_tree(node.process.pid)
    ]


def measured(send: Callable[[], Report], pids: list[int]) -> tuple[Report, float]:
    """Runs `send` and returns its report and the CPU µs `pids` used per answer."""
    before = cpu_seconds(pids)
    report = send()
    used = cpu_seconds(pids) - before
    answered = report.requests - report.status_codes.get(0, 0)
    return report, used / answered * 1e6 if answered else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost", description=__doc__)
    parser.add_argument("--rate", type=float, default=1500.0, help="requests/s (1500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (10)")
    parser.add_argument("--rounds", type=int, default=4, help="an even number (4)")
    args = parser.parse_args(argv)
    check_vegeta()
    flags = ["--log-level", "WARNING"]
    with (
        tempfile.TemporaryDirectory() as tmp,
        bare_server(None) as bare,
    ):
        clusters = {
            "3 nodes, metrics": Cluster(Path(tmp) / "on", 3, flags).start(),
            "3 nodes, --no-metrics": Cluster(
                Path(tmp) / "off", 3, [*flags, "--no-metrics"]
            ).start(),
        }
        try:
            series = {
                (name, workload): Series(name, workload)
                for name in [bare.name, *clusters]
                for workload in WORKLOADS
            }
            count = target_count(args.rate, args.seconds)
            for round_number in range(args.rounds):
                names = list(clusters) if round_number % 2 == 0 else list(reversed(clusters))
                for workload in WORKLOADS:
                    urls = {bare.name: bare.url} | {n: clusters[n][0].url for n in names}
                    for name, url in urls.items():
                        pids = node_pids(clusters.get(name))
                        targets = (  # the GETs read the keys the PUTs (over)wrote
                            put_targets(url, KEY_PREFIX, None, count)
                            if workload == "PUT"
                            else get_targets(url, count, None, count, seed=round_number)
                        )
                        report, cpu_us = measured(
                            lambda targets=targets: attack(targets, args.rate, args.seconds), pids
                        )
                        entry = series[name, workload]
                        entry.reports.append(report)
                        entry.cpu_us.append(cpu_us)
                        print(
                            f"  round {round_number + 1} {name:22} {workload} sent "
                            f"{report.sent_rate:7,.0f}/s "
                            f"p99 {report.percentile_ms('p99'):7.1f} ms "
                            f"failures {report.failures}  node CPU {cpu_us:6.1f} us/request  "
                            f"vegeta {report.generator_cores:.0%} of a core",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            for cluster in clusters.values():
                cluster.stop()
    print(
        f"vegeta at {args.rate:g}/s, {args.seconds:g} s per run, {args.rounds} rounds "
        f"(order of the clusters alternating), on {os.cpu_count()} cores\n"
    )
    print(
        "| server | workload | sent/s (min) | p99 (median) | failures "
        "| node CPU us/request (median; each round) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for entry in series.values():
        p99 = statistics.median(r.percentile_ms("p99") for r in entry.reports)
        sent = min(r.sent_rate for r in entry.reports)
        failures = sum(r.failures for r in entry.reports)
        rounds = ", ".join(f"{value:.0f}" for value in entry.cpu_us)
        cpu = f"{entry.median_cpu_us:.1f} ({rounds})" if entry.name != bare.name else "-"
        print(
            f"| {entry.name} | {entry.workload} | {sent:,.0f} | {p99:.1f} ms | {failures} | {cpu} |"
        )
    for workload in WORKLOADS:
        on = series["3 nodes, metrics", workload].median_cpu_us
        off = series["3 nodes, --no-metrics", workload].median_cpu_us
        print(
            f"metrics cost {workload}: {on:.1f} vs {off:.1f} CPU us per request: "
            f"{on / off - 1:+.1%} (target under 5%)"
        )
    kept = all(r.kept_pace for entry in series.values() for r in entry.reports)
    print(f"vegeta kept the rate in every run: {kept}")


if __name__ == "__main__":
    main()
