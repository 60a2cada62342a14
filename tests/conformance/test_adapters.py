"""The kit's verdicts on stores whose truth is known. etcd (Debian's etcd-server 3.4):
its default reads are linearizable and its acknowledged writes survive kill -9, so its
history under the nemesis must pass both checkers; its serializable reads are
documented as possibly stale, so the linearizability checker must find them out.
Redis (Debian's redis-server 7.0) with asynchronous replicas and Sentinel's failover is
documented to lose acknowledged writes, so the kit must find some lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.adapters.__main__ import main
from dht.conformance.adapters.course_api import CourseApiCluster
from dht.conformance.adapters.etcd import EtcdCluster
from dht.conformance.adapters.redis import RedisCluster
from dht.conformance.adapters.run import load_adapter, run_store
from dht.history.linearizability import Verdict
from tests.conformance.adapter_stores import EXAMPLE, needs_etcd, needs_redis

SECONDS = 10.0
# The faults of these runs; partitions have tests of their own (test_adapter_partitions.py).
KILLS_AND_PAUSES = ("kill", "pause")


@needs_etcd
def test_etcd_under_kills_and_pauses_is_linearizable_and_loses_nothing(tmp_path: Path) -> None:
    run = run_store(EtcdCluster(tmp_path), SECONDS, seed=1, faults=KILLS_AND_PAUSES)
    assert run.ok, run.summary() + "\n" + run.details()
    assert run.report is not None and run.report.acked > 100, run.summary()
    assert any("kill -9" in fault for fault in run.faults), run.faults
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.LINEARIZABLE, run.summary()


@needs_etcd
def test_etcds_serializable_reads_are_found_not_linearizable(tmp_path: Path) -> None:
    run = run_store(EtcdCluster(tmp_path, serializable=True), SECONDS, 1, faults=KILLS_AND_PAUSES)
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.NOT_LINEARIZABLE, run.summary()
    shown = run.linearizability.details()
    assert "cannot be placed" in shown, shown


def test_the_command_refuses_a_run_of_no_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["etcd", "--seconds", "0"])
    assert exited.value.code == 2
    assert "--seconds must be more than 0" in capsys.readouterr().err


@needs_redis
def test_redis_failing_over_under_faults_at_its_primary_loses_acknowledged_writes(
    tmp_path: Path,
) -> None:
    """Every fault at the primary (a pause longer than Sentinel's 0.5 s, or a kill): the
    sentinels promote a replica, and writes the old primary acknowledged are not on it.
    In 10 s, 4 of seeds 1..5 found such writes here; the search stops at the first of
    three seeds that does, as the simulator's defect tests search their seeds."""
    summaries = []
    for seed in (1, 2, 4):
        cluster = RedisCluster(tmp_path / f"seed-{seed}")
        run = run_store(cluster, SECONDS, seed, at_leader=True, faults=KILLS_AND_PAUSES)
        summaries.append(run.summary())
        if not run.ok:
            break
    assert not run.ok, "\n".join(summaries)
    assert run.report is not None
    missed = [*run.report.stale_reads, *run.report.resurrected]
    assert missed, run.summary() + "\n" + run.details()
    assert "acknowledged" in str(missed[0]), missed[0]


def test_a_users_adapter_file_is_graded_like_the_kits_own(tmp_path: Path) -> None:
    """The documented example: replicas written under one lock, read under it too, are
    linearizable; the same with members that apply writes 20 ms late are not."""
    locked = run_store(load_adapter(f"{EXAMPLE}:Locked", tmp_path / "locked"), 3.0, seed=1)
    assert locked.ok, locked.summary() + "\n" + locked.details()
    lagging = run_store(load_adapter(f"{EXAMPLE}:Lagging", tmp_path / "lagging"), 3.0, seed=1)
    assert lagging.linearizability is not None
    assert lagging.linearizability.verdict is Verdict.NOT_LINEARIZABLE, lagging.summary()
    assert not lagging.ok


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no-colon.py", "wants FILE.py:CLASS"),
        ("/nowhere/adapter.py:Store", "no Python file at /nowhere/adapter.py"),
        (f"{EXAMPLE}:Missing", "defines no Missing"),
    ],
)
def test_a_wrong_adapter_is_refused_with_the_reason(
    spec: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--adapter", spec, "--folder", str(tmp_path), "--seconds", "1"]) == 2
    assert says in capsys.readouterr().err


def test_dhts_own_nodes_through_the_course_api_adapter_keep_every_acknowledged_write(
    tmp_path: Path,
) -> None:
    """The same run on three nodes of the course API (dht's, unless DHT_NODE_COMMAND
    names another): the history checker decides, as the course promises no more."""
    run = run_store(CourseApiCluster(tmp_path), 6.0, seed=1)
    assert run.report is not None and run.report.acked > 50, run.summary()
    assert run.ok, run.summary() + "\n" + run.details()
