"""The adapters' clock faults (dht/conformance/adapters/clock.py): a member's wall clock
stepped ahead or behind, then set true again, through libfaketime preloaded into every
process of the member. Redis's steps are drawn only where its adapter's probe saw a
redis-server's clock stepped; where it did not (Debian 12's libfaketime hangs Debian's
redis-server at its start), the run must say so and strike with the other faults. etcd,
a Go program the fake clock cannot reach, must be struck by the other faults with the
reason said, or refused when clock is the only one asked. With the default faults a seed
must draw the schedule it drew before clock faults.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TypeVar

import pytest

from dht.conformance.adapters import run as adapter_run
from dht.conformance.adapters.__main__ import main
from dht.conformance.adapters.etcd import EtcdCluster
from dht.conformance.adapters.redis import RedisCluster
from dht.conformance.adapters.run import (
    CLOCK_OFFSETS,
    DEFAULT_FAULTS,
    load_adapter,
    run_store,
)
from dht.history.linearizability import Verdict
from dht.history.operation import Kind, Op
from dht.testbed import fake_clock
from tests.conformance.adapter_stores import EXAMPLE, needs_etcd, needs_redis

WHY_NOT = fake_clock.unavailable()
needs_fake_clock = pytest.mark.skipif(WHY_NOT is not None, reason=f"no fake clock: {WHY_NOT}")
# What seed 1 drew in 30 s with kill, pause and partition before clock faults existed
# (the code of 9b9048c, its clock a fake one as below).
SEED_1_DEFAULT_SCHEDULE = [
    "0.7 s: pause m0 for 1.5 s",
    "3.4 s: kill -9 m2, restarted 1.8 s later",
    "6.4 s: partition m1 from the others for 3.3 s",
    "10.2 s: partition m1 from the others for 2.8 s",
    "14.4 s: kill -9 m0, restarted 2.8 s later",
    "17.7 s: partition m2 from the others for 2.0 s",
    "21.3 s: pause m1 for 2.5 s",
    "25.4 s: pause m1 for 2.1 s",
    "29.0 s: partition m1 from the others for 4.9 s",
]


class FakeTime:
    """The nemesis's clock: a sleep moves it at once, so a schedule takes no time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Struck:
    """A store that only records what the nemesis does to it."""

    name = "struck"
    promise = "linearizable"

    def __init__(self) -> None:
        self.members = ["m0", "m1", "m2"]
        self.calls: list[tuple[str, int, float | None]] = []

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def leader(self) -> int | None:
        return None

    def kill(self, index: int) -> None:
        self.calls.append(("kill", index, None))

    restart = pause = resume = partition = heal = kill

    def prepare_partitions(self) -> str | None:
        return None

    def prepare_clocks(self) -> str | None:
        return None

    def clocks_unreached(self) -> str | None:
        return None

    def step_clock(self, index: int, seconds: float) -> None:
        self.calls.append(("step_clock", index, seconds))

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        raise NotImplementedError


# A fake store of this module or of another that extends it (test_adapter_power.py).
StruckStore = TypeVar("StruckStore", bound="Struck")


def schedule(
    monkeypatch: pytest.MonkeyPatch,
    kinds: list[str],
    store: StruckStore,
    seed: int = 1,
    seconds: float = 30.0,
) -> tuple[list[str], StruckStore]:
    """The faults the nemesis draws for `seed` in `seconds` of a fake clock, striking
    `store`, which records what it did."""
    clock = FakeTime()
    monkeypatch.setattr(adapter_run, "time", clock)
    faults: list[str] = []
    adapter_run._nemesis(store, random.Random(seed), clock.now + seconds, faults, False, kinds)
    return faults, store


def test_the_default_faults_draw_the_schedule_they_drew_before_clock_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert DEFAULT_FAULTS == ("kill", "pause", "partition")
    faults, _ = schedule(monkeypatch, list(DEFAULT_FAULTS), Struck())
    assert faults == SEED_1_DEFAULT_SCHEDULE


def test_a_clock_fault_steps_one_members_clock_by_a_drawn_offset_then_sets_it_true(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    faults, store = schedule(monkeypatch, ["clock"], Struck())
    assert faults and all(": clock of m" in fault for fault in faults), faults
    steps = store.calls
    assert len(steps) == 2 * len(faults), steps
    for (_, index, offset), (_, back_index, back) in zip(steps[::2], steps[1::2], strict=True):
        assert offset in CLOCK_OFFSETS and (back_index, back) == (index, 0.0), steps
    assert len({offset for _, _, offset in steps[::2]}) > 1, "the seed draws the offsets"


def test_an_adapter_without_clocks_is_struck_by_the_other_faults_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--adapter", f"{EXAMPLE}:Locked", "--folder", str(tmp_path), "--seconds", "2"]
    argv += ["--faults", "kill,clock"]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "not drawn: clock: example-locked's adapter has no step_clock(i, seconds)" in shown
    assert "--faults kill,clock" in shown, "the rerun line names the faults asked"


def test_clock_faults_alone_on_an_adapter_without_clocks_are_a_failed_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no fault the nemesis can draw: clock: "):
        run_store(load_adapter(f"{EXAMPLE}:Locked", tmp_path), 1.0, seed=1, faults=("clock",))


@needs_redis
@needs_fake_clock
def test_redis_steps_clocks_only_where_its_probe_saw_a_redis_clock_stepped(tmp_path: Path) -> None:
    """The Redis adapter's probe (a redis-server under libfaketime must answer TIME an
    hour ahead) decides whether a run steps clocks. Where it refuses (Debian 12's
    libfaketime hangs Debian's redis-server at its start), the run strikes with the
    other faults and says why; where it passes, nothing is left undrawn."""
    why = RedisCluster(tmp_path / "probe").prepare_clocks()
    cluster = RedisCluster(tmp_path / "run")
    run = run_store(cluster, 6.0, seed=1, at_leader=True, faults=("kill", "clock"))
    assert run.report is not None and run.report.acked > 100, run.summary()
    if why is None:
        assert run.not_drawn == [], run.summary()
        return
    assert len(run.not_drawn) == 1, run.summary()
    assert run.not_drawn[0].startswith("clock: redis-server under libfaketime "), run.not_drawn
    assert run.faults and all("kill -9" in fault for fault in run.faults), run.faults
    assert f"not drawn: {run.not_drawn[0]}" in run.summary()


@needs_etcd
@needs_fake_clock
def test_etcd_is_struck_by_the_other_faults_and_the_run_says_its_clock_cannot_be_stepped(
    tmp_path: Path,
) -> None:
    run = run_store(EtcdCluster(tmp_path), 8.0, seed=1, faults=("kill", "clock"))
    assert len(run.not_drawn) == 1, run.summary()
    why = run.not_drawn[0]
    assert why.startswith("clock: the fake clock does not reach m0: "), why
    assert "is a Go binary" in why, why
    assert run.faults and all("kill -9" in fault for fault in run.faults), run.faults
    assert f"not drawn: {why}" in run.summary()
    assert run.ok, run.summary() + "\n" + run.details()
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.LINEARIZABLE, run.summary()


@needs_etcd
@needs_fake_clock
def test_clock_faults_alone_on_etcd_are_a_failed_run_that_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["etcd", "--folder", str(tmp_path), "--seconds", "1", "--faults", "clock"]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "no fault the nemesis can draw: clock: the fake clock does not reach m0: " in said
    assert "is a Go binary" in said, said
