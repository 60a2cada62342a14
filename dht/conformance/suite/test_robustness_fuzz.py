"""Raw-socket fuzzing of the client API on real node processes (SPEC.md section 5).

Whatever bytes a client sends, a node must not fail on them (rules 5.1, 5.2): never a
500 (nor any 5xx but 503 and 504), a complete answer to every well-formed request, a
rejection or a close for a malformed one, never a hang. Afterwards (rule 5.8) it is still
up, /v0/status answers 200, and every value acknowledged before the fuzzing reads back
byte for byte: those are written first under keys holding a UUID, which the fuzzer's
short keys never hit. The same fuzz runs against a lone node and against one node of a
3-node cluster (with a cluster secret on dht), where every entity request is coordinated
across replicas.

Each family of probes (dht/conformance/fuzz/probes.py) is its own hypothesis run on the same
node, and the test fails at the end with every family's minimal failing example, so one
bug does not hide the others. DHT_FUZZ_EXAMPLES sets the requests per test
(dht/conformance/fuzz/budget.py); `pytest -s` prints a summary line per family.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest
from hypothesis import given

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.fuzz.budget import raw_request_settings
from dht.conformance.fuzz.exchange import HANG_SECONDS, Probe, Tally, check, exchange
from dht.conformance.fuzz.probes import FAMILIES, Family
from dht.conformance.http_client import HOST, request
from dht.conformance.launcher import Node, dht_tuning
from dht.conformance.rules import rule

pytestmark = pytest.mark.robustness

# Values written before the fuzzing and read back after it (rule 5.8).
SEEDED = 20


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


def seed(node: Node) -> dict[str, bytes]:
    """Writes SEEDED values through `node` and returns the acknowledged ones (201), key
    -> value. Each key holds a fresh UUID, out of the fuzzer's reach (its keys are a few
    short pieces), and some hold what a query must escape, or non-ASCII text."""
    rng = random.Random(0x5_8)
    oddities = ["", " & = + % / ? #", "ключ", "\U0001f511", "a%41"]
    acknowledged = {}
    for i in range(SEEDED):
        key = f"seeded-{uuid.uuid4()}-{i}{oddities[i % len(oddities)]}"
        value = rng.randbytes(rng.choice([0, 1, 64, 1024, 4096]))
        if node.put(key, value).status == 201:
            acknowledged[key] = value
    return acknowledged


def lost_values(nodes: list[Node], acknowledged: dict[str, bytes]) -> list[str]:
    """Every acknowledged value that does not read back byte for byte through each of
    `nodes`, as a line saying what came back instead."""
    lost = []
    for node in nodes:
        for key, value in acknowledged.items():
            response = node.get(key)
            if (response.status, response.body) != (200, value):
                lost.append(
                    f"{key!r} through {node.url}: {response.status} with "
                    f"{len(response.body)} bytes, not the {len(value)} acknowledged"
                )
    return lost


def fuzz(node: Node, label: str, peers: list[Node] | None = None) -> None:
    """Every family against `node`, between writing the seeded values through it and
    reading them back through it and each of its `peers` (which took every coordinated
    request's replica traffic, so they must be serving too); fails with all the
    failures found."""
    readers = [node, *(peers or [])]
    acknowledged = seed(node)
    assert acknowledged, f"no seeded value of {SEEDED} was acknowledged on an idle node"
    failures: list[str] = []
    for family in FAMILIES:
        try:
            fuzz_family(node, family, label)
        except Exception as error:
            failures += [f"[{family.name}] {failure}" for failure in failures_in(error)]
    for reader in readers:
        assert_serving(reader, after="the whole run")
    lost = lost_values(readers, acknowledged)
    if lost:
        failures.append(
            f"{len(lost)} acknowledged value(s) of {len(acknowledged)} did not read back "
            "after the fuzzing:\n" + "\n".join(lost[:20])
        )
    print(
        f"\n{label}: {len(acknowledged)} of {SEEDED} seeded values acknowledged, "
        f"{len(acknowledged) * len(readers) - len(lost)} reads back intact"
    )
    if failures:
        # The first line names the first failure: it is what a conformance report shows.
        headline = f"{len(failures)} failure(s), the first: {failures[0].splitlines()[0]}"
        pytest.fail(f"{headline}\n\n" + "\n\n".join(failures), pytrace=False)


@rule("5.1", "5.2", "5.8")
def test_any_request_to_a_lone_node_is_answered_or_refused_and_values_survive(
    node: Node,
) -> None:
    fuzz(node, "1 node")


@rule("5.1", "5.2", "5.8")
def test_any_request_to_a_cluster_node_is_answered_or_refused_and_values_survive(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, dht_tuning("--secret", "fuzz-secret"))
    fuzz(cluster[0], "node 1 of 3", peers=cluster.nodes[1:])
