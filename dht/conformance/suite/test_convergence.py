"""SPEC.md section 15: a replica that missed writes gets them without a client asking.
Whether a write is on one node is seen through the public API alone: with the other
nodes killed, a GET at 1/3 through it can only answer from its own data."""

from __future__ import annotations

import time

import pytest

from dht.conformance.faults import Recorder, first_failure
from dht.conformance.fixtures import ClusterFactory
from dht.conformance.rules import rule
from dht.history.operation import Kind, Op

pytestmark = pytest.mark.convergence

# SPEC.md rule 15.1: a missed write is on its replica this many seconds after its restart.
CONVERGENCE_SECONDS = 10.0
KEYS = [f"missed-{index:02d}" for index in range(12)]


def acknowledged(op: Op) -> bool:
    return op.acknowledged


@rule("15.1")
@pytest.mark.controls("kill", "start")
def test_a_write_a_node_missed_is_on_it_after_its_restart_without_a_read(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    first, second, victim = cluster.nodes
    recorder = Recorder("convergence", cluster.nodes)
    before = [recorder.send(first, Kind.PUT, key, f"before {key}".encode()) for key in KEYS]
    assert not (problem := first_failure(before, acknowledged, "an acknowledged PUT")), (
        f"with every node up: {problem}"
    )
    expected: dict[str, bytes | None] = {}
    with recorder.fault(f"kill -9 {recorder.name(victim)}, restart"):
        victim.kill()
        missed = []
        for index, key in enumerate(KEYS):
            through = (first, second)[index % 2]
            if index % 3 == 2:
                missed.append(recorder.send(through, Kind.DELETE, key))
                expected[key] = None
            else:
                expected[key] = f"after {key}".encode()
                missed.append(recorder.send(through, Kind.PUT, key, expected[key]))
        assert not (problem := first_failure(missed, acknowledged, "an acknowledged write")), (
            f"with {recorder.name(victim)} down (rule 3.2 needs it): {problem}"
        )
        victim.start()
    time.sleep(CONVERGENCE_SECONDS)
    with recorder.fault("kill -9 the other nodes"):
        first.kill()
        second.kill()
        alone = {key: recorder.send(victim, Kind.GET, key, replicas="1/3") for key in KEYS}
    # The run's final state is what the restarted node holds alone: a write it lacks
    # shows in the plot as lost from it.
    recorder.write(
        {key: op.value for key, op in alone.items()},
        {key: (op.invoked, op.completed or op.invoked) for key, op in alone.items()},
    )
    wrong = [
        f"{key}: {op.status} {op.value!r}" if op.status is not None else f"{key}: no answer"
        for key, op in alone.items()
        if (op.status, op.value) != ((200, expected[key]) if expected[key] else (404, None))
    ]
    assert not wrong, (
        f"{len(wrong)} of {len(KEYS)} writes acknowledged while {recorder.name(victim)} was "
        f"down are not on it {CONVERGENCE_SECONDS:.0f} s after its restart (GET 1/3 through "
        f"it, the others killed); the first: {wrong[0]}, expected "
        f"{expected[wrong[0].split(':')[0]]!r}"
    )
