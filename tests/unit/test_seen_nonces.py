"""The nonce cache of internal HTTP requests (dht.replication.proof, SPEC.md rule 11.4):
what the review of issue 29 found, each fixed."""

from __future__ import annotations

from dht.replication.proof import (
    REQUEST_WINDOW_MS,
    SeenNonces,
    check_request,
    new_nonce,
    request_proof,
)

SECRET = "s3cret"
NOW = 1_700_000_000_000
TARGET = "/internal/v0/records?start=a"
RECEIVER = "http://127.0.0.1:8080"


def test_a_request_is_never_taken_twice_even_at_the_edge_of_the_window() -> None:
    seen = SeenNonces()
    for _ in range(1100):  # a busy node: past the size at which the cache prunes
        assert seen.first_time(new_nonce(), NOW + 1, NOW + 1)
    header = request_proof(SECRET, RECEIVER, "GET", TARGET, NOW, new_nonce(), b"")
    assert check_request(SECRET, RECEIVER, header, "GET", TARGET, b"", NOW, seen) is None
    edge = NOW + REQUEST_WINDOW_MS  # still inside the window by check_request's test
    replayed = check_request(SECRET, RECEIVER, header, "GET", TARGET, b"", edge, seen)
    assert replayed is not None


def test_nonces_out_of_the_window_are_forgotten_and_those_in_it_kept() -> None:
    """12,000 requests in one window (40 a second for 300 s): all remembered; once the
    window has passed them, none is. Each is forgotten once, from a heap, so the cost
    is linear in the requests (a rebuild of the whole set per request was quadratic)."""
    seen = SeenNonces()
    nonces = [new_nonce() for _ in range(12_000)]
    for i, nonce in enumerate(nonces):
        assert seen.first_time(nonce, NOW + i, NOW + i)
    assert len(seen) == len(nonces)
    assert not seen.first_time(nonces[0], NOW, NOW + 12_000)  # a replay, inside it
    later = NOW + 12_000 + REQUEST_WINDOW_MS
    assert seen.first_time(new_nonce(), later, later)
    assert len(seen) == 1
