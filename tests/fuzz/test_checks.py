"""The fuzz suite's own checks, against fake nodes: each property must catch the fault it
is there for (a 500, a hang, a dropped or cut-short answer, a malformed request let
through), and the probes must be labelled right, judged by an independent parser (h11).

No node process here: a fake node is a thread behind a loopback socket that answers
what the test scripts, so a fault can be planted that the real node may never show.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings

from dht.conformance.fuzz.exchange import (
    Answer,
    End,
    Exchange,
    Expect,
    Probe,
    check,
    exchange,
    parse_answer,
)
from dht.conformance.fuzz.probes import malformed_framing, malformed_head, probes, valid_request

REQUEST = b"GET /v0/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
WELL_FORMED = Probe("test", REQUEST, Expect.ANSWER)
MALFORMED = Probe("test", b"GE T / HTTP/1.1\r\n\r\n", Expect.REJECTION)


def reply(status: int, body: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


@contextmanager
def fake_node(answer: bytes | None, then_close: bool = True) -> Iterator[int]:
    """A one-connection server on a free loopback port: reads the request head, sends
    `answer` (None: nothing), then closes, or stays silent until the client leaves."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            connection.settimeout(5)
            received = b""
            while b"\r\n\r\n" not in received:
                data = connection.recv(4096)
                if not data:
                    break
                received += data
            if answer is not None:
                connection.sendall(answer)
            if not then_close:
                connection.recv(1)  # until the client closes or gives up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        thread.join(timeout=6)
        server.close()


def run(probe: Probe, answer: bytes | None, then_close: bool = True) -> Exchange:
    with fake_node(answer, then_close) as port:
        return exchange("127.0.0.1", port, probe, deadline=0.5)


# -- each property catches its fault ------------------------------------------------------


@pytest.mark.parametrize("status", [500, 501, 502, 505, 599])
def test_a_5xx_other_than_503_and_504_fails(status: int) -> None:
    result = run(WELL_FORMED, reply(status, b"Internal Server Error: KeyError\n"))
    assert result.answer is not None and result.answer.status == status
    with pytest.raises(AssertionError, match=f"answered {status}"):
        check(WELL_FORMED, result)


@pytest.mark.parametrize("status", [200, 400, 404, 503, 504])
def test_statuses_a_node_may_answer_pass(status: int) -> None:
    check(WELL_FORMED, run(WELL_FORMED, reply(status)))


def test_a_silent_node_is_a_hang() -> None:
    result = run(WELL_FORMED, None, then_close=False)
    assert result.end is End.HUNG
    with pytest.raises(AssertionError, match="no answer and no close"):
        check(MALFORMED, result)  # not even a malformed request may be left hanging


def test_a_close_without_an_answer_fails_a_well_formed_request_only() -> None:
    result = run(WELL_FORMED, None)
    assert result.end is End.CLOSED
    with pytest.raises(AssertionError, match="without an answer"):
        check(WELL_FORMED, result)
    check(MALFORMED, result)


def test_an_answer_cut_short_is_a_dropped_connection() -> None:
    result = run(WELL_FORMED, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert result.end is End.CLOSED
    with pytest.raises(AssertionError, match="without an answer"):
        check(WELL_FORMED, result)


def test_a_chunked_answer_without_its_last_chunk_is_a_dropped_connection() -> None:
    result = run(WELL_FORMED, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    with pytest.raises(AssertionError, match="without an answer"):
        check(WELL_FORMED, result)


def test_a_malformed_request_must_be_rejected_not_served() -> None:
    with pytest.raises(AssertionError, match="answered 200, not a rejection"):
        check(MALFORMED, run(MALFORMED, reply(200)))
    check(MALFORMED, run(MALFORMED, reply(400)))


def test_bytes_that_are_not_http_fail() -> None:
    result = run(WELL_FORMED, b"\x00\x01binary channel garbage\r\n\r\n")
    assert result.end is End.GARBLED
    with pytest.raises(AssertionError, match="not an HTTP/1"):
        check(WELL_FORMED, result)


def test_a_request_answered_as_something_else_because_of_bytes_after_it_fails() -> None:
    alone = Exchange(End.ANSWERED, Answer(200, [], b""), b"", 0.0)
    misread = Exchange(End.ANSWERED, Answer(404, [], b"Not Found"), b"", 0.0)
    with pytest.raises(AssertionError, match="went unanswered"):
        check(WELL_FORMED, misread, alone)
    check(WELL_FORMED, alone, alone)
    # aiohttp rejects a read whole when junk follows a request in it: accepted.
    rejected = Exchange(End.ANSWERED, Answer(400, [], b"Invalid method"), b"", 0.0)
    check(WELL_FORMED, rejected, alone)


def test_a_cut_short_request_is_half_closed_so_the_node_can_answer() -> None:
    """The fake node answers only after the client's EOF, as a node reading a body
    to its end would."""
    probe = Probe("test", b"PUT / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc", Expect.ANY, True)
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            while connection.recv(4096):
                pass
            connection.sendall(reply(400))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    result = exchange("127.0.0.1", server.getsockname()[1], probe, deadline=2.0)
    thread.join(timeout=3)
    server.close()
    assert result.answer is not None and result.answer.status == 400


# -- reading answers --------------------------------------------------------------------


def test_parse_answer_waits_for_the_whole_body() -> None:
    assert parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab", False, False) is None
    answer = parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", False, False)
    assert answer == Answer(200, [("Content-Length", "3")], b"abc")


def test_parse_answer_dechunks_and_skips_interim_answers() -> None:
    data = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;x=y\r\nd\r\n0\r\n\r\n"
    )
    answer = parse_answer(data, False, False)
    assert answer is not None and (answer.status, answer.body) == (200, b"abcd")


def test_a_head_answer_has_no_body_whatever_its_length() -> None:
    answer = parse_answer(b"HTTP/1.1 405 X\r\nContent-Length: 30\r\n\r\n", True, False)
    assert answer is not None and answer.body == b""


# -- the probes are labelled right ---------------------------------------------------------


def h11_reads_a_whole_request(wire: bytes) -> bool:
    """Whether h11, a strict independent parser, reads `wire` as one complete request
    (h11 comes with the test dependencies, through locust)."""
    h11 = pytest.importorskip("h11")
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(wire)
    connection.receive_data(b"")
    while True:
        event = connection.next_event()
        if isinstance(event, h11.EndOfMessage):
            return True
        if event is h11.NEED_DATA or event is h11.PAUSED:
            return False


QUICK = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(probe=valid_request())
def test_every_well_formed_probe_is_valid_http(probe: Probe) -> None:
    assert h11_reads_a_whole_request(probe.alone or probe.wire)


@QUICK
@given(probe=malformed_head() | malformed_framing())
def test_every_malformed_probe_is_invalid_http(probe: Probe) -> None:
    h11 = pytest.importorskip("h11")
    with pytest.raises(h11.RemoteProtocolError):
        h11_reads_a_whole_request(probe.wire)


@QUICK
@given(probe=probes())
def test_no_probe_opens_a_replica_channel(probe: Probe) -> None:
    """A first byte 0x00 would reach the replica channel, which is not fuzzed here."""
    assert not probe.wire.startswith(b"\x00")
