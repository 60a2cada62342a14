"""The replica channel's proof of the cluster secret, which never travels (pure).

Both ends prove they know the secret without sending it: the client's HELLO carries a
fresh random nonce, the server answers CHALLENGE with a nonce of its own and its proof,
and the client answers with its proof. A proof is an HMAC-SHA256, keyed by the secret,
over both nonces, who proves it (client or server, so neither proof can be sent back as
the other), and the sender's URL and ring identity from the HELLO (so a proof made for
one HELLO is worth nothing for another). A captured handshake shows two nonces and two
digests: nothing of the secret, and nothing a replay can use, since the other end's
nonce is new on every connection.

Without a secret (the course's open default for a lone node) the key is empty: the
proofs still match between two nodes that both have none, and a node with a secret
never takes a peer without it, nor the other way round.
"""

from __future__ import annotations

import enum
import hashlib
import heapq
import hmac
import os
import struct
from collections.abc import Callable, Iterable
from typing import Protocol

from dht.limits import REQUEST_WINDOW_MS

NONCE_BYTES = 16
PROOF_BYTES = hashlib.sha256().digest_size

_LENGTH = struct.Struct(">H")


class Side(enum.Enum):
    CLIENT = b"dht replica client"
    SERVER = b"dht replica server"


def new_nonce(random_bytes: Callable[[int], bytes] = os.urandom) -> bytes:
    """A handshake's or a request's nonce; a node's parts draw it from their `Machine`."""
    return random_bytes(NONCE_BYTES)


def proof(
    secret: str | None,
    side: Side,
    client_nonce: bytes,
    server_nonce: bytes,
    sender: str,
    ring: str,
) -> bytes:
    """What `side` sends to prove it knows `secret`, for this handshake."""
    return _mac(secret, (side.value, client_nonce, server_nonce, sender.encode(), ring.encode()))


def _mac(secret: str | None, parts: tuple[bytes, ...]) -> bytes:
    """HMAC-SHA256 keyed by `secret` (empty without one) over `parts`, each prefixed by
    its length, so no two lists of parts give the same message."""
    message = b"".join(_LENGTH.pack(len(part)) + part for part in parts)
    return hmac.new((secret or "").encode(), message, hashlib.sha256).digest()


def proves(expected: bytes, offered: bytes) -> bool:
    """Whether `offered` is the proof expected, compared in constant time."""
    return hmac.compare_digest(expected, offered)


# -- internal HTTP requests --------------------------------------------------------------
#
# An internal HTTP request (the range stream, anti-entropy, a membership step) proves
# the secret the same way, in one message: its `PROOF_HEADER` carries the time it was
# made, a fresh nonce and an HMAC over both, the receiving node's URL (so a request
# captured on its way to one node is worth nothing at another), the method, the target
# (path and query, as sent) and a digest of the body. The receiver takes it within
# `REQUEST_WINDOW_MS` of its own clock and once only (`SeenNonces`, kept on disk, so a
# restart forgets none), so a captured request can be neither replayed nor changed, and
# shows nothing of the secret. Its form and time are judged before the body is read
# (`unfit_proof`), the MAC after.


def request_proof(
    secret: str | None,
    receiver: str,
    method: str,
    target: str,
    made_ms: int,
    nonce: bytes,
    body: bytes,
) -> str:
    """The `PROOF_HEADER` value of one request to the node `receiver` (its --cluster
    URL) made at `made_ms` (Unix ms)."""
    mac = _request_mac(secret, receiver, method, target, made_ms, nonce, body)
    return f"{made_ms}.{nonce.hex()}.{mac}"


def _request_mac(
    secret: str | None,
    receiver: str,
    method: str,
    target: str,
    made_ms: int,
    nonce: bytes,
    body: bytes,
) -> str:
    parts = (
        b"dht internal request",
        receiver.encode(),
        method.upper().encode(),
        target.encode(),
        str(made_ms).encode(),
        nonce,
        hashlib.sha256(body).digest(),
    )
    return _mac(secret, parts).hex()


