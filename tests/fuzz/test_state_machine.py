"""A model-based test of the client API (SPEC.md sections 1 and 2, rule 7.5): random
sequences of PUT, GET, DELETE and range requests against real nodes and against a Python
dict, which must agree after every step.

Keys are arbitrary non-empty byte strings, sent percent-encoded byte for byte: the spec
makes a key exactly the bytes its percent-decoding gives, so %FF, %FE and %EF%BF%BD are
three keys, and the range orders keys by those bytes. Values are arbitrary bytes, empty
included. The same machine runs on a lone node and on a 3-node cluster with the default
replicas (2/3, every node up), each request sent through a node the machine picks.

Every run starts from an empty store: the nodes start once per test, so each run first
deletes what the last one left, and checks through the range that nothing is left.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote_from_bytes

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.fuzz.budget import machine_settings
from dht.conformance.http_client import RawResponse, Response, raw_get, request
from dht.conformance.launcher import Node

# Pieces that make keys collide with each other's prefixes and encodings: bytes that are
# not UTF-8 (\xff, \xfe), U+FFFD's own encoding (what a lossy decoder folds them into),
# the query's own syntax (+ % & = space) and the range's record separator (\n).
KEY_PIECES = [b"a", b"b", b"ab", b"\x00", b"\xff", b"\xfe", b"\xef\xbf\xbd", b"\xc3\xa9"]
KEY_PIECES += [b"+", b"%", b"&", b"=", b" ", b"\n", b"/"]
piece_keys = st.lists(st.sampled_from(KEY_PIECES), min_size=1, max_size=4).map(b"".join)
# Two in three keys from pieces, so keys share prefixes and range bounds fall among them.
keys_strategy: st.SearchStrategy[bytes] = st.one_of(
    piece_keys, piece_keys, st.binary(min_size=1, max_size=64)
)
values_strategy = st.binary(max_size=4096)
# SPEC.md rule 8.3: a write at least 10 ms after another is newer, whichever node
# coordinates each; two writes through one coordinator are always ordered.
ORDERING_PAUSE = 0.011
# The smallest key there is: a range from it holds every key.
LOWEST_KEY = b"\x00"


def entity_url(node: Node, key: bytes) -> str:
    return f"{node.url}/v0/entity?id={quote_from_bytes(key, safe='')}"


def range_url(node: Node, start: bytes, end: bytes | None) -> str:
    url = f"{node.url}/v0/entities?start={quote_from_bytes(start, safe='')}"
    return url if end is None else f"{url}&end={quote_from_bytes(end, safe='')}"


def record(key: bytes, value: bytes) -> bytes:
    """One chunk of a range answer."""
    return key + b"\n" + value


def keys_in_chunks(chunks: list[bytes]) -> set[bytes]:
    """Every key a chunk could start with: a key may itself hold the `\\n` that ends it,
    so each `\\n` but a leading one (keys are not empty) is a possible end. Deleting
    them all deletes the record."""
    return {chunk[:at] for chunk in chunks for at, byte in enumerate(chunk) if byte == 0x0A and at}


@dataclass
class Traffic:
    """What the machine sent and what came back, for the summary line."""

    runs: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    range_records: int = 0

    def add(self, operation: str, status: int) -> None:
        self.requests[operation] += 1
        self.statuses[f"{operation} {status}"] += 1

    def summary(self, label: str) -> str:
        def listed(counter: Counter[str]) -> str:
            return ", ".join(f"{key}={count}" for key, count in sorted(counter.items()))

        return (
            f"state machine ({label}): {self.runs} runs, {sum(self.requests.values())} "
            f"requests [{listed(self.requests)}]; statuses [{listed(self.statuses)}]; "
            f"{self.range_records} records read by ranges"
        )


def store_machine(nodes: Sequence[Node], traffic: Traffic) -> type[RuleBasedStateMachine]:
    """The machine class for these nodes: hypothesis builds a fresh instance per run."""
    coordinators = st.integers(min_value=0, max_value=len(nodes) - 1)
    # key -> (coordinator index, time acknowledged) of its last write, across runs: the
    # next run's first write of a key may follow the last run's through another node.
    last_write: dict[bytes, tuple[int, float]] = {}

    class StoreMachine(RuleBasedStateMachine):
        written = Bundle("written")  # keys once PUT or DELETEd: hit them again

        def __init__(self) -> None:
            super().__init__()
            self.model: dict[bytes, bytes] = {}

        # -- requests ----------------------------------------------------------------

        def send(
            self, operation: str, method: str, url: str, body: bytes | None = None
        ) -> Response:
            response = request(method, url, body)
            traffic.add(operation, response.status)
            return response

        def read_range(self, via: int, start: bytes, end: bytes | None) -> RawResponse:
            response = raw_get(range_url(nodes[via], start, end))
            traffic.add("range", response.status)
            return response

        def before_write(self, key: bytes, via: int) -> None:
            """Waits until a write through `via` is sure to be newer than the key's last
            write, if that went through another coordinator (SPEC.md rule 8.3)."""
            previous = last_write.get(key)
            if previous is not None and previous[0] != via:
                time.sleep(max(0.0, previous[1] + ORDERING_PAUSE - time.monotonic()))

        def after_write(self, key: bytes, via: int) -> None:
            last_write[key] = (via, time.monotonic())

        # -- the run starts from an empty store -----------------------------------------

        @initialize()
        def empty_the_store(self) -> None:
            traffic.runs += 1
            for _ in range(5):
                response = self.read_range(0, LOWEST_KEY, None)
                assert response.status == 200, response.body[:200]
                left = keys_in_chunks(response.chunks)
                if not left:
                    return
                for key in left:
                    self.before_write(key, 0)
                    assert self.send("delete", "DELETE", entity_url(nodes[0], key)).status == 202
                    self.after_write(key, 0)
            raise AssertionError(f"the store still holds {response.chunks!r} after deletes")

        # -- the rules ------------------------------------------------------------------

        @rule(target=written, key=keys_strategy, value=values_strategy, via=coordinators)
        def put(self, key: bytes, value: bytes, via: int) -> bytes:
            self.before_write(key, via)
            response = self.send("put", "PUT", entity_url(nodes[via], key), value)
            assert response.status == 201, f"PUT {key!r}: {response.status} {response.text}"
            self.after_write(key, via)
            self.model[key] = value
            return key

        @rule(key=written, value=values_strategy, via=coordinators)
        def overwrite(self, key: bytes, value: bytes, via: int) -> None:
            self.put(key, value, via)

        @rule(target=written, key=written | keys_strategy, via=coordinators)
        def delete(self, key: bytes, via: int) -> bytes:
            self.before_write(key, via)
            response = self.send("delete", "DELETE", entity_url(nodes[via], key))
            assert response.status == 202, f"DELETE {key!r}: {response.status} {response.text}"
            self.after_write(key, via)
            self.model.pop(key, None)
            return key

        @rule(key=written | keys_strategy, via=coordinators)
        def get(self, key: bytes, via: int) -> None:
            response = self.send("get", "GET", entity_url(nodes[via], key))
            if key in self.model:
                expected = self.model[key]
                assert response.status == 200, f"GET {key!r}: {response.status}, want 200"
                assert response.body == expected, (
                    f"GET {key!r}: {len(response.body)} bytes {response.body[:60]!r}, "
                    f"want {len(expected)} bytes {expected[:60]!r}"
                )
            else:
                assert response.status == 404, (
                    f"GET {key!r} (absent): {response.status} {response.body[:60]!r}, want 404"
                )

        @rule(
            start=written | keys_strategy,
            end=st.none() | written | keys_strategy,
            via=coordinators,
        )
        def range_query(self, start: bytes, end: bytes | None, via: int) -> None:
            response = self.read_range(via, start, end)
            assert response.status == 200, f"range [{start!r}, {end!r}): {response.status}"
            chunks = response.chunks
            traffic.range_records += len(chunks)
            span = sorted(k for k in self.model if start <= k and (end is None or k < end))
            expected = [record(key, self.model[key]) for key in span]
            assert chunks == expected, (
                f"range [{start!r}, {end!r}): got {[c[:40] for c in chunks]!r}, "
                f"want {[c[:40] for c in expected]!r}"
            )

    return StoreMachine


def run_machine(nodes: Sequence[Node], label: str) -> None:
    traffic = Traffic()
    try:
        run_state_machine_as_test(store_machine(nodes, traffic), settings=machine_settings())
    finally:
        print(f"\n{traffic.summary(label)}")


def test_a_lone_node_behaves_like_a_dict(node: Node) -> None:
    run_machine([node], "1 node")


def test_a_cluster_behaves_like_a_dict(start_cluster: ClusterFactory) -> None:
    run_machine(list(start_cluster(3)), "3 nodes, default replicas 2/3")
