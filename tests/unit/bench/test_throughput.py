"""bench.throughput's report: the median round, the paired ratio, the table, the target
verdicts and the generator-ceiling lines; and the check that a process is pinned."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from bench.pinning import check_pinned, pin
from bench.process_cpu import ThreadCpu, cpu_seconds, thread_cpu
from bench.throughput_report import (
    BARE,
    NO_LEAN,
    NO_SYNC,
    ONE_NODE,
    RAW,
    SYNC_EACH,
    THREE_1_1,
    THREE_2_3,
    Row,
    ceiling,
    cpu_added,
    durability_costs,
    lean_gains,
    table,
    verdicts,
)
from bench.wrk import WrkRun


def run(rate: float, cpu: float = 0.3, errors: int = 0, p99_ms: float = 9.0) -> WrkRun:
    return WrkRun(int(rate * 8), 8.0, rate, 2.0, p99_ms, non_2xx=errors, cpu_share=cpu)


def row(
    pinning: str, name: str, workload: str, *rates: float, cpu: float = 0.3, errors: int = 0
) -> Row:
    """A row whose rounds ran at `rates`, paired with a bare server at 10,000 req/s."""
    runs = [run(rate, cpu, errors) for rate in rates]
    return Row(pinning, name, workload, runs, [rate / 10_000 for rate in rates])


def test_the_median_round_is_a_real_round_and_the_ratio_the_median_of_pairs() -> None:
    measured = row("pinned", ONE_NODE, "PUT", 9000, 5000, 9500)
    assert measured.median.rate == 9000
    assert measured.ratio == 0.9
    assert row("pinned", ONE_NODE, "PUT", 9000, 5000).median.rate == 5000  # lower middle


def rows(one_node: float, three: float, cpu: float = 0.3, errors: int = 0) -> list[Row]:
    """Rows for both pinnings; `cpu` and `errors` apply to the pinned bare rows."""
    return [
        row("pinned", BARE, workload, 10_000, 10_000, 10_000, cpu=cpu, errors=errors)
        for workload in ("PUT", "GET")
    ] + [
        row("pinned", ONE_NODE, "PUT", one_node, one_node, one_node),
        row("pinned", ONE_NODE, "GET", 9500, 9500, 9500),
        row("unpinned", BARE, "PUT", 10_000, 10_000, 10_000),
        row("unpinned", THREE_1_1, "PUT", 6000, 6000, 6000),
        row("unpinned", THREE_2_3, "PUT", three, three, three),
    ]


def with_cpu(measured: list[Row], bare_us: float, node_us: float) -> list[Row]:
    """`measured`, its pinned bare rows at `bare_us` and 1-node rows at `node_us` of CPU
    per request."""
    for r in measured:
        if r.pinning == "pinned":
            r.cpu_us = [bare_us if r.name == BARE else node_us] * len(r.runs)
    return measured


def test_each_target_gets_a_met_or_missed_line() -> None:
    assert verdicts(with_cpu(rows(one_node=9000, three=3000), 30, 40)) == [
        "target PUT 1 node adds <= 24 µs of CPU over bare (pinned): 10 µs met",
        "target GET 1 node adds <= 10 µs of CPU over bare (pinned): 10 µs met",
        "target PUT 3 nodes, 2/3 (default) >= 0.40 x bare (unpinned): 0.30 missed",
    ]
    lines = verdicts(with_cpu(rows(one_node=8900, three=4000), 30, 55))
    assert lines[0].endswith("25 µs missed") and lines[1].endswith("25 µs missed")
    assert lines[2].endswith("0.40 met")


def test_the_lean_path_line_compares_a_row_with_its_no_lean_twin() -> None:
    lean = row("pinned", ONE_NODE, "PUT", 8000, 8000, 8000)
    lean.cpu_us = [45.0] * 3
    twin = row("pinned", ONE_NODE + NO_LEAN, "PUT", 4000, 4000, 4000)
    twin.cpu_us = [90.0] * 3
    assert lean_gains([lean, twin]) == [
        "lean HTTP pinned 1 node PUT: 45 µs of CPU per request against 90 with "
        "`--no-lean-http` (50% less); 0.80 against 0.40 x bare"
    ]
    assert lean_gains([lean]) == []


def test_a_verdict_on_a_generator_bound_or_failing_run_says_it_does_not_count() -> None:
    lines = verdicts(with_cpu(rows(one_node=9000, three=3000, cpu=0.97, errors=3), 30, 40))
    assert lines[:3] == [
        "target PUT 1 node adds <= 24 µs of CPU over bare (pinned): 10 µs met",
        "  does not count: wrk used >= 90% of its core on bare aiohttp",
        "  does not count: 9 errors on bare aiohttp",
    ]


def test_the_ceiling_compares_the_bare_rate_with_the_fastest_dht_row() -> None:
    lines = ceiling(rows(one_node=9000, three=3000))
    assert lines[0] == (
        "pinned PUT: wrk reached 10,000 req/s on the bare server using 30% of its core "
        "(~33,333 req/s at a full core), 1.1x the fastest dht row (1 node, 9,000 req/s)"
    )
    assert lines[2].startswith("unpinned PUT:") and "(3 nodes, 1/1, 6,000 req/s)" in lines[2]
    assert lines[-1].endswith("in some round): none")
    bound = ceiling(rows(one_node=9000, three=3000, cpu=0.95))
    assert bound[-1].endswith("pinned bare aiohttp PUT, pinned bare aiohttp GET")


def test_the_table_has_one_line_per_row_with_its_median_round() -> None:
    lines = table(rows(one_node=9000, three=3000)).splitlines()
    assert len(lines) == 2 + 7
    assert lines[4] == (
        "| pinned | 1 node | PUT | 9,000 | 2.00 ms | 9.00 ms | 0.90 | - | 0 | 0 | 30% |"
    )


def test_a_process_free_on_other_cores_is_not_pinned() -> None:
    elsewhere = max(os.sched_getaffinity(0)) + 1  # a core this process never runs on alone
    with pytest.raises(RuntimeError, match="not pinned"):
        check_pinned(os.getpid(), elsewhere)


def test_pin_pins_every_thread_of_a_running_process() -> None:
    core = min(os.sched_getaffinity(0))
    child = subprocess.Popen(["sleep", "30"])
    try:
        pin(child.pid, core)
        check_pinned(child.pid, core)
        assert os.sched_getaffinity(child.pid) == {core}
    finally:
        child.kill()
        child.wait()


def test_cpu_added_is_the_median_server_cpu_per_request_over_the_bare_servers() -> None:
    bare = row("pinned", BARE, "PUT", 10_000, 10_000, 10_000)
    bare.cpu_us = [25.0, 27.0, 26.0]
    node = row("pinned", ONE_NODE, "PUT", 5000, 5000, 5000)
    node.cpu_us = [70.0, 90.0, 74.0]
    assert cpu_added([bare, node]) == [
        "1 node (pinned) adds 48 µs of CPU per PUT (74 against 26 µs for bare aiohttp)"
    ]
    assert cpu_added([node]) == []  # no bare server beside it: nothing to subtract


def test_cpu_seconds_reads_every_thread_of_a_process_from_proc() -> None:
    pid = os.getpid()
    before = cpu_seconds((pid,))
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of CPU in this process
        pass
    used = cpu_seconds((pid,)) - before
    assert used >= 0.15, used  # ticks of 10 ms: a little below what process_time saw
    assert cpu_seconds((pid, pid)) >= 2 * cpu_seconds((pid,)) - 0.02


def burn(seconds: float) -> None:
    """`seconds` of CPU in the calling thread."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def test_thread_cpu_counts_the_main_thread_as_the_loop_and_the_rest_as_other_threads() -> None:
    pid = os.getpid()
    before = thread_cpu((pid,))
    burn(0.2)
    in_main = thread_cpu((pid,)).since(before)
    assert in_main.loop_user + in_main.loop_system >= 0.15, in_main
    assert in_main.other_user + in_main.other_system < 0.1, in_main
    burnt, done = threading.Event(), threading.Event()

    def work() -> None:
        burn(0.2)
        burnt.set()
        done.wait()  # read while it lives: an exited thread is no longer listed

    before = thread_cpu((pid,))
    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert burnt.wait(10)
        in_worker = thread_cpu((pid,)).since(before)
    finally:
        done.set()
        worker.join()
    assert in_worker.other_user + in_worker.other_system >= 0.15, in_worker
    assert in_worker.loop_user + in_worker.loop_system < 0.1, in_worker


