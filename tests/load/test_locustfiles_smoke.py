"""Every Locust profile runs headless for a few seconds against a real node, sends
requests, and sees no failure (the load itself is measured outside the test suite)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launcher import Node

LOCUSTFILES = sorted(
    path
    for path in (Path(__file__).resolve().parents[2] / "locustfiles").glob("*.py")
    if path.stem not in ("__init__", "common", "prefill")
)


def test_every_profile_is_smoke_tested() -> None:
    assert {path.stem for path in LOCUSTFILES} == {
        "put_unique",
        "put_overwrite",
        "get_uniform",
        "get_recent",
        "mixed",
        "range_scan",
        "status_under_load",
    }


@pytest.mark.parametrize("locustfile", LOCUSTFILES, ids=[path.stem for path in LOCUSTFILES])
def test_profile_runs_headless_without_failures(
    node: Node, locustfile: Path, tmp_path: Path
) -> None:
    stats = tmp_path / "run"
    command = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "--users", "4", "--spawn-rate", "4", "--run-time", "3s", "--host", node.url,
        "--keys", "1200", "--replicas", "1/1", "--only-summary", "--csv", str(stats),
        "--exit-code-on-error", "1",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    with open(f"{stats}_stats.csv", newline="") as table:
        total = next(row for row in csv.DictReader(table) if row["Name"] == "Aggregated")
    assert int(total["Request Count"]) > 0
    assert int(total["Failure Count"]) == 0
