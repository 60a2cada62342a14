"""The kit's verdicts on a store whose truth is known: etcd (Debian's etcd-server 3.4).
Its default reads are linearizable and its acknowledged writes survive kill -9, so its
history under the nemesis must pass both checkers; its serializable reads are
documented as possibly stale, so the linearizability checker must find them out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.adapters.__main__ import main
from dht.conformance.adapters.etcd import EtcdCluster, etcd_binary
from dht.conformance.adapters.run import run_store
from dht.history.linearizability import Verdict

pytestmark = pytest.mark.skipif(
    etcd_binary() is None, reason="etcd not found: `make test` installs etcd-server (as root)"
)
SECONDS = 8.0


def test_etcd_under_kills_and_pauses_is_linearizable_and_loses_nothing(tmp_path: Path) -> None:
    run = run_store(EtcdCluster(tmp_path), SECONDS, seed=1)
    assert run.ok, run.summary() + "\n" + run.details()
    assert run.report is not None and run.report.acked > 100, run.summary()
    assert any("kill -9" in fault for fault in run.faults), run.faults
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.LINEARIZABLE, run.summary()


def test_etcds_serializable_reads_are_found_not_linearizable(tmp_path: Path) -> None:
    run = run_store(EtcdCluster(tmp_path, serializable=True), SECONDS, seed=1)
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.NOT_LINEARIZABLE, run.summary()
    shown = run.linearizability.details()
    assert "cannot be placed" in shown, shown


def test_the_command_refuses_a_run_of_no_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["etcd", "--seconds", "0"])
    assert exited.value.code == 2
    assert "--seconds must be more than 0" in capsys.readouterr().err
