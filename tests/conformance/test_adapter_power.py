"""The adapters' power cuts (dht/conformance/adapters/power.py): every process of one
member killed with SIGKILL at once, what its data folder (a mount of the lazy
filesystem) had not fsynced dropped, then the member restarted on what is left; every
mount taken away when the store stops. etcd, which fsyncs its WAL before it answers,
must lose nothing and stay linearizable; Redis cut at its primary must run to a verdict
with its members back, whatever the verdict. With the default faults, and with clock
faults added, a seed must draw the schedule it drew before power cuts.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from dht.conformance.adapters.etcd import EtcdCluster
from dht.conformance.adapters.redis import RedisCluster
from dht.conformance.adapters.run import DEFAULT_FAULTS, load_adapter, run_store
from dht.history.linearizability import Verdict
from dht.testbed.page_cache import Unsynced
from dht.testbed.power_loss import mounted, power_loss_unavailable
from tests.conformance.adapter_stores import EXAMPLE, needs_etcd, needs_redis
from tests.conformance.test_adapter_clock import SEED_1_DEFAULT_SCHEDULE, Struck, schedule

WHY_NOT = power_loss_unavailable()
needs_power = pytest.mark.skipif(WHY_NOT is not None, reason=f"no power cuts: {WHY_NOT}")
SECONDS = 10.0
BACK_DEADLINE = 20.0  # for every member to answer again once the faults are over
# What seed 1 drew in 30 s with kill, pause, partition and clock before power cuts
# existed (the code of f0ec846, its clock a fake one).
SEED_1_SCHEDULE_WITH_CLOCK = [
    "0.7 s: pause m0 for 1.5 s",
    "3.4 s: kill -9 m2, restarted 1.8 s later",
    "6.4 s: clock of m1 -120 s for 3.3 s",
    "11.2 s: kill -9 m1, restarted 2.4 s later",
    "15.6 s: kill -9 m1, restarted 1.1 s later",
    "18.0 s: clock of m1 +120 s for 4.1 s",
    "22.6 s: clock of m0 +30 s for 4.3 s",
    "27.7 s: clock of m0 -5 s for 4.0 s",
]
# A fault line of a power cut, as the nemesis writes it.
POWER_CUT = re.compile(r"power cut m(\d)\b.* \((\d+) unsynced bytes in (\d+) files dropped\)")


class Powered(Struck):
    """A store that records what the nemesis does to it, power cuts included."""

    def prepare_power(self) -> str | None:
        return None

    def power_cut(self, index: int) -> Unsynced:
        self.calls.append(("power_cut", index, None))
        return Unsynced(1, 4096)


@pytest.mark.parametrize(
    ("kinds", "drawn"),
    [
        (list(DEFAULT_FAULTS), SEED_1_DEFAULT_SCHEDULE),
        (["kill", "pause", "partition", "clock"], SEED_1_SCHEDULE_WITH_CLOCK),
    ],
    ids=["default", "with-clock"],
)
def test_without_power_a_seed_draws_the_schedule_it_drew_before_power_cuts(
    monkeypatch: pytest.MonkeyPatch, kinds: list[str], drawn: list[str]
) -> None:
    assert "power" not in DEFAULT_FAULTS
    faults, _ = schedule(monkeypatch, kinds, Powered())
    assert faults == drawn


def test_a_power_cut_is_followed_by_the_members_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    faults, store = schedule(monkeypatch, ["power"], Powered())
    assert faults and all(POWER_CUT.search(fault) for fault in faults), faults
    assert all("(4096 unsynced bytes in 1 files dropped)" in fault for fault in faults), faults
    calls = store.calls
    assert len(calls) == 2 * len(faults), calls
    for (cut, index, _), (restart, again, _) in zip(calls[::2], calls[1::2], strict=True):
        assert (cut, restart, again) == ("power_cut", "kill", index), calls  # Struck's restart


def test_an_adapter_without_power_cuts_is_struck_by_the_other_faults_and_says_so(
    tmp_path: Path,
) -> None:
    store = load_adapter(f"{EXAMPLE}:Locked", tmp_path)
    run = run_store(store, 2.0, seed=1, faults=("kill", "power"))
    assert run.not_drawn == ["power: example-locked's adapter has no power_cut(i)"]
    assert run.faults and all("kill -9" in fault for fault in run.faults), run.faults
    assert run.ok, run.summary() + "\n" + run.details()


class WatchedEtcd(EtcdCluster):
    """etcd whose members, asked when the run stops it, must all answer again."""

    back = 0

    def stop(self) -> None:
        try:
            deadline = time.monotonic() + BACK_DEADLINE
            for member in self.members:
                member.wait_healthy(deadline)
                self.back += 1
        finally:
            super().stop()


class WatchedRedis(RedisCluster):
    """Redis whose servers and sentinels, asked when the run stops it, must all answer
    again."""

    back = 0

    def stop(self) -> None:
        try:
            deadline = time.monotonic() + BACK_DEADLINE
            for port in [*self.ports, *self.sentinel_ports]:
                self._wait_answering(port, deadline)
                self.back += 1
        finally:
            super().stop()


def cuts(faults: list[str]) -> list[tuple[int, int, int]]:
    """(member, bytes, files) of each power cut among `faults`."""
    found = [POWER_CUT.search(fault) for fault in faults]
    return [(int(m[1]), int(m[2]), int(m[3])) for m in found if m is not None]


def assert_unmounted(folders: list[Path]) -> None:
    left = [folder for folder in folders if mounted(folder)]
    assert not left, f"still mounted after the run: {left}"


@needs_etcd
@needs_power
def test_etcd_under_power_cuts_is_linearizable_and_loses_nothing(tmp_path: Path) -> None:
    """etcd fsyncs its WAL before it answers a write, so a cut drops no byte it wrote
    of its data: what each cut drops is the next WAL segment etcd preallocates
    (member/wal/0.tmp, 64 MB) and does not sync, a size without data. So the cuts are
    seen by the file they drop, not by bytes."""
    store = WatchedEtcd(tmp_path)
    run = run_store(store, SECONDS, seed=1, faults=("power",))
    assert store.back == 3, "every member answers again after the last cut"
    assert run.not_drawn == [] and run.faults, run.summary()
    made = cuts(run.faults)
    assert len(made) == len(run.faults), run.faults
    assert any(files > 0 for _, _, files in made), run.faults
    assert run.ok, run.summary() + "\n" + run.details()
    assert run.report is not None and run.report.acked > 100, run.summary()
    assert not run.report.lost and not run.report.resurrected, run.summary()
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.LINEARIZABLE, run.summary()
    assert_unmounted([member.folder for member in store.members])


@needs_redis
@needs_power
def test_redis_under_power_cuts_at_its_primary_runs_to_a_verdict_its_members_back(
    tmp_path: Path,
) -> None:
    """Redis fsyncs its append-only file once a second (`appendfsync everysec`), so a
    cut of the primary under load drops the bytes it wrote since; each cut member's
    server and sentinel start again (their logs say so once per start), and all answer
    once the faults are over."""
    store = WatchedRedis(tmp_path)
    run = run_store(store, SECONDS, seed=1, at_leader=True, faults=("power",))
    assert store.back == 6, "every server and sentinel answers again after the last cut"
    assert run.not_drawn == [] and run.faults, run.summary()
    made = cuts(run.faults)
    assert len(made) == len(run.faults), run.faults
    assert all("(the leader)" in fault for fault in run.faults), run.faults
    assert any(dropped > 0 for _, dropped, _ in made), run.faults
    assert run.report is not None and run.report.acked > 100, run.summary()
    assert run.linearizability is not None, run.summary()
    for index in range(3):
        cut = sum(1 for member, _, _ in made if member == index)
        server = (tmp_path / f"m{index}.log").read_text()
        sentinel = (tmp_path / f"sentinel{index}.log").read_text()
        assert server.count("Redis is starting") == 1 + cut, (index, run.faults)
        assert sentinel.count("+monitor master") == 1 + cut, (index, run.faults)
    assert_unmounted([tmp_path / member for member in store.members])
