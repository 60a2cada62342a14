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
import hmac
import os
import struct

NONCE_BYTES = 16
PROOF_BYTES = hashlib.sha256().digest_size

_LENGTH = struct.Struct(">H")


class Side(enum.Enum):
    CLIENT = b"dht replica client"
    SERVER = b"dht replica server"


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def proof(
    secret: str | None,
    side: Side,
    client_nonce: bytes,
    server_nonce: bytes,
    sender: str,
    ring: str,
) -> bytes:
    """What `side` sends to prove it knows `secret`, for this handshake."""
    parts = (side.value, client_nonce, server_nonce, sender.encode(), ring.encode())
    message = b"".join(_LENGTH.pack(len(part)) + part for part in parts)
    return hmac.new((secret or "").encode(), message, hashlib.sha256).digest()


def proves(expected: bytes, offered: bytes) -> bool:
    """Whether `offered` is the proof expected, compared in constant time."""
    return hmac.compare_digest(expected, offered)


# -- internal HTTP requests --------------------------------------------------------------
#
# An internal HTTP request (the range stream, anti-entropy, a membership step) proves
# the secret the same way, in one message: its `PROOF_HEADER` carries the time it was
# made, a fresh nonce and an HMAC over both, the method, the target (path and query, as
# sent) and a digest of the body. The receiver takes it within `REQUEST_WINDOW_MS` of its
# own clock and once only (`SeenNonces`), so a captured request can be neither replayed
# nor changed, and shows nothing of the secret.

# How far a request's time may be from the receiver's clock, either way.
REQUEST_WINDOW_MS = 300_000


def request_proof(
    secret: str | None, method: str, target: str, made_ms: int, nonce: bytes, body: bytes
) -> str:
    """The `PROOF_HEADER` value of one request made at `made_ms` (Unix ms)."""
    return f"{made_ms}.{nonce.hex()}.{_request_mac(secret, method, target, made_ms, nonce, body)}"


def _request_mac(
    secret: str | None, method: str, target: str, made_ms: int, nonce: bytes, body: bytes
) -> str:
    parts = (
        b"dht internal request",
        method.upper().encode(),
        target.encode(),
        str(made_ms).encode(),
        nonce,
        hashlib.sha256(body).digest(),
    )
    message = b"".join(_LENGTH.pack(len(part)) + part for part in parts)
    return hmac.new((secret or "").encode(), message, hashlib.sha256).hexdigest()


class SeenNonces:
    """The nonces of the requests taken within the window, each forgotten once its
    request's time is out of the window: a replay inside the window is refused by its
    nonce, one after it by its time. Only proven requests are remembered, so a stranger
    cannot fill it."""

    def __init__(self, window_ms: int = REQUEST_WINDOW_MS) -> None:
        self._window = window_ms
        self._until: dict[bytes, int] = {}  # nonce -> when it may be forgotten (Unix ms)

    def __len__(self) -> int:
        return len(self._until)

    def first_time(self, nonce: bytes, made_ms: int, now_ms: int) -> bool:
        """Whether `nonce` is new (it is remembered from now on)."""
        if len(self._until) > 1024:
            self._until = {seen: until for seen, until in self._until.items() if until > now_ms}
        if nonce in self._until:
            return False
        self._until[nonce] = made_ms + self._window
        return True


def check_request(
    secret: str,
    header: str,
    method: str,
    target: str,
    body: bytes,
    now_ms: int,
    seen: SeenNonces,
) -> str | None:
    """None if `header` proves `secret` for this request, else why not."""
    made, _, rest = header.partition(".")
    nonce_hex, _, mac = rest.partition(".")
    try:
        made_ms = int(made)
        nonce = bytes.fromhex(nonce_hex)
    except ValueError:
        return "no proof of the cluster secret"
    if len(nonce) < NONCE_BYTES:
        return "no proof of the cluster secret"
    expected = _request_mac(secret, method, target, made_ms, nonce, body)
    if not hmac.compare_digest(expected.encode(), mac.encode("ascii", "replace")):
        return "a wrong proof of the cluster secret"
    if abs(now_ms - made_ms) > REQUEST_WINDOW_MS:
        return (
            f"a proof made {abs(now_ms - made_ms) / 1000:.0f} s from this node's clock, "
            f"over the {REQUEST_WINDOW_MS // 1000} s allowed"
        )
    if not seen.first_time(nonce, made_ms, now_ms):
        return "a proof seen before (a replay)"
    return None
