"""The nemesis's full disk (SPEC.md section 21) on dht's own nodes: the power-loss
filesystem under each node is a volume of fixed size, the fault fills it to the last
byte and frees it, and the node refuses writes meanwhile (dht's reserve, rule 20.1)
and takes them again after. Real processes, only the disk hook (no namespaces or fake
clock: quick to start); skipped with the reason where the filesystem cannot be mounted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dht.conformance.nemesis import drive
from dht.conformance.nemesis_cluster import NemesisCluster
from dht.conformance.nemesis_schedule import KINDS, Fault, Schedule
from dht.history.run_folder import RUNS_ENV
from dht.testbed.power_loss import power_loss_unavailable

FULL = Fault(2.0, 3.0, "disk", 0)


def test_a_full_disk_in_the_nemesis_fills_the_nodes_volume_and_the_node_takes_writes_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = power_loss_unavailable()
    if reason is not None:
        pytest.skip(f"a full disk needs the lazy filesystem: {reason}")
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    left_out = {kind: "the disk only, here" for kind in KINDS if kind != "disk"}
    schedule = Schedule(11, 7.0, ("disk",), (FULL,), left_out)
    with NemesisCluster(tmp_path / "run", left_out) as nemesis:
        run = drive(nemesis, schedule, "nemesis")
        disk = nemesis.nodes[0].status()["disk"]
        volume = nemesis.mounts[0]
        assert volume.capacity and volume.free_bytes() > volume.capacity // 2  # freed
    assert not run.failure, run.failure
    assert disk["writes_refused"] > 0, disk  # its replica writes, while the disk was full
    assert not disk["refusing_writes"], disk
    faults = [json.loads(line) for line in (run.run_dir / "faults.jsonl").read_text().splitlines()]
    assert [fault["fault"] for fault in faults] == ["disk full on node1"]
    history = [
        json.loads(line) for line in (run.run_dir / "history.jsonl").read_text().splitlines()
    ]
    # The heal's PUTs (a client's GET may read one back, with the same value).
    resumed = [
        op for op in history if op["op"] == "PUT" and str(op["value"]).startswith("resumed-")
    ]
    assert resumed and resumed[-1]["status"] == 201 and resumed[-1]["node"] == "node1", resumed
