"""bench.profile_parts --run: one node under wrk, sampled by py-spy, its CPU by part.
`make test` installs wrk; py-spy comes with the bench extra (requirements.lock)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.profile_parts import PARTS


@pytest.mark.alone  # wrk at full speed takes both cores from whatever runs beside it
def test_a_profiled_put_load_gives_every_part_its_share_of_the_nodes_cpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.profile_parts", "--run", "PUT", "--seconds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PUT on one pinned node: "), lines[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[3:-1]}
    assert set(rows) == {part for part, _ in PARTS}
    total = lines[-1].split(" | ")
    assert int(total[1].replace(",", "")) > 100, lines[-1]  # samples
    assert float(total[3].rstrip(" |")) > 0  # µs per request
    # A PUT is stored and answered: storage's and the HTTP edge's parts are never empty.
    for part in ("storage (loop side)", "HTTP edge (dht)"):
        assert rows[part].split(" | ")[1] != "0", rows[part]
