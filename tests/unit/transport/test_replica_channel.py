"""The replica channel's client end (dht.transport.channel) over a transport whose peer
does not drain it: what a large write that passed its deadline leaves behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dht.limits import FRAGMENT_BYTES
from dht.model.record import Record
from dht.transport.channel import ClientConnection, PeerError
from dht.transport.messages import (
    PROTOCOL_VERSION,
    Answer,
    Challenge,
    Hello,
    Proof,
    PutRecord,
    Request,
)
from dht.transport.protocol import ReplicaCodec, Role
from dht.web.admission import ByteBudget

LIMIT = 1 << 24
VALUE = bytes(range(256)) * 4096  # 1 MiB: 17 fragments


class StuckTransport:
    """Takes `room` bytes, then tells its protocol to stop writing (as asyncio does past
    the high-water mark) until `drain` empties it: a link that still carries small
    calls but holds large ones back."""

    def __init__(self, protocol: ClientConnection, room: int) -> None:
        self._protocol = protocol
        self._room = room
        self._buffered = 0
        self.paused = False
        self.written = bytearray()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def is_closing(self) -> bool:
        return False

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        for part in parts:
            self.written += part
            self._buffered += len(part)
        if self._buffered >= self._room:
            self.fill()

    def fill(self) -> None:
        """Full (of other traffic, if nothing else): the protocol is told to wait."""
        if not self.paused:
            self.paused = True
            self._protocol.pause_writing()

    def drain(self) -> None:
        self._buffered = 0
        if self.paused:
            self.paused = False
            self._protocol.resume_writing()


HELLO = Hello(PROTOCOL_VERSION, "u", "r", b"n" * 16)


def put_for(value: bytes) -> Callable[[int], Request]:
    return lambda call_id: PutRecord(call_id, b"big", Record.live(7, value))


def received_by_a_replica(written: bytes) -> list[object]:
    """The events a replica's codec reads from what the connection wrote."""
    server = ReplicaCodec(Role.SERVER, LIMIT)
    client = ReplicaCodec(Role.CLIENT, LIMIT)
    hello = client.send(HELLO)
    client.receive_data(b"".join(ReplicaCodec(Role.SERVER, LIMIT).send(Challenge(b"", b""))[0]))
    client.next_event()
    proof = client.send(Proof(b""))
    server.receive_data(b"".join(hello[0]) + b"".join(proof[0]) + written)
    events = []
    while (event := server.next_event()) is not None:
        events.append(event)
    return events[2:]


def connect(room: int, budget: ByteBudget | None = None) -> tuple[ClientConnection, StuckTransport]:
    connection = ClientConnection("http://peer", HELLO, None, LIMIT, lambda refusal: None, budget)
    transport = StuckTransport(connection, room)
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


async def test_a_write_whose_deadline_passed_before_any_fragment_left_is_dropped() -> None:
    connection, transport = connect(room=0)
    transport.fill()  # with other traffic already
    answers: list[Answer | PeerError] = []
    call_id = connection.call(put_for(VALUE), answers.append)
    await asyncio.sleep(0)  # the loop iteration that would write it
    connection.forget(call_id)  # its deadline passed (as Peer does)
    transport.drain()
    assert bytes(transport.written) == b"", "fragments of a forgotten write were sent"
    assert answers == []


async def test_a_write_whose_deadline_passed_midway_holds_budget_until_its_last_fragment_left() -> (
    None
):
    """Its first fragments are on the wire, so the replica needs the rest to finish the
    message: they go, and the budget counts the value they pin until the last has."""
    budget = ByteBudget(1 << 30, trim=lambda: None)
    connection, transport = connect(room=3 * FRAGMENT_BYTES, budget=budget)
    call_id = connection.call(put_for(VALUE), lambda answer: None)
    await asyncio.sleep(0)
    assert transport.paused and 0 < len(transport.written) < len(VALUE)
    connection.forget(call_id)
    assert budget.in_flight >= len(VALUE)
    while transport.paused:
        assert budget.in_flight >= len(VALUE)
        transport.drain()
    assert budget.in_flight == 0
    assert received_by_a_replica(bytes(transport.written)) == [put_for(VALUE)(call_id)]


async def test_a_write_answered_in_time_holds_no_budget_on_the_connection() -> None:
    budget = ByteBudget(1 << 30, trim=lambda: None)
    connection, transport = connect(room=3 * FRAGMENT_BYTES, budget=budget)
    connection.call(put_for(VALUE), lambda answer: None)
    await asyncio.sleep(0)
    while transport.paused:
        transport.drain()
    assert budget.in_flight == 0  # the coordinator's share is the only one


async def test_a_connection_lost_midway_gives_back_what_its_forgotten_writes_held() -> None:
    budget = ByteBudget(1 << 30, trim=lambda: None)
    connection, _ = connect(room=3 * FRAGMENT_BYTES, budget=budget)
    call_id = connection.call(put_for(VALUE), lambda answer: None)
    await asyncio.sleep(0)
    connection.forget(call_id)
    assert budget.in_flight > 0
    connection.connection_lost(ConnectionResetError())
    assert budget.in_flight == 0
