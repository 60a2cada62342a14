"""Byte streams for fuzzing a live node's replica channel (hypothesis strategies, no I/O).

A stream starts as frames the codec makes (`ReplicaCodec.send`): GET and PUT calls, large
PUTs as their fragments, fragments of several calls interleaved as a true client sends
them, and, for a stranger, an opening the test module supplies (HELLOs the node must
refuse). Then it is mutated a few times at the level of whole frames (one dropped,
duplicated, swapped with another, cut short) or of bytes (one overwritten, mostly in a
frame's header, or random bytes inserted), and cut at random byte boundaries into the
chunks a connection sends one by one. A true peer's stream with no mutation and no
message over the limit is a valid one: every call it makes must be answered.

The handshake is none of this module's business (but for the preface, which a stranger
may send alone): the bytes of a HELLO come from the caller, so the tests keep what
knows the handshake in one place.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import strategies as st

from dht.conformance.http_client import excerpt
from dht.limits import FRAGMENT_BYTES
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.transport.messages import Event, GetRecord, PutRecord, Request
from dht.transport.protocol import PREFACE, ReplicaCodec, Role

# Bytes of a mutation or a cut that land in a frame's first bytes (the preface, length,
# op and call id) one time in two: that is where a byte changes the most.
_HEAD = 24
_MUTATIONS = ["drop", "duplicate", "swap", "truncate", "overwrite", "insert"]


@dataclass(frozen=True)
class Piece:
    """One frame (or the preface, or stray bytes) and what it is, for the report."""

    name: str
    data: bytes


class Stream:
    """What one connection sends: `chunks` in order, each in a write of its own. (Not a
    dataclass: hypothesis would print one field by field, every chunk in full.)"""

    def __init__(
        self,
        pieces: tuple[Piece, ...],
        mutations: tuple[str, ...],
        chunks: tuple[bytes, ...],
        answers_due: int,
    ) -> None:
        self.pieces = pieces
        self.mutations = mutations
        self.chunks = chunks
        self.answers_due = answers_due  # calls to be answered: a valid stream's, else none

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def __repr__(self) -> str:
        names = " ".join(piece.name for piece in self.pieces)
        sizes = [len(chunk) for chunk in self.chunks]
        return (
            f"Stream([{names}], mutations={list(self.mutations)}, chunks={sizes}, "
            f"data={excerpt(self.data, 300)})"
        )


def frames_of(message: Event) -> list[bytes]:
    """The frames a client sends for `message`, each as bytes."""
    codec = ReplicaCodec(Role.CLIENT, 1 << 30)
    return [b"".join(bytes(part) for part in frame) for frame in codec.send(message)]


def call_pieces(request: Request, name: str) -> list[Piece]:
    frames = frames_of(request)
    if len(frames) == 1:
        return [Piece(name, frames[0])]
    return [Piece(f"{name}[{i + 1}/{len(frames)}]", frame) for i, frame in enumerate(frames)]


@dataclass(frozen=True)
class Call:
    pieces: list[Piece]
    over_limit: bool  # the node closes the connection when its fragments pass the limit


@st.composite
def calls(draw: st.DrawFn, key_prefix: bytes, largest_value: int, call_id: int) -> Call:
    """One GET or PUT; a PUT's value is small, a few fragments, or one byte over
    `largest_value`."""
    key = key_prefix + b"%d" % draw(st.integers(min_value=0, max_value=7))
    kind = draw(st.sampled_from(["get", "put", "large put", "oversized put"]))
    if kind == "get":
        return Call(call_pieces(GetRecord(call_id, key), f"GET#{call_id}"), over_limit=False)
    if kind == "put":
        size = draw(st.integers(min_value=0, max_value=200))
    elif kind == "large put":
        # Around the first fragment boundary, and up to a few fragments.
        size = draw(st.integers(min_value=FRAGMENT_BYTES - 40, max_value=3 * FRAGMENT_BYTES))
    else:
        size = largest_value + 1
    value = bytes([draw(st.integers(min_value=0, max_value=255))]) * size
    record = Record.live(version_at(wall_clock_ms()), value)
    pieces = call_pieces(PutRecord(call_id, key, record), f"PUT#{call_id}({size}B)")
    return Call(pieces, over_limit=size > largest_value)


@st.composite
def several_calls(
    draw: st.DrawFn, key_prefix: bytes, largest_value: int, fewest: int, most: int
) -> list[Call]:
    """Calls with call ids of their own, as a client numbers them."""
    count = draw(st.integers(min_value=fewest, max_value=most))
    first = draw(st.integers(min_value=1, max_value=(1 << 32) - 1 - most))
    return [draw(calls(key_prefix, largest_value, first + i)) for i in range(count)]


@st.composite
def interleaved(draw: st.DrawFn, messages: list[Call]) -> list[Piece]:
    """The pieces of all `messages`, interleaved as a client may send them: each
    message's fragments stay in order."""
    pending = [list(call.pieces) for call in messages]
    merged: list[Piece] = []
    while pending:
        index = draw(st.integers(min_value=0, max_value=len(pending) - 1))
        merged.append(pending[index].pop(0))
        if not pending[index]:
            pending.pop(index)
    return merged


