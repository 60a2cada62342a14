"""A nemesis run (dht/conformance/nemesis.py): which requests are judged by their
answers (those through a node no fault was on while they ran), and a failing run's
shrink, with a fake run in place of a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from dht.conformance import nemesis
from dht.conformance.nemesis import Applied, NemesisRun, judge_answers, unfaulted
from dht.conformance.nemesis_schedule import Schedule, draw
from dht.history.classification import Classification
from dht.history.operation import Kind, Op


def test_only_requests_through_nodes_no_fault_was_on_are_judged_by_their_answers() -> None:
    def op(node: str, invoked: float, completed: float | None) -> Op:
        status = None if completed is None else 200
        return Op(Kind.GET, "k", None, invoked, completed, status, None, node, None)

    applied = [Applied(node=2, start=10.0, end=15.0)]
    ops = [
        op("node3", 11.0, None),  # through the faulted node, during the fault
        op("node3", 9.5, 10.5),  # sent before, answered during it
        op("node3", 4.0, None),  # no answer: it ran until its timeout, into the fault
        op("node3", 16.0, 16.1),  # after the heal
        op("node1", 11.0, 11.1),  # through a node no fault was on
    ]
    assert unfaulted(ops, applied) == [ops[3], ops[4]]


def test_while_a_disk_is_full_a_write_through_any_node_may_be_refused_with_any_status() -> None:
    """As rule 20.1 allows: a replica out of room may leave a write through a healthy
    coordinator refused with 507. A read is not, nor a write after the heal."""

    def op(kind: Kind, invoked: float, status: int) -> Op:
        return Op(kind, "k", b"v", invoked, invoked + 0.1, status, None, "node3", None)

    applied = [Applied(node=0, start=10.0, end=15.0, kind="disk")]
    assert judge_answers([op(Kind.PUT, 11.0, 507), op(Kind.DELETE, 12.0, 507)], applied) == [
        "",
        "",
    ]
    read, late = judge_answers([op(Kind.GET, 11.0, 507)], applied)
    assert read.startswith("GET k through node3") and not late
    after_the_heal, _ = judge_answers([op(Kind.PUT, 16.0, 507)], applied)
    assert after_the_heal.startswith("PUT k through node3")


def test_a_shrink_keeps_the_smallest_failing_run_and_says_what_it_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = draw(3, 120.0)
    culprit = next(fault for fault in schedule.faults if fault.kind == "clock")

    def run_schedule(tried: Schedule, root: Path, scenario: str) -> NemesisRun:
        folder = tmp_path / "runs" / root.name
        folder.mkdir(parents=True)
        found = "1 stale" if culprit in tried.faults else ""
        return NemesisRun(tried, cast(Classification, None), folder, [found])

    monkeypatch.setattr(nemesis, "run_schedule", run_schedule)
    failed = NemesisRun(schedule, cast(Classification, None), tmp_path / "first", ["1 stale"])
    failed.run_dir.mkdir()
    shrunk = nemesis.shrink_run(failed, tmp_path / "s", minutes=10.0)
    assert shrunk.smallest.schedule.faults == (culprit,)
    assert shrunk.minimal and shrunk.original == len(schedule.faults)
    kept = sorted(path.name for path in (tmp_path / "runs").iterdir())
    assert kept == [shrunk.smallest.run_dir.name]
    facts = json.loads((shrunk.smallest.run_dir / nemesis.SHRINK_FILE).read_text())
    assert facts["shrunk_faults"] == 1 and facts["seed"] == 3
    assert "to 1 in " in shrunk.summary() and culprit.label() in shrunk.summary()


def test_a_shrink_try_that_cannot_run_is_tried_again_and_never_taken_for_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The culprit's run alone cannot be made (the kit's own trouble, twice): taking it
    for a pass would keep a bigger schedule and call it 1-minimal."""
    schedule = draw(3, 120.0)
    culprit = next(fault for fault in schedule.faults if fault.kind == "clock")
    alone: list[Schedule] = []

    def run_schedule(tried: Schedule, root: Path, scenario: str) -> NemesisRun:
        if tried.faults == (culprit,):
            alone.append(tried)
            raise RuntimeError("a port was taken")
        folder = tmp_path / "runs" / root.name
        folder.mkdir(parents=True)
        found = "1 stale" if culprit in tried.faults else ""
        return NemesisRun(tried, cast(Classification, None), folder, [found])

    monkeypatch.setattr(nemesis, "run_schedule", run_schedule)
    failed = NemesisRun(schedule, cast(Classification, None), tmp_path / "first", ["1 stale"])
    failed.run_dir.mkdir()
    shrunk = nemesis.shrink_run(failed, tmp_path / "s", minutes=10.0)
    assert len(alone) == 2  # tried once more, then left unresolved
    assert culprit in shrunk.smallest.schedule.faults
    assert len(shrunk.smallest.schedule.faults) == 2
    assert not shrunk.minimal and shrunk.unresolved == 1
    assert "; 1 try could not be run, not shown 1-minimal" in shrunk.summary()
    facts = json.loads((shrunk.smallest.run_dir / nemesis.SHRINK_FILE).read_text())
    assert facts["unresolved"] == 1 and facts["minimal"] is False
