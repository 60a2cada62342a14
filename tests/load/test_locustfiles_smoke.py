"""Every Locust profile runs headless for a few seconds against a real node, sends each of
its kinds of request, and sees no failure (figures come from bench/, not from CI)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from dht.conformance.launcher import Node

LOCUSTFILES = Path(__file__).resolve().parents[2] / "locustfiles"
# The request names each profile reports, by profile.
REQUESTS = {
    "put_unique": {"PUT new key"},
    "put_overwrite": {"PUT overwrite", "PUT new key"},
    "get_uniform": {"GET uniform"},
    "get_recent": {"GET recent"},
    "mixed": {"GET", "PUT"},
    "range_scan": {"range of 1000"},
    "status_under_load": {"GET (heavy load)", "status (light)"},
}
SHARED_MODULES = {"__init__", "common", "prefill"}


def test_every_profile_is_smoke_tested() -> None:
    profiles = {path.stem for path in LOCUSTFILES.glob("*.py")} - SHARED_MODULES
    assert profiles == set(REQUESTS)


@pytest.mark.parametrize("profile", sorted(REQUESTS))
def test_profile_runs_headless_and_sends_its_requests_without_failures(
    node: Node, profile: str, tmp_path: Path
) -> None:
    stats = tmp_path / "run"
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / f"{profile}.py"), "--headless",
        "--users", "4", "--spawn-rate", "4", "--run-time", "3s", "--host", node.url,
        "--keys", "1200", "--replicas", "1/1", "--only-summary", "--csv", str(stats),
        "--exit-code-on-error", "1",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    with open(f"{stats}_stats.csv", newline="") as table:
        rows = {row["Name"]: row for row in csv.DictReader(table)}
    total = rows.pop("Aggregated")
    assert set(rows) == REQUESTS[profile]
    assert all(int(row["Request Count"]) > 0 for row in rows.values()), rows
    assert int(total["Failure Count"]) == 0, run.stderr[-2000:]
