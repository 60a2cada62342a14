"""Live fuzzing of the replica channel (SPEC.md rules 11.4 and 11.6): byte streams from
tests/fuzz/channel_streams.py sent to a running node's port, while a client uses its
HTTP API on the side.

Strangers (no true HELLO: a wrong secret, or on a node without one a wrong ring; a
HELLO of another version; none at all) send calls that are mutated, cut short,
reordered, over the limits and split at any byte, on a few connections at once and, one
time in two, behind a crowd of more connections than may await their HELLO. None of
their writes may land in the node's records and none of their calls may be answered:
the node says REFUSED at most. A true peer sends the same kinds of streams after its
handshake: every call of a valid one is answered, and whatever it sends, the byte
budget is empty again once its connections are closed. Throughout, the process stays
up and answers /v0/status, the side client's every PUT and GET succeeds, and the log
grows by a few lines per ten seconds, however many connections were bad.

One node per test, started once and checked between examples; DHT_FUZZ_EXAMPLES sets
how many (dht/conformance/fuzz/budget.py). `pytest -s` prints a summary line per test.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.fuzz.budget import raw_request_settings
from dht.conformance.http_client import request, wait_for
from dht.conformance.launcher import TLS_ENV, Node
from dht.conformance.peer_tools import (
    cluster_secret,
    internal_request,
    open_channel,
    peer_hello,
    records_url,
)
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record, decode, encode_header
from dht.transport.messages import (
    PROTOCOL_VERSION,
    Challenge,
    Event,
    GetRecord,
    Proof,
    ProtocolError,
    PutRecord,
    Refused,
    Stored,
    Welcome,
)
from dht.transport.proof import PROOF_BYTES, Side, proof
from dht.transport.protocol import PREFACE, ReplicaCodec, Role
from dht.transport.wire import FRAME_LENGTH
from tests.fuzz.channel_streams import Stream, frames_of, peer_streams, stranger_streams
from tests.fuzz.raw_connections import STALL_DEADLINE, Connection, events_in, exchange

SECRET = "fuzz-secret-q7Zr2mX9"
LARGEST_VALUE = 256 * 1024  # --max-value-bytes: a message over it costs little to send
NODE_FLAGS = ["--max-value-bytes", str(LARGEST_VALUE)]
# Kinds of rate-limited log line a flood can bring out (the channel's garbage, refusals,
# crowd and deadline, versions ahead, each kind of malformed HTTP): each logs at most one
# line per ten seconds, and one more saying how many it held back.
LOG_KINDS = 16
SIDE_KEYS = b"side/"
SIDE_VALUE_BYTES = 16  # what the side client's PUT holds of the byte budget, at most
BUDGET_DEADLINE = 2.0


# -- the handshake: everything that knows how a channel is opened -----------------------


def authenticated_channel(node: Node) -> tuple[socket.socket, ReplicaCodec]:
    """A replica channel to `node` opened as its true peer does (HELLO, the node's
    CHALLENGE answered with a PROOF of its secret, then WELCOME read), and the client
    codec that goes on reading and writing it."""
    sock, codec = open_channel(node, timeout=STALL_DEADLINE)
    while (event := codec.next_event()) is None:
        data = sock.recv(65536)
        assert data, f"{node.url} closed a true peer's channel before WELCOME"
        codec.receive_data(data)
    assert isinstance(event, Welcome), f"a true peer's PROOF got {event!r}"
    return sock, codec


def stranger_hellos(node: Node) -> tuple[dict[str, bytes], bytes]:
    """Handshakes `node` must refuse (their bytes, by name), and what authenticates a
    peer, which none of them carries: the secret (a stranger's PROOF, made before it
    saw the node's nonce, can never be right), or on a node without one the ring
    identity (the one HELLO field it checks). A stream that carries it is not a
    stranger's."""
    true = peer_hello(node)
    other = PROTOCOL_VERSION + 1
    secret = cluster_secret(node)
    if secret:
        credential = secret
        guessed = proof("guess", Side.CLIENT, true.nonce, b"\0" * 16, true.sender, true.ring)
        wrong = {
            "zero proof": (true, Proof(b"\0" * PROOF_BYTES)),
            "guessed proof": (true, Proof(guessed)),
            "short proof": (true, Proof(guessed[:-1])),
            f"version {other}": (dataclasses.replace(true, version=other), Proof(guessed)),
        }
    else:
        credential = true.ring
        wrong = {
            "other ring": (dataclasses.replace(true, ring="0" * len(true.ring)),),
            "no ring": (dataclasses.replace(true, ring=""),),
            "one short": (dataclasses.replace(true, ring=true.ring[:-1]),),
            f"version {other}": (dataclasses.replace(true, version=other, ring="0"),),
        }
    hellos = {
        f"HELLO({name})": b"".join(frame for message in messages for frame in frames_of(message))
        for name, messages in wrong.items()
    }
    return hellos, credential.encode()


# -- the node's state --------------------------------------------------------------------


def stored_records(node: Node) -> dict[bytes, Record]:
    """Every record the node holds but the side client's, read from its own storage
    (`/internal/v0/records`), keys as bytes: a stranger's key need not be UTF-8."""
    body = internal_request(node, "GET", records_url(node.url, "\x00")).body
    records, at = {}, 0
    while at < len(body):
        (size,) = FRAME_LENGTH.unpack_from(body, at)
        key = body[at + FRAME_LENGTH.size : at + FRAME_LENGTH.size + size]
        at += FRAME_LENGTH.size + size
        (size,) = FRAME_LENGTH.unpack_from(body, at)
        record = decode(body[at + FRAME_LENGTH.size : at + FRAME_LENGTH.size + size])
        at += FRAME_LENGTH.size + size
        if not key.startswith(SIDE_KEYS):
            records[key] = record
    return records


def assert_serving(node: Node, after: str) -> None:
    assert node.running, f"{node.url} exited after {after}:\n{node.log_tail()}"
    status = request("GET", node.url + "/v0/status", timeout=STALL_DEADLINE).status
    assert status == 200, f"{node.url}/v0/status answered {status} after {after}"


def bytes_in_flight(node: Node) -> int:
    return int(json.loads(request("GET", node.url + "/v0/status").body)["bytes_in_flight"])


@dataclass
class Run:
    """One test's fuzzing: a client on the side, the connections made, the log lines."""

    node: Node
    examples: int = 0
    connections: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    side_operations: int = 0
    side_failures: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def side_client(self, stop: threading.Event) -> None:
        """PUT then GET of a few keys over and over, each expected to succeed."""
        while not stop.wait(0.02):
            key, value = f"side/{self.side_operations % 20}", b"%d" % self.side_operations
            try:
                put, get = self.node.put(key, value), self.node.get(key)
                if put.status != 201 or (get.status, get.body) != (200, value):
                    self.side_failures.append(f"{key}: PUT {put!r}, GET {get!r}")
            except OSError as error:
                self.side_failures.append(f"{key}: {error!r}")
            self.side_operations += 1

    def check(self) -> None:
        assert_serving(self.node, after="the whole run")
        assert not self.side_failures, f"the side client failed: {self.side_failures[:5]}"
        assert self.side_operations > 0, "the side client got nothing done"
        tracebacks = [line for line in self.log_lines if line.startswith("Traceback")]
        assert not tracebacks, "the node logged a traceback:\n" + "\n".join(self.log_lines)
        bound = LOG_KINDS * (2 + int(self.seconds / 10))
        assert len(self.log_lines) <= bound, (
            f"{len(self.log_lines)} log lines in {self.seconds:.0f} s for {self.connections} "
            f"connections, over {bound}:\n" + "\n".join(self.log_lines[:40])
        )

    def summary(self, label: str) -> str:
        answers = ", ".join(f"{name}={count}" for name, count in sorted(self.answers.items()))
        return (
            f"{label}: {self.examples} examples, {self.connections} connections in "
            f"{self.seconds:.1f} s, answers [{answers}], {self.side_operations} side "
            f"PUT+GETs, {len(self.log_lines)} log lines"
        )


@contextmanager
def fuzzing(node: Node, label: str) -> Iterator[Run]:
    """A run on `node`: the side client goes while the body fuzzes, then every check of
    the whole run."""
    assert node.log_path is not None
    logged_before = len(node.log_path.read_text(errors="replace").splitlines())
    run, stop = Run(node), threading.Event()
    side = threading.Thread(target=run.side_client, args=(stop,), daemon=True)
    started = time.monotonic()
    side.start()
    try:
        yield run
    finally:
        stop.set()
        side.join(timeout=30)
        run.seconds = time.monotonic() - started
        run.log_lines = node.log_path.read_text(errors="replace").splitlines()[logged_before:]
        print(f"\n{run.summary(label)}")
    run.check()


# -- the tests ---------------------------------------------------------------------------


def check_the_checks(node: Node, hellos: dict[str, bytes]) -> dict[bytes, Record]:
    """The properties can fail: a write from a true peer lands where the test looks, and
    each stranger's HELLO is refused. Returns the records the node holds after it."""
    sock, codec = authenticated_channel(node)
    with sock:
        record = Record.live(version_at(wall_clock_ms()), b"written by a true peer")
        sock.sendall(b"".join(frames_of(PutRecord(1, b"control", record))))
        answers: list[Event] = []
        while not answers and (data := sock.recv(65536)):
            answers = events_in(data, codec)
    assert answers == [Stored(1, True)], answers
    records = stored_records(node)
    assert b"control" in records, records
    for name, hello in hellos.items():
        connection = Connection.to(node, (hello,))
        exchange([connection])
        answer = events_in(bytes(connection.received), ReplicaCodec(Role.CLIENT, 1 << 30))
        kinds = [type(event) for event in answer]
        assert kinds in ([Refused], [Challenge, Refused]), f"{name}: {answer!r}"
    return records


@pytest.mark.parametrize("secret", [True, False], ids=["with a secret", "without a secret"])
def test_no_frame_from_a_stranger_is_applied_or_answered(
    start_cluster: ClusterFactory, secret: bool
) -> None:
    node = start_cluster(1, NODE_FLAGS + (["--secret", SECRET] if secret else []))[0]
    hellos, credential = stranger_hellos(node)
    held = check_the_checks(node, hellos)
    streams = stranger_streams(hellos, b"stranger/", LARGEST_VALUE)
    # One time in two a crowd over the 64 that may await their HELLO, sent first.
    crowds = st.just(0) | st.integers(min_value=65, max_value=90)

    with fuzzing(node, f"strangers, {'with' if secret else 'without'} a secret") as run:

        @raw_request_settings(0.5)
        @given(sent=st.lists(streams, min_size=1, max_size=6), crowd=crowds)
        def strangers(sent: list[Stream], crowd: int) -> None:
            assume(all(credential not in stream.data for stream in sent))
            run.examples += 1
            connections = [Connection.to(node, (PREFACE[:1],)) for _ in range(crowd)]
            connections += [Connection.to(node, stream.chunks) for stream in sent]
            run.connections += len(connections)
            exchange(connections)
            for stream, connection in zip(sent, connections[crowd:], strict=True):
                answer = stranger_answer(stream, bytes(connection.received))
                run.answers.update(type(event).__name__ for event in answer)
            assert_serving(node, after=repr(sent))
            landed = {k: r for k, r in stored_records(node).items() if held.get(k) != r}
            assert not landed, f"a stranger's write landed: {landed!r}"

        strangers()


def stranger_answer(stream: Stream, received: bytes) -> list[Event]:
    """What a stranger got on the channel, checked to be REFUSED or nothing; bytes that
    start otherwise go to the HTTP server, which must not take them for a request."""
    if not stream.data.startswith(PREFACE[:1]):
        assert not re.match(rb"HTTP/1\.[01] [23]", received), received[:200]
        return []
    answer = events_in(received, ReplicaCodec(Role.CLIENT, 1 << 30))
    # The node's CHALLENGE (its nonce and proof: nothing a stranger can use), then
    # REFUSED at most.
    assert all(isinstance(event, Challenge | Refused) for event in answer), (
        f"a stranger got {answer!r}"
    )
    return answer


def test_fuzzed_calls_from_a_true_peer_leave_the_node_serving_with_its_budget_back(
    start_cluster: ClusterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node is plain even in a DHT_TLS=1 run: the frames after the handshake are
    # this test's subject, and each stream ends with a TCP half-close, which TLS does
    # not have (Python's unwrap drops answers that arrive while it waits for the
    # node's close_notify). The strangers' tests run over TLS in that run.
    monkeypatch.delenv(TLS_ENV, raising=False)
    node = start_cluster(1, [*NODE_FLAGS, "--secret", SECRET])[0]
    streams = peer_streams(b"peer/", LARGEST_VALUE)

    with fuzzing(node, "a true peer") as run:

        @raw_request_settings(0.5)
        @given(sent=st.lists(streams, min_size=1, max_size=4))
        def peer(sent: list[Stream]) -> None:
            run.examples += 1
            held_before = bytes_in_flight(node)
            channels = [authenticated_channel(node) for _ in sent]
            connections = [
                Connection.opened(sock, stream.chunks)
                for (sock, _), stream in zip(channels, sent, strict=True)
            ]
            run.connections += len(connections)
            exchange(connections)
            for stream, connection, (_, codec) in zip(sent, connections, channels, strict=True):
                answers = peer_answers(stream, bytes(connection.received), codec)
                run.answers.update(type(answer).__name__ for answer in answers)
            assert_serving(node, after=repr(sent))
            # Every connection is closed, so each message it held has let go of its bytes;
            # the side client holds a few at most.
            wait_for(
                lambda: bytes_in_flight(node) - held_before,
                lambda held: held <= SIDE_VALUE_BYTES,
                BUDGET_DEADLINE,
            )

        peer()


def peer_answers(stream: Stream, received: bytes, codec: ReplicaCodec) -> list[Event]:
    """What a true peer got, checked to answer every call of a valid stream. A mutated
    stream may use one call id twice, and the answers to both, each in fragments, are
    then one jumble: there only the answers that decode count."""
    try:
        answers = events_in(received, codec)
    except ProtocolError:
        if not stream.mutations:
            raise
        return []
    if stream.answers_due:
        assert len(answers) == stream.answers_due, f"{stream!r} got {answers!r}"
    return answers


def test_a_true_peers_malformed_large_put_gives_its_bytes_back(
    start_cluster: ClusterFactory,
) -> None:
    """What the fuzzing found, reduced: a PUT in fragments whose record does not decode
    closes the channel, and its bytes used to stay counted in the byte budget for good
    (ReplicaCodec.next_event set `held`, then the decoding raised)."""
    node = start_cluster(1, [*NODE_FLAGS, "--secret", SECRET])[0]
    record = Record.live(version_at(wall_clock_ms()), b"v" * 100_000)
    frames = frames_of(PutRecord(1, b"k", record))
    at = frames[0].index(encode_header(record))  # the record's format byte
    frames[0] = frames[0][:at] + b"\x7f" + frames[0][at + 1 :]
    sock, _ = authenticated_channel(node)
    connection = Connection.opened(sock, tuple(frames))
    exchange([connection])
    assert "unknown record format" in node.log_tail()
    assert wait_for(lambda: bytes_in_flight(node), lambda held: held == 0, BUDGET_DEADLINE) == 0


def test_a_true_peer_that_half_closes_gets_the_answer_to_its_last_write(
    start_cluster: ClusterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the fuzzing found once writes were answered when their batch is synced
    (group commit): GET, PUT, GET sent together, then the peer's TCP half-close. The
    node answered both reads at once, then closed on the half-close before the write's
    batch had landed, and the PUT got no answer."""
    monkeypatch.delenv(TLS_ENV, raising=False)  # a half-close is TCP's, not TLS's
    node = start_cluster(1, [*NODE_FLAGS, "--secret", SECRET])[0]
    record = Record.live(version_at(wall_clock_ms()), b"")
    calls = [GetRecord(1, b"peer/0"), PutRecord(2, b"peer/0", record), GetRecord(3, b"peer/0")]
    sock, codec = authenticated_channel(node)
    connection = Connection.opened(sock, tuple(b"".join(frames_of(call)) for call in calls))
    exchange([connection])
    answers = events_in(bytes(connection.received), codec)
    assert sorted(answer.call_id for answer in answers) == [1, 2, 3], answers
    assert Stored(2, True) in answers, answers
