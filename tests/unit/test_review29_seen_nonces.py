"""Review of issue 29: the nonce cache of internal HTTP requests (dht.replication.proof,
SPEC.md rule 11.4). Each test is a finding, marked xfail(strict) until it is fixed."""

from __future__ import annotations

import time

import pytest

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


@pytest.mark.xfail(
    strict=True,
    reason="review29: SeenNonces.first_time prunes with `until > now` while check_request "
    "refuses only `abs(now - made) > window`: at now == made + window the nonce is "
    "forgotten and its request taken again",
)
def test_a_request_is_never_taken_twice_even_at_the_edge_of_the_window() -> None:
    seen = SeenNonces()
    for _ in range(1100):  # a busy node: past the size at which the cache prunes
        assert seen.first_time(new_nonce(), NOW + 1, NOW + 1)
    header = request_proof(SECRET, "GET", TARGET, NOW, new_nonce(), b"")
    assert check_request(SECRET, header, "GET", TARGET, b"", NOW, seen) is None
    edge = NOW + REQUEST_WINDOW_MS  # still inside the window by check_request's test
    replayed = check_request(SECRET, header, "GET", TARGET, b"", edge, seen)
    assert replayed is not None


@pytest.mark.xfail(
    strict=True,
    reason="review29: past 1024 nonces within the window, SeenNonces.first_time rebuilds "
    "the whole dict on every request: quadratic in the internal request rate",
)
def test_remembering_nonces_costs_time_linear_in_the_requests() -> None:
    """12,000 internal requests inside one window (40 a second for 300 s: a cluster-wide
    range fans out one per peer). Linear is ~10 ms; a rebuild per request is seconds."""
    seen = SeenNonces()
    nonces = [new_nonce() for _ in range(12_000)]
    started = time.perf_counter()
    for i, nonce in enumerate(nonces):
        assert seen.first_time(nonce, NOW + i, NOW + i)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, f"{elapsed:.2f} s for {len(nonces)} requests"
