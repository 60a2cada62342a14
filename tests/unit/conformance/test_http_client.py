"""The kit's HTTP client against answers cut off mid-way, from a real socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.conformance.http_client import request
from dht.conformance.launcher import Node
from dht.conformance.traffic import Kind, attempt


@pytest.fixture
def cut_off_server() -> Iterator[int]:
    """Answers every request with a head promising 7 bytes of body, then closes: what a
    client sees of a node killed while it answered."""
    listener = socket.create_server(("127.0.0.1", 0))
    stopped = threading.Event()

    def serve() -> None:
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopped.set()
        listener.close()
        thread.join(timeout=5)


def test_an_answer_cut_off_raises_connection_error(cut_off_server: int) -> None:
    with pytest.raises(ConnectionError, match="cut off"):
        request("GET", f"http://127.0.0.1:{cut_off_server}/v0/entity?id=k", timeout=5)


def test_an_operation_whose_answer_is_cut_off_is_recorded_without_an_outcome(
    cut_off_server: int, tmp_path: Path
) -> None:
    """The client thread records it as indeterminate and goes on, rather than dying with
    a traceback and leaving the rest of its history unwritten."""
    url = f"http://127.0.0.1:{cut_off_server}"
    node = Node(cut_off_server, tmp_path, url, [url])
    op = attempt(node, Kind.PUT, "key-01", b"value", timeout=5)
    assert (op.status, op.completed) == (None, None)