class NonceStore(Protocol):
    """Where `SeenNonces` keeps its nonces across restarts (the node's storage)."""

    def remember_nonce(self, nonce: bytes, forget_at_ms: int) -> None:
        """Durable once it returns, as a record is; raises if it cannot be kept."""

    def forget_nonces(self, nonces: list[bytes]) -> None: ...


class SeenNonces:
    """The nonces of the requests taken within the window, each forgotten once its
    request's time is out of the window: a replay inside the window is refused by its
    nonce, one after it by its time (check_request refuses a request made `window` or
    more from now, and a nonce is kept until exactly then). Only proven requests are
    remembered, so a stranger cannot fill it; each nonce is forgotten once, from a heap
    ordered by when it may be (found by review: rebuilding the whole set per request
    was quadratic in the request rate).

    With a `store`, a nonce is saved before its request is taken, and `kept` (what the
    store held at start) is remembered again: a restart inside the window forgets no
    request taken before it. Not a bound on the proofs' time instead (none made before
    this node's start, say): a peer's clock may be behind this one's, and its fresh
    requests would be refused for as long."""

    def __init__(
        self,
        window_ms: int = REQUEST_WINDOW_MS,
        store: NonceStore | None = None,
        kept: Iterable[tuple[int, bytes]] = (),
    ) -> None:
        """`kept`: (when to forget, nonce) pairs, as `store` saved them."""
        self._window = window_ms
        self._store = store
        self._expiry = list(kept)  # a heap: (when to forget, nonce)
        heapq.heapify(self._expiry)
        self._seen = {nonce for _, nonce in self._expiry}

    def __len__(self) -> int:
        return len(self._seen)

    def first_time(self, nonce: bytes, made_ms: int, now_ms: int) -> bool:
        """Whether `nonce` is new (it is remembered from now on). Raises what the store
        raises, having remembered nothing."""
        expiry = self._expiry
        forgotten = []
        while expiry and expiry[0][0] <= now_ms:
            forgotten.append(heapq.heappop(expiry)[1])
            self._seen.discard(forgotten[-1])
        if forgotten and self._store is not None:
            self._store.forget_nonces(forgotten)
        if nonce in self._seen:
            return False
        forget_at = made_ms + self._window
        if self._store is not None:
            self._store.remember_nonce(nonce, forget_at)
        self._seen.add(nonce)
        heapq.heappush(expiry, (forget_at, nonce))
        return True


def unfit_proof(header: str, now_ms: int) -> str | None:
    """Why `header` cannot be a proof made now, judged from the header alone (before a
    body is read for it); None if it may be one."""
    judged = _judged(header, now_ms)
    return judged if isinstance(judged, str) else None


def _judged(header: str, now_ms: int) -> tuple[int, bytes, str] | str:
    """The time, nonce and MAC of a proof header made within the window of `now_ms`,
    or why it is none."""
    made, _, rest = header.partition(".")
    nonce_hex, _, mac = rest.partition(".")
    try:
        made_ms = int(made)
        nonce = bytes.fromhex(nonce_hex)
    except ValueError:
        return "no proof of the cluster secret"
    if len(nonce) < NONCE_BYTES or not mac:
        return "no proof of the cluster secret"
    if abs(now_ms - made_ms) >= REQUEST_WINDOW_MS:
        return (
            f"a proof made {abs(now_ms - made_ms) / 1000:.0f} s from this node's clock, "
            f"over the {REQUEST_WINDOW_MS // 1000} s allowed"
        )
    return made_ms, nonce, mac


def check_request(
    secret: str,
    receiver: str,
    header: str,
    method: str,
    target: str,
    body: bytes,
    now_ms: int,
    seen: SeenNonces,
) -> str | None:
    """None if `header` proves `secret` for this request to `receiver` (this node's
    URL), else why not."""
    judged = _judged(header, now_ms)
    if isinstance(judged, str):
        return judged
    made_ms, nonce, mac = judged
    expected = _request_mac(secret, receiver, method, target, made_ms, nonce, body)
    if not hmac.compare_digest(expected.encode(), mac.encode("ascii", "replace")):
        return "a wrong proof of the cluster secret"
    if not seen.first_time(nonce, made_ms, now_ms):
        return "a proof seen before (a replay)"
    return None
