"""The replica channel's proof of the cluster secret (dht.transport.proof): the secret
never travels, and no proof is worth anything outside its own handshake."""

from __future__ import annotations

from dht.transport.proof import NONCE_BYTES, PROOF_BYTES, Side, new_nonce, proof, proves

CLIENT_NONCE, SERVER_NONCE = b"c" * NONCE_BYTES, b"s" * NONCE_BYTES
SENDER, RING = "http://10.0.0.1:8080", "0123456789abcdef"


def made(secret: str | None, side: Side = Side.CLIENT, **changed: object) -> bytes:
    parts: dict[str, object] = {
        "client_nonce": CLIENT_NONCE,
        "server_nonce": SERVER_NONCE,
        "sender": SENDER,
        "ring": RING,
    } | changed
    return proof(secret, side, **parts)  # type: ignore[arg-type]


def test_the_same_secret_and_handshake_make_the_same_proof() -> None:
    assert proves(made("s3cret"), made("s3cret"))
    assert len(made("s3cret")) == PROOF_BYTES


def test_the_proof_does_not_contain_the_secret() -> None:
    assert b"s3cret" not in made("s3cret")


def test_another_secret_makes_another_proof() -> None:
    assert not proves(made("s3cret"), made("guess"))
    assert not proves(made("s3cret"), made(None))


def test_without_a_secret_both_ends_agree_on_the_empty_key() -> None:
    assert proves(made(None), made(""))


def test_a_proof_is_bound_to_both_nonces_the_side_the_sender_and_the_ring() -> None:
    """So a captured proof cannot be replayed on a new connection (the other end's nonce
    is new), sent back as the other side's, or moved to another HELLO."""
    reference = made("s3cret")
    for other in (
        made("s3cret", server_nonce=b"t" * NONCE_BYTES),
        made("s3cret", client_nonce=b"d" * NONCE_BYTES),
        made("s3cret", Side.SERVER),
        made("s3cret", sender="http://10.0.0.2:8080"),
        made("s3cret", ring="fedcba9876543210"),
    ):
        assert not proves(reference, other)


def test_fields_cannot_be_shifted_into_one_another() -> None:
    """Each field is length-prefixed: moving bytes from one to the next changes it."""
    assert not proves(
        made("s3cret", sender="http://a", ring="bc"), made("s3cret", sender="http://ab", ring="c")
    )


def test_nonces_are_fresh() -> None:
    assert len({new_nonce() for _ in range(100)}) == 100
    assert len(new_nonce()) == NONCE_BYTES
