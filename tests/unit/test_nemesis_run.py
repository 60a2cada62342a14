"""Which requests of a nemesis run are judged by their answers (dht/conformance/nemesis.py):
those through a node no fault was on while they ran."""

from __future__ import annotations

from dht.conformance.nemesis import Applied, unfaulted
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
