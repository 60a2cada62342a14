"""A node the nemesis cannot make whole again fails the run (SPEC.md section 21): a node
that does not restart on its data after kill -9 is the implementation's failure, said
as such, and a shrink keeps the fault that needed the restart rather than taking its
try for a pass. Real processes: tests/conformance/once_node.py, which starts only once,
with only signal faults (no namespaces, fake clock or mounts: quick to start)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from dht.conformance import nemesis
from dht.conformance.nemesis_schedule import KINDS, Fault, Schedule
from dht.history.run_folder import RUNS_ENV

ONCE_NODE = Path(__file__).resolve().parent / "once_node.py"
ONCE_COMMAND = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(ONCE_NODE))} --port {{port}} "
    "--data-dir {data_dir} --cluster {cluster} --self {self}"
)
KILL = Fault(0.5, 0.5, "kill", 1)
PAUSE = Fault(1.5, 0.5, "pause", 0)


@pytest.fixture(autouse=True)
def once_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DHT_NODE_COMMAND", ONCE_COMMAND)
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))


def test_a_node_that_does_not_restart_on_its_data_fails_the_run_and_its_shrink_keeps_the_kill(
    tmp_path: Path,
) -> None:
    left_out = {kind: "signals only, here" for kind in KINDS if kind not in ("kill", "pause")}
    schedule = Schedule(7, 4.0, ("kill", "pause"), (KILL, PAUSE), left_out)
    first = nemesis.run_schedule(schedule, tmp_path / "run", "nemesis")
    assert first.problems[0].startswith(
        "node2 after kill -9 node2, restart, it did not restart on its data: node "
    ), first.problems
    assert "exited with code 1" in first.problems[0]
    assert first.problems[0].endswith("; the schedule stopped there")
    # Nothing else went wrong: the other two nodes answered, and the history holds.
    assert [problem for problem in first.problems[1:] if problem] == [], first.problems
    shrunk = nemesis.shrink_run(first, tmp_path / "s", minutes=5.0)
    assert shrunk.smallest.schedule.faults == (KILL,), shrunk.summary()
    assert shrunk.minimal and shrunk.unresolved == 0, shrunk.summary()
    assert "did not restart on its data" in shrunk.smallest.failure
