"""Raw-socket fuzzing of the client API on real node processes (SPEC.md section 2).

Whatever bytes a client sends, a node must not fail on them: never a 500 (nor any 5xx
but 503 and 504), a complete answer to every well-formed request, a rejection or a close
for a malformed one, never a hang, and still up and answering /v0/status afterwards.
The same fuzz runs against a lone node and against one node of a 3-node cluster (with a
cluster secret), where every entity request is coordinated across replicas.

Each family of probes (tests/fuzz/probes.py) is its own hypothesis run on the same
node, and the test fails at the end with every family's minimal failing example, so one
bug does not hide the others. DHT_FUZZ_EXAMPLES sets the requests per test
(tests/fuzz/budget.py); `pytest -s` prints a summary line per family.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given

from tests.fixtures import ClusterFactory
from tests.fuzz.budget import raw_request_settings
from tests.fuzz.exchange import HANG_SECONDS, Probe, Tally, check, exchange
from tests.fuzz.probes import FAMILIES, Family
from tests.launcher import HOST, Node, request


def assert_serving(node: Node, after: str) -> None:
    """The node's process is alive and /v0/status answers 200: no request may take the
    node down or wedge its event loop."""
    assert node.running, f"{node.url} exited after {after}:\n{node.log_tail()}"
    status = request("GET", node.url + "/v0/status", timeout=HANG_SECONDS).status
    assert status == 200, f"{node.url}/v0/status answered {status} after {after}"


def send_and_check(node: Node, probe: Probe, tally: Tally) -> None:
    """One fuzzed exchange and every property of it. A request with bytes after it is
    first sent alone, for the answer it must get either way."""
    alone = None
    if probe.alone is not None:
        first = replace(probe, wire=probe.alone, alone=None)
        alone = exchange(HOST, node.port, first)
        check(first, alone)
    result = exchange(HOST, node.port, probe)
    tally.add(probe, result)
    check(probe, result, alone)
    assert_serving(node, after=repr(probe))


def fuzz_family(node: Node, family: Family, label: str) -> None:
    tally = Tally()

    @raw_request_settings(family.share)
    @given(probe=family.strategy)
    def one_request(probe: Probe) -> None:
        send_and_check(node, probe, tally)

    try:
        one_request()
    finally:
        print(f"\n{tally.summary(f'{label}, {family.name}')}")


def failures_in(error: BaseException) -> list[str]:
    """The message of each failure hypothesis reported (several when it found distinct
    bugs), with its falsifying example."""
    if isinstance(error, BaseExceptionGroup):
        return [line for inner in error.exceptions for line in failures_in(inner)]
    notes = "\n".join(getattr(error, "__notes__", []))
    return [f"{type(error).__name__}: {error}\n{notes}"]


def fuzz(node: Node, label: str) -> None:
    """Every family against `node`; fails with all the failures found."""
    failures: list[str] = []
    for family in FAMILIES:
        try:
            fuzz_family(node, family, label)
        except Exception as error:
            failures += [f"[{family.name}] {failure}" for failure in failures_in(error)]
    assert_serving(node, after="the whole run")
    if failures:
        pytest.fail(f"{len(failures)} failure(s):\n\n" + "\n\n".join(failures), pytrace=False)


def test_a_lone_node_survives_raw_requests(node: Node) -> None:
    fuzz(node, "1 node")


def test_a_cluster_node_survives_raw_requests(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, ["--secret", "fuzz-secret"])
    fuzz(cluster[0], "node 1 of 3")
    for node in cluster.nodes[1:]:  # they took every coordinated request's replica traffic
        assert_serving(node, after="the whole run")
