"""The anti-entropy benchmark's foreground figure: the cluster's highest mixed GET/PUT
rate, then half of it at a constant rate in sync and again while a wiped node is
rebuilt, each window sampled for the rebuild's progress and the machine's other load."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import threading
import time
from pathlib import Path
from typing import Any

from bench.anti_entropy_cluster import (
    compactions_between,
    statuses,
    wait,
    wait_in_sync,
    wipe_and_restart,
)
from bench.anti_entropy_load import CONCURRENCY, VALUE, VALUE_BYTES, mixed_lua, mixed_targets
from bench.anti_entropy_report import Foreground, ForegroundFigure, progress
from bench.exchange_status import landed
from bench.machine_cpu import QUIET_CORES, CpuMeter, wait_quiet

PYTHON_GENERATOR_CAP = 2_500.0
SAMPLE = 0.5
MAX_RATE_SECONDS = 5.0
REQUEST_TIMEOUT = 2.0
QUIET_SAMPLE = 5.0  # seconds the rebuild's copy rate is read with no traffic


class Sampler(threading.Thread):
    """Reads every node's status every SAMPLE seconds until stopped: (seconds, records
    copied into `target`). Runs in both windows, so both carry its small load."""

    def __init__(self, cluster: Any, target: str) -> None:
        super().__init__(daemon=True)
        self._cluster, self._target = cluster, target
        self.stopping = threading.Event()
        self.samples: list[tuple[float, int]] = []

    def run(self) -> None:
        started = time.monotonic()
        while True:
            with contextlib.suppress(OSError, RuntimeError):
                count = landed(statuses(self._cluster), self._target)
                self.samples.append((time.monotonic() - started, count))
            if self.stopping.wait(SAMPLE):
                return


def max_rate(url: str, keys: int, folder: Path) -> tuple[float, str]:
    """The most mixed GET/PUT requests a second the cluster answers through `url` (wrk,
    closed model, 64 connections)."""
    from bench.wrk import run_wrk

    script = folder / "mixed.lua"
    script.write_text(mixed_lua(keys, VALUE_BYTES))
    run = run_wrk(url, str(script), MAX_RATE_SECONDS, CONCURRENCY, [])
    how = (
        f"wrk -t1 -c{CONCURRENCY} {MAX_RATE_SECONDS:g} s closed model: p99 {run.p99_ms:.1f} ms, "
        f"{run.errors} errors, wrk CPU {run.cpu_share:.0%}"
        + (" GENERATOR-BOUND" if run.generator_bound else "")
    )
    return run.rate, how


def constant_rate(
    url: str, keys: int, rate: float, window: float, use_vegeta: bool, seed: int, pids: list[int]
) -> Foreground:
    meter = CpuMeter(pids)
    if use_vegeta:
        from bench.vegeta import attack, target_count

        report = attack(
            mixed_targets(url, keys, target_count(rate, window), VALUE, seed),
            rate,
            window,
            REQUEST_TIMEOUT,
        )
        return Foreground(
            report.rate,
            report.percentile_ms("p50"),
            report.percentile_ms("p99"),
            report.requests,
            report.failures,
            report.sent_rate,
            report.generator_cores,
            meter.foreign(),
            report.percentile_ms("p90"),
            report.percentile_ms("p95"),
            report.percentile_ms("max"),
        )
    import uvloop

    from bench.constant_rate import run
    from bench.workload import Workload

    cpu = time.process_time()
    result = uvloop.run(
        run(url, rate, window, Workload("mixed", keys, VALUE), CONCURRENCY, REQUEST_TIMEOUT, seed)
    )
    return Foreground(
        rate,
        result.percentile_ms(50),
        result.percentile_ms(99),
        result.sent,
        result.errors,
        result.sent / window,
        (time.process_time() - cpu) / max(window, result.elapsed),
        meter.foreign(),
        result.percentile_ms(90),
        result.percentile_ms(95),
        result.percentile_ms(100),
    )


def foreground(
    cluster: Any,
    keys: int,
    window: float,
    fixed_rate: float,
    rate: float,
    deadline: float,
    folder: Path,
    seed: int,
    patience: float,
) -> ForegroundFigure:
    """The cluster runs at `--anti-entropy-rate rate` and is in sync. A window whose
    other processes took more than QUIET_CORES is measured once more (the busy one only
    if the rebuild is still running), and the quieter of the two is kept."""
    from bench.vegeta import CONNECTIONS, VEGETA

    def pids() -> list[int]:
        return [node.process.pid for node in cluster if node.process is not None]

    use_vegeta = VEGETA.is_file()
    url, wiped = cluster[0].url, cluster[2]
    if fixed_rate:
        highest, how = fixed_rate * 2, "--foreground-rate given"
    else:
        wait_quiet(pids(), patience)
        meter = CpuMeter(pids())
        highest, how = max_rate(url, keys, folder)
        how += f", other processes {meter.foreign():.2f} cores"
        wait_in_sync(cluster, deadline)  # its PUTs reach the third replica late
    load = highest / 2
    if use_vegeta:
        generator = (
            f"vegeta {VEGETA} (open model: sends at the rate whatever the server does, "
            f"{CONNECTIONS} connections at most, {REQUEST_TIMEOUT:g} s time-out), mixed GET/PUT "
            "alternately over the loaded keys, on the same 2 cores as the nodes"
        )
    else:
        load = min(load, PYTHON_GENERATOR_CAP)
        generator = (
            "bench/constant_rate.py run() (Python open model, latency from the intended send "
            f"time; vegeta not found), {CONCURRENCY} connections, capped at "
            f"{PYTHON_GENERATOR_CAP:,.0f}/s"
        )

    def measured(seed_offset: int) -> tuple[Foreground, list[int]]:
        """One window, with the sampler reading the nodes' status meanwhile; returns the
        records copied into node 3 at each sample."""
        sampler = Sampler(cluster, wiped.cluster_url)
        sampler.start()
        began = datetime.datetime.now()
        try:
            result = constant_rate(url, keys, load, window, use_vegeta, seed + seed_offset, pids())
        finally:
            sampler.stopping.set()
            sampler.join()
        ended = datetime.datetime.now()
        counts = tuple(compactions_between(node, began, ended) for node in cluster)
        result = dataclasses.replace(result, compactions=counts)
        return result, [count for _, count in sampler.samples]

    progress(f"foreground: {load:,.0f} req/s, no exchange running")
    wait_quiet(pids(), patience)
    idle, _ = measured(0)
    idle_attempts = 1
    if idle.foreign_cores > QUIET_CORES:
        wait_quiet(pids(), patience)
        again, _ = measured(10)
        idle, idle_attempts = min(idle, again, key=lambda w: w.foreign_cores), 2
    wait_quiet(pids(), patience)  # before the wipe: the rebuild must not end meanwhile
    wipe_and_restart(wiped)
    wait(
        lambda: statuses(cluster),
        lambda s: landed(s, wiped.cluster_url) > 0,
        "rebuild started",
        deadline,
    )
    progress(f"foreground: {load:,.0f} req/s, rebuild running")
    busy, counts = measured(1)
    busy_attempts = 1

    def still_running(counts: list[int]) -> bool:
        return len(counts) >= 2 and counts[-1] > counts[-2]

    if busy.foreign_cores > QUIET_CORES and still_running(counts):
        again, again_counts = measured(11)
        busy_attempts = 2
        if again.foreign_cores < busy.foreign_cores and still_running(again_counts):
            busy, counts = again, again_counts
    copied_in_window = counts[-1] - counts[0] if counts else 0
    # The copy rate with no traffic: the rebuild goes on after the window.
    first = landed(statuses(cluster), wiped.cluster_url)
    time.sleep(QUIET_SAMPLE)
    quiet_rate = (landed(statuses(cluster), wiped.cluster_url) - first) / QUIET_SAMPLE
    return ForegroundFigure(
        generator,
        highest,
        how,
        idle,
        busy,
        copied_in_window,
        window,
        still_running(counts),
        rate,
        quiet_rate,
        keys,
        (idle_attempts, busy_attempts),
    )
