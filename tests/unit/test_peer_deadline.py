"""A replica call's deadline (dht.replication.peers): `--timeout`, plus time to travel for
a large request, and for a large answer by the bytes of it received. The channel is a
stand-in that says how much of each answer has arrived; the loop's timers are real, at
a scale of a tenth of a second."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from dht.config import NodeConfig
from dht.model.record import Record
from dht.replication.channel import OnAnswer
from dht.replication.messages import RecordFound, Request
from dht.replication.peer_call import SLOWEST_TRANSFER, transfer_time
from dht.replication.peers import Peer, PeerError
from dht.replication.protocol import FRAGMENT_BYTES

TIMEOUT = 0.2
SLACK = 0.15  # timers firing late on a loaded machine
EARLY = 0.01  # the call was sent a moment before its time is measured
URLS = ("http://127.0.0.1:1", "http://127.0.0.1:2")


class StandInChannel:
    """Takes calls and keeps them; `arriving` says how many bytes of each answer came.
    With `dialling`, requests are made only at `dialled`, as a channel does for the
    calls that wait for its connection."""

    def __init__(self, dialling: bool = False) -> None:
        self.answers: dict[int, OnAnswer] = {}
        self.arriving: dict[int, int] = {}
        self.forgotten: list[int | None] = []
        self._waiting: list[tuple[Callable[[int], Request], OnAnswer]] = []
        self._dialling = dialling

    def call(self, request_for: Callable[[int], Request], on_answer: OnAnswer) -> None:
        self._waiting.append((request_for, on_answer))
        if not self._dialling:
            self.dialled()

    def dialled(self) -> None:
        waiting, self._waiting = self._waiting, []
        for request_for, on_answer in waiting:
            call_id = len(self.answers) + 1
            self.answers[call_id] = on_answer
            request_for(call_id)

    def received(self, call_id: int | None) -> int:
        return 0 if call_id is None else self.arriving.get(call_id, 0)

    def forget(self, call_id: int | None) -> None:
        self.forgotten.append(call_id)

    def deadline_missed(self, since: float) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
async def peer(tmp_path: Path) -> AsyncIterator[Peer]:
    """A peer on a stand-in channel, whose call outcomes are kept in `outcomes`."""
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=URLS, self_url=URLS[0], timeout=TIMEOUT)
    peer = Peer(URLS[1], config, "ring")
    peer.channel = StandInChannel()  # type: ignore[assignment]
    outcomes.clear()
    peer.observe_call = lambda outcome, seconds: outcomes.append(outcome)
    yield peer
    await peer.close()


outcomes: list[str] = []


def channel_of(peer: Peer) -> StandInChannel:
    assert isinstance(peer.channel, StandInChannel)
    return peer.channel


async def outcome(call: asyncio.Future[Record | None]) -> tuple[object, float]:
    """The call's result or error, and the seconds it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        result: object = await call
    except PeerError as error:
        result = error
    return result, loop.time() - started


async def test_a_small_read_fails_at_the_plain_deadline(peer: Peer) -> None:
    result, seconds = await outcome(peer.get(b"k"))
    assert isinstance(result, PeerError)
    assert TIMEOUT - EARLY <= seconds < TIMEOUT + SLACK


async def test_a_read_whose_answer_keeps_coming_is_not_cut_off_at_the_plain_deadline(
    peer: Peer,
) -> None:
    """Bytes at twice the rate `transfer_time` assumes, for three plain deadlines."""
    channel = channel_of(peer)
    record = Record.live(7, b"v" * 100)
    call = peer.get(b"k")
    rate = 2 * SLOWEST_TRANSFER

    async def answer_slowly() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (elapsed := loop.time() - started) < 3 * TIMEOUT:
            channel.arriving[1] = int(elapsed * rate)
            await asyncio.sleep(0.01)
        channel.answers[1](RecordFound(1, record))

    sender = asyncio.ensure_future(answer_slowly())
    result, seconds = await outcome(call)
    await sender
    assert result == record
    assert seconds >= 3 * TIMEOUT
    assert outcomes == ["ok"]


async def test_a_read_whose_answer_stops_coming_fails_once_the_deadline_passes_its_bytes(
    peer: Peer,
) -> None:
    """4 MiB came, then nothing: the call gets the time those bytes earn, and no more."""
    channel = channel_of(peer)
    call = peer.get(b"k")
    channel.arriving[1] = 4 * 1024 * 1024
    result, seconds = await outcome(call)
    assert isinstance(result, PeerError)
    deadline = TIMEOUT + transfer_time(4 * 1024 * 1024)
    assert deadline - EARLY <= seconds < deadline + SLACK
    assert channel.forgotten == [1]
    assert outcomes == ["timeout"]


async def test_one_fragment_of_an_answer_earns_no_time(peer: Peer) -> None:
    """As a request of one fragment is a plain call: an answer that has not crossed more
    than one fragment by the deadline is late."""
    channel = channel_of(peer)
    call = peer.get(b"k")
    channel.arriving[1] = FRAGMENT_BYTES
    result, seconds = await outcome(call)
    assert isinstance(result, PeerError)
    assert TIMEOUT - EARLY <= seconds < TIMEOUT + SLACK


async def test_a_read_sent_once_the_channel_is_dialled_has_its_bytes_counted_too(
    peer: Peer,
) -> None:
    """The call learns its id when its request is made, not when it is asked for."""
    channel = StandInChannel(dialling=True)
    peer.channel = channel  # type: ignore[assignment]
    call = peer.get(b"k")
    await asyncio.sleep(0.01)
    channel.dialled()
    channel.arriving[1] = 4 * 1024 * 1024
    result, seconds = await outcome(call)
    assert isinstance(result, PeerError)
    assert seconds >= TIMEOUT + transfer_time(4 * 1024 * 1024) - EARLY
    assert channel.forgotten == [1]


async def test_a_large_write_waits_for_its_size_at_once(peer: Peer) -> None:
    value = b"v" * (2 * 1024 * 1024)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PeerError):
        await peer.put(b"k", Record.live(7, value))
    deadline = TIMEOUT + transfer_time(len(b"k") + len(value))
    assert deadline - EARLY <= loop.time() - started < deadline + SLACK