def test_thread_cpu_per_request_is_in_microseconds_and_describes_both_halves() -> None:
    split = ThreadCpu(0.92, 0.21, 0.06, 0.10).per_request(10_000)
    assert split.total == pytest.approx(129.0)
    assert split.describe() == (
        "event loop 113 µs (92 user, 21 kernel), other threads 16 µs (6 user, 10 kernel)"
    )
    assert ThreadCpu(1.0).per_request(0).total == 0.0


def test_the_group_commit_is_judged_against_its_unsynced_twin() -> None:
    """Issue 40's goals: at most 10% of the unsynced rate and 2 ms of p99."""

    def timed(name: str, rate: float, p99_ms: float) -> Row:
        return Row("pinned", ONE_NODE + name, "PUT", [run(rate, p99_ms=p99_ms)], [rate / 10_000])

    close = [timed("", 9_500, 10.0), timed(NO_SYNC, 10_000, 9.0), timed(SYNC_EACH, 2_000, 40.0)]
    lines = durability_costs(close)
    assert lines[0].endswith("met") and "costs 5.0%" in lines[0] and "+1.00 ms" in lines[0]
    assert lines[1].startswith("sync per write pinned 1 node PUT: 0.20 x bare")
    slow_tail = [timed("", 9_500, 12.0), timed(NO_SYNC, 10_000, 9.0)]
    assert durability_costs(slow_tail)[0].endswith("missed")


def test_a_raw_server_measured_beside_gives_each_row_its_share_and_is_no_dht_row() -> None:
    raw = row("pinned", RAW, "PUT", 40_000, 40_000, 40_000, cpu=0.8)
    measured = [*rows(one_node=9000, three=3000), raw]
    node = next(
        r for r in measured if (r.pinning, r.name, r.workload) == ("pinned", ONE_NODE, "PUT")
    )
    node.raw_ratios = [9000 / 40_000] * 3
    assert "| 0.90 | 0.23 |" in table(measured).splitlines()[4]
    pinned_put = ceiling(measured)[0]
    assert "the fastest dht row (1 node, 9,000 req/s)" in pinned_put
    assert pinned_put.endswith("on the raw uvloop server 40,000 req/s using 80%, 4.4x")
    assert not any(line.startswith(RAW) for line in cpu_added(measured))
