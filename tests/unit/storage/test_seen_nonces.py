"""The nonce cache of internal HTTP requests (dht.transport.proof, SPEC.md rule 11.4):
what the review of issue 29 found, each fixed; and its nonces kept across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.limits import REQUEST_WINDOW_MS
from dht.storage.disk import DiskFull
from dht.storage.store import Storage
from dht.transport.proof import SeenNonces, check_request, new_nonce, request_proof

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


class MemoryStore:
    """A NonceStore that outlives its SeenNonces, as the node's storage does."""

    def __init__(self) -> None:
        self.kept: dict[bytes, int] = {}

    def remember_nonce(self, nonce: bytes, forget_at_ms: int) -> None:
        self.kept[nonce] = forget_at_ms

    def forget_nonces(self, nonces: list[bytes]) -> None:
        for nonce in nonces:
            del self.kept[nonce]

    def pairs(self) -> list[tuple[int, bytes]]:
        return [(at, nonce) for nonce, at in self.kept.items()]


def test_a_request_taken_before_a_restart_is_refused_after_it() -> None:
    store = MemoryStore()
    header = request_proof(SECRET, RECEIVER, "GET", TARGET, NOW, new_nonce(), b"")
    before = SeenNonces(store=store)
    assert check_request(SECRET, RECEIVER, header, "GET", TARGET, b"", NOW, before) is None
    after = SeenNonces(store=store, kept=store.pairs())  # the node started again
    replayed = check_request(SECRET, RECEIVER, header, "GET", TARGET, b"", NOW + 1, after)
    assert replayed is not None and "replay" in replayed


def test_kept_nonces_are_forgotten_on_disk_once_out_of_the_window() -> None:
    store = MemoryStore()
    seen = SeenNonces(store=store)
    old = new_nonce()
    assert seen.first_time(old, NOW, NOW)
    restarted = SeenNonces(store=store, kept=store.pairs())
    later = NOW + REQUEST_WINDOW_MS
    assert restarted.first_time(new_nonce(), later, later)
    assert old not in store.kept and len(store.kept) == 1 and len(restarted) == 1


def test_a_nonce_the_store_cannot_keep_is_not_taken() -> None:
    class FullStore(MemoryStore):
        def remember_nonce(self, nonce: bytes, forget_at_ms: int) -> None:
            raise DiskFull("no space")

    seen = SeenNonces(store=FullStore())
    nonce = new_nonce()
    with pytest.raises(DiskFull):
        seen.first_time(nonce, NOW, NOW)
    assert len(seen) == 0


def test_storage_keeps_the_nonces_across_a_reopen(tmp_path: Path) -> None:
    storage = Storage(tmp_path, durability="none")
    first, second = new_nonce(), new_nonce()
    storage.remember_nonce(first, NOW)
    storage.remember_nonce(second, NOW + 1)
    storage.forget_nonces([first])
    storage.close()
    reopened = Storage(tmp_path, durability="none")
    try:
        assert reopened.kept_nonces() == [(NOW + 1, second)]
    finally:
        reopened.close()
