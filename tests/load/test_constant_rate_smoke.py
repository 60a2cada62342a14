"""The constant-rate benchmark runs against a real node, holds its rate and prints the
wrk2-style table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.launcher import Node

REPO = Path(__file__).resolve().parents[2]


def test_constant_rate_benchmark_holds_its_rate_and_prints_percentiles(node: Node) -> None:
    command = [
        sys.executable, "-m", "bench.constant_rate", "--url", node.url, "--rate", "200",
        "--duration", "2", "--workload", "put", "--connections", "8",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    for percentile in ("50.000%", "75.000%", "90.000%", "99.000%", "99.900%", "99.990%"):
        assert re.search(rf"^\s*{re.escape(percentile)}\s+[\d.]+m?s$", run.stdout, re.M)
    assert "100.000%" in run.stdout
    sent = re.search(r"(\d+) requests in ([\d.]+)s: target 200/s, achieved ([\d,]+)/s", run.stdout)
    assert sent is not None, run.stdout
    assert int(sent.group(1)) == 400
    assert 180 <= int(sent.group(3).replace(",", "")) <= 210
    assert "201: 400" in run.stdout
    assert "time-outs: 0" in run.stdout
