"""The constant-rate benchmark (bench/constant_rate.py): against a real node it holds its
rate and prints wrk2's table; against a stalling server it measures from each request's
intended send time; against a silent one it stops within its time bound."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from bench.constant_rate import run
from bench.measurement import PERCENTILES
from bench.workload import Workload
from dht.conformance.http_client import free_port
from dht.conformance.launcher import Node

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "constant_rate.py"
RATE, SECONDS = 200, 2
Handler = Callable[[web.Request], Awaitable[web.Response]]


def benchmark(node: Node, workload: str, *extra: str, cwd: Path) -> str:
    command = [
        sys.executable, str(SCRIPT), "--url", node.url, "--rate", str(RATE),
        "--duration", str(SECONDS), "--connections", "8", "--workload", workload, *extra,
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.alone  # it must hold 200 requests a second on a machine to itself
@pytest.mark.parametrize(
    ("workload", "statuses"),
    [("put", {201}), ("get", {200}), ("mixed", {200, 201})],
)
def test_benchmark_holds_its_rate_against_a_node_and_prints_the_table(
    node: Node, workload: str, statuses: set[int], tmp_path: Path
) -> None:
    output = benchmark(node, workload, "--keys", "300", "--replicas", "1/1", cwd=tmp_path)
    rows = re.findall(r"^\s*([\d.]+)%\s+[\d.]+(?:us|ms|s)$", output, re.MULTILINE)
    assert [float(percentile) for percentile in rows] == list(PERCENTILES), output
    summary = re.search(r"(\d+) requests in [\d.]+s: target 200/s, achieved ([\d.,]+)/s", output)
    assert summary is not None, output
    assert int(summary.group(1)) == RATE * SECONDS
    assert 0.95 * RATE <= float(summary.group(2).replace(",", "")) <= RATE * 1.01
    answers = re.search(r"answers by status: (.*)$", output, re.MULTILINE)
    assert answers is not None
    counts = dict(part.split(": ") for part in answers.group(1).split(", "))
    assert {int(code) for code in counts} == statuses, output
    assert sum(map(int, counts.values())) == RATE * SECONDS
    assert "errors by status: none" in output
    assert "time-outs: 0, connection errors: 0, not sent (time bound): 0" in output


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """serve(handler) -> the URL of a server on loopback that answers every request with
    `handler`; stopped at teardown."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_stall_counts_for_every_request_due_during_it_not_only_the_one_sent(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    stalled = False

    async def first_answer_stalls(request: web.Request) -> web.Response:
        nonlocal stalled
        if not stalled:
            stalled = True
            await asyncio.sleep(0.3)
        return web.Response(status=201)

    url = await serve(first_answer_stalls)
    result = await run(url, rate=50, duration=1.0, workload=Workload("put"), connections=1)
    assert result.statuses == {201: 50}
    # The 12 requests due in the first 250 ms all waited 50 ms or more behind the stall
    # (a closed-model tool would show one slow request of 50).
    assert result.percentile_ms(75) >= 50
    assert result.percentile_ms(100) >= 290
    assert result.percentile_ms(50) < 50


async def test_a_silent_server_times_out_and_the_run_stops_at_its_time_bound(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    release = asyncio.Event()

    async def never_answers(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=201)

    url = await serve(never_answers)
    try:
        result = await run(
            url, rate=20, duration=0.5, workload=Workload("put"), connections=2,
            request_timeout=0.3,
        )  # fmt: skip
    finally:
        release.set()
    assert result.answered == 0
    assert result.timeouts + result.unsent == 10
    assert result.unsent > 0
    assert result.elapsed < 0.5 + 2 * 0.3 + 0.2


async def test_a_refused_connection_is_counted_not_raised() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = await run(url, rate=100, duration=0.2, workload=Workload("status"), connections=4)
    assert result.connection_errors == 20
    assert result.errors == 20