def _offset(draw: st.DrawFn, size: int) -> int:
    """A byte offset in [0, size), in the first `_HEAD` bytes one time in two."""
    if size <= 1:
        return 0
    head = st.integers(min_value=0, max_value=min(size, _HEAD) - 1)
    return draw(head | st.integers(min_value=0, max_value=size - 1))


@st.composite
def mutated(draw: st.DrawFn, pieces: list[Piece]) -> tuple[list[Piece], list[str]]:
    """`pieces` after up to three mutations, and what each one did."""
    pieces = list(pieces)
    done: list[str] = []
    for kind in draw(st.lists(st.sampled_from(_MUTATIONS), max_size=3)):
        if not pieces:
            break
        i = draw(st.integers(min_value=0, max_value=len(pieces) - 1))
        piece = pieces[i]
        if kind == "drop":
            del pieces[i]
            done.append(f"dropped {piece.name}")
        elif kind == "duplicate":
            pieces.insert(i, piece)
            done.append(f"duplicated {piece.name}")
        elif kind == "swap":
            j = draw(st.integers(min_value=0, max_value=len(pieces) - 1))
            pieces[i], pieces[j] = pieces[j], pieces[i]
            done.append(f"swapped {piece.name} and {pieces[i].name}")
        elif kind == "truncate":
            cut = draw(st.integers(min_value=0, max_value=max(0, len(piece.data) - 1)))
            pieces[i] = Piece(f"{piece.name}[:{cut}]", piece.data[:cut])
            done.append(f"cut {piece.name} to {cut} bytes")
        elif kind == "overwrite":
            at = _offset(draw, len(piece.data))
            byte = draw(st.integers(min_value=0, max_value=255))
            data = piece.data[:at] + bytes([byte]) + piece.data[at + 1 :]
            pieces[i] = Piece(f"{piece.name}*", data)
            done.append(f"{piece.name}[{at}] = {byte:#04x}")
        else:
            at = _offset(draw, len(piece.data) + 1)
            stray = draw(st.binary(min_size=1, max_size=16))
            pieces[i] = Piece(f"{piece.name}+", piece.data[:at] + stray + piece.data[at:])
            done.append(f"inserted {stray!r} at {piece.name}[{at}]")
    return pieces, done


@st.composite
def cut(draw: st.DrawFn, data: bytes) -> tuple[bytes, ...]:
    """`data` cut into chunks: at a few random offsets, and byte by byte over its first
    bytes one time in four, so every header is seen split at each of its bytes."""
    if len(data) <= 1:
        return (data,) if data else ()
    offsets = set(draw(st.lists(st.integers(min_value=1, max_value=len(data) - 1), max_size=6)))
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        offsets.update(range(1, min(len(data), 2 * _HEAD)))
    bounds = [0, *sorted(offsets), len(data)]
    return tuple(data[start:end] for start, end in itertools.pairwise(bounds))


@st.composite
def finished(draw: st.DrawFn, pieces: list[Piece], answers_due: int) -> Stream:
    """`pieces` mutated and cut; `answers_due` holds only if no mutation was made."""
    pieces, mutations = draw(mutated(pieces))
    chunks = draw(cut(b"".join(piece.data for piece in pieces)))
    return Stream(tuple(pieces), tuple(mutations), chunks, 0 if mutations else answers_due)


@st.composite
def stranger_streams(
    draw: st.DrawFn, hellos: dict[str, bytes], key_prefix: bytes, largest_value: int
) -> Stream:
    """What a stranger sends: an opening (one of `hellos`, which the node must refuse,
    the bare preface, or nothing), calls, maybe another HELLO and stray bytes."""
    refused = st.sampled_from(sorted(hellos)).map(lambda name: Piece(name, hellos[name]))
    opening = draw(refused | st.just(Piece("preface", PREFACE)) | st.none())
    messages = draw(several_calls(key_prefix, largest_value, 0, 4))
    pieces = ([opening] if opening else []) + draw(interleaved(messages))
    for extra in draw(st.lists(refused | st.binary(max_size=32).map(stray), max_size=2)):
        pieces.insert(draw(st.integers(min_value=0, max_value=len(pieces))), extra)
    return draw(finished(pieces, 0))


@st.composite
def peer_streams(draw: st.DrawFn, key_prefix: bytes, largest_value: int) -> Stream:
    """What follows a true peer's handshake: calls, their fragments interleaved. A call
    over the limit closes the connection, and answers queued before it are dropped."""
    messages = draw(several_calls(key_prefix, largest_value, 1, 5))
    due = 0 if any(call.over_limit for call in messages) else len(messages)
    return draw(finished(draw(interleaved(messages)), due))


def stray(data: bytes) -> Piece:
    return Piece(f"bytes({len(data)})", data)
