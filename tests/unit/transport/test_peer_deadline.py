"""A replica call's deadline (dht.transport.peers): `--timeout`, plus time to travel for
a large request, and for a large answer by the bytes of it received. The channel is a
stand-in that says how much of each answer has arrived; the loop's timers are real, at
a scale of a tenth of a second."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from dht.config import NodeConfig
from dht.limits import FRAGMENT_BYTES, SLOWEST_TRANSFER
from dht.model.record import Record
from dht.transport.channel import OnAnswer
from dht.transport.messages import Answer, Failed, RecordFound, Request, Stored, Why
from dht.transport.peer_call import transfer_time
from dht.transport.peers import Peer, PeerError

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
        self.stalled_calls: set[int] = set()  # large requests the peer stopped reading
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

    def stalled(self, call_id: int | None, since: float) -> bool:
        return call_id in self.stalled_calls

    def deadline_missed(self, since: float) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
async def peer(tmp_path: Path) -> AsyncIterator[Peer]:
    """A peer on a stand-in channel, whose call outcomes are kept in `outcomes`."""
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=URLS, self_url=URLS[0], timeout=TIMEOUT)
    outcomes.clear()
    peer = Peer(URLS[1], config, "ring", observe_call=lambda outcome, _: outcomes.append(outcome))
    peer.channel = StandInChannel()  # type: ignore[assignment]
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
    loop = asyncio.get_running_loop()
    asked = loop.time()
    call = peer.get(b"k")
    await asyncio.sleep(0.01)
    channel.dialled()
    channel.arriving[1] = 4 * 1024 * 1024
    dialling = loop.time() - asked  # 10 ms, or more on a loaded machine (it failed at 13)
    result, seconds = await outcome(call)
    assert isinstance(result, PeerError)
    assert dialling + seconds >= TIMEOUT + transfer_time(4 * 1024 * 1024) - EARLY
    assert channel.forgotten == [1]


async def test_a_large_write_waits_for_its_size_at_once(peer: Peer) -> None:
    value = b"v" * (2 * 1024 * 1024)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PeerError):
        await peer.put(b"k", Record.live(7, value))
    deadline = TIMEOUT + transfer_time(len(b"k") + len(value))
    assert deadline - EARLY <= loop.time() - started < deadline + SLACK


LARGE = b"v" * (2 * 1024 * 1024)


async def test_a_large_write_queued_with_others_to_the_replica_waits_for_their_bytes_too(
    peer: Peer,
) -> None:
    """Three large writes to one replica share its connection and its writer: the first
    is not cut off at its own deadline, but once the bytes of all three had their time."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    calls = [peer.put(f"k{index}".encode(), Record.live(7, LARGE)) for index in range(3)]
    with pytest.raises(PeerError):
        await calls[0]
    own = TIMEOUT + transfer_time(len(b"k0") + len(LARGE))
    queued = TIMEOUT + transfer_time(3 * (len(b"k0") + len(LARGE)))
    assert queued - EARLY <= loop.time() - started < queued + SLACK
    assert loop.time() - started > own + TIMEOUT
    await asyncio.gather(*calls, return_exceptions=True)


async def test_a_large_write_the_replica_stopped_reading_fails_at_its_own_deadline(
    peer: Peer,
) -> None:
    """Its fragments wait to leave and none has left for `--timeout`: the replica is
    paused or cut off, and the writes queued with it earn it nothing."""
    channel = channel_of(peer)
    channel.stalled_calls = {1, 2, 3}
    loop = asyncio.get_running_loop()
    started = loop.time()
    calls = [peer.put(f"k{index}".encode(), Record.live(7, LARGE)) for index in range(3)]
    with pytest.raises(PeerError):
        await calls[0]
    own = TIMEOUT + transfer_time(len(b"k0") + len(LARGE))
    assert own - EARLY <= loop.time() - started < own + SLACK
    await asyncio.gather(*calls, return_exceptions=True)


async def test_a_large_write_the_replica_declined_for_its_budget_goes_again_once_another_settles(
    peer: Peer,
) -> None:
    channel = channel_of(peer)
    first = peer.put(b"k1", Record.live(7, LARGE))
    second = peer.put(b"k2", Record.live(7, LARGE))
    channel.answers[1](Failed(1, Why.OVERLOADED, "over its byte budget"))
    await asyncio.sleep(0.01)
    assert not first.done() and len(channel.answers) == 2  # not sent again yet
    channel.answers[2](Stored(2, True))
    assert await second is True
    await asyncio.sleep(0)
    assert len(channel.answers) == 3  # sent again, as call 3
    channel.answers[3](Stored(3, True))
    assert await first is True
    assert outcomes == ["ok", "ok"]


async def test_a_large_write_declined_with_no_other_pending_goes_again_after_the_timeout(
    peer: Peer,
) -> None:
    channel = channel_of(peer)
    loop = asyncio.get_running_loop()
    call = peer.put(b"k", Record.live(7, LARGE))
    started = loop.time()
    channel.answers[1](Failed(1, Why.OVERLOADED, "over its byte budget"))
    for _ in range(100):
        if len(channel.answers) == 2:
            break
        await asyncio.sleep(0.01)
    assert TIMEOUT - EARLY <= loop.time() - started < TIMEOUT + SLACK
    channel.answers[2](Stored(2, True))
    assert await call is True


async def test_a_large_write_declined_again_and_again_fails_at_its_deadline(peer: Peer) -> None:
    """Sent again after each refusal (none other pending: every `--timeout`), until its
    deadline: then the refusal stands, or the time-out if it is on its way again."""
    channel = channel_of(peer)
    loop = asyncio.get_running_loop()
    started = loop.time()
    call = peer.put(b"k", Record.live(7, LARGE))

    async def decline() -> None:
        answered = 0
        while not call.done():
            for call_id in list(channel.answers)[answered:]:
                channel.answers[call_id](Failed(call_id, Why.OVERLOADED, "over its byte budget"))
                answered += 1
            await asyncio.sleep(0.01)

    decliner = asyncio.ensure_future(decline())
    with pytest.raises(PeerError):
        await call
    await decliner
    own = TIMEOUT + transfer_time(len(b"k") + len(LARGE))
    assert own - EARLY <= loop.time() - started < own + SLACK
    assert len(channel.answers) >= 2
    assert outcomes in (["error"], ["timeout"])


async def test_large_writes_all_declined_with_none_other_on_its_way_go_again_after_the_timeout(
    peer: Peer,
) -> None:
    """Two large writes, both declined, and nothing else to the replica on its way: each
    counted the other as pending and waited for it to settle, which neither did before
    its deadline. After `--timeout` one goes again, as one declined alone does; the
    other goes once that one has settled."""
    channel = channel_of(peer)
    loop = asyncio.get_running_loop()
    calls = [peer.put(f"k{index}".encode(), Record.live(7, LARGE)) for index in range(2)]
    started = loop.time()
    channel.answers[1](Failed(1, Why.OVERLOADED, "over its byte budget"))
    channel.answers[2](Failed(2, Why.OVERLOADED, "over its byte budget"))
    for _ in range(100):
        if len(channel.answers) == 3:
            break
        await asyncio.sleep(0.01)
    assert len(channel.answers) == 3, "neither declined write was sent again"
    assert loop.time() - started < TIMEOUT + SLACK
    channel.answers[3](Stored(3, True))  # the one on its way settles: the other goes
    for _ in range(10):
        if len(channel.answers) == 4:
            break
        await asyncio.sleep(0.01)
    channel.answers[4](Stored(4, True))
    assert await asyncio.gather(*calls) == [True, True]
    assert outcomes == ["ok", "ok"]


class ReconnectingChannel(StandInChannel):
    """Call ids are a connection's: `reconnect` drops the connection (its pending calls
    fail) and the next one numbers its calls from 1 again; `forget` takes the call's
    answer away, as `ClientConnection.forget` does."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def dialled(self) -> None:
        waiting, self._waiting = self._waiting, []
        for request_for, on_answer in waiting:
            self._next += 1
            self.answers[self._next] = self._once(self._next, on_answer)
            request_for(self._next)

    def _once(self, call_id: int, on_answer: OnAnswer) -> OnAnswer:
        """An answer takes its call off the connection, as `ClientConnection` does."""

        def answered(answer: Answer | PeerError) -> None:
            if self.answers.get(call_id) is answered:
                del self.answers[call_id]
            on_answer(answer)

        return answered

    def reconnect(self) -> None:
        pending, self.answers = self.answers, {}
        self._next = 0
        for on_answer in pending.values():
            on_answer(PeerError("replica channel closed"))

    def forget(self, call_id: int | None) -> None:
        super().forget(call_id)
        if call_id is not None:
            self.answers.pop(call_id, None)


async def test_a_declined_write_ending_after_a_reconnection_forgets_no_other_call(
    peer: Peer,
) -> None:
    """A declined write's call id was spent when the refusal came; the connection it was
    on closes, the next one gives id 1 to another call. The declined write's deadline
    must not forget that call: its answer would be thrown away and it would time out."""
    channel = ReconnectingChannel()
    peer.channel = channel  # type: ignore[assignment]
    declined = peer.put(b"big", Record.live(7, LARGE))
    own = TIMEOUT + transfer_time(len(b"big") + len(LARGE))
    # Its last fragment left late, behind others: declined after its own transfer time.
    await asyncio.sleep(own - TIMEOUT + 0.05)
    channel.answers[1](Failed(1, Why.OVERLOADED, "over its byte budget"))
    channel.reconnect()
    read = peer.get(b"small")  # call 1 of the new connection
    assert 1 in channel.answers
    await asyncio.sleep(own - (own - TIMEOUT + 0.05) + 0.02)  # the declined one's deadline
    assert declined.done()
    answer = channel.answers.get(1)
    assert answer is not None, "the declined write's deadline forgot the read (call 1)"
    answer(RecordFound(1, Record.live(8, b"v")))
    assert await read == Record.live(8, b"v")
    await asyncio.gather(declined, return_exceptions=True)


async def test_a_declined_write_waiting_to_go_again_fails_when_the_peer_closes(
    peer: Peer,
) -> None:
    """Closing a peer (node stopping, node retired) ends every call to it at once; a
    large write declined and waiting to go again is one of them, and is not sent again
    on the closed channel (which would dial the peer anew)."""
    channel = channel_of(peer)
    call = peer.put(b"k", Record.live(7, LARGE))
    channel.answers[1](Failed(1, Why.OVERLOADED, "over its byte budget"))
    await peer.close()
    await asyncio.sleep(0)
    assert call.done(), "the declined write outlived its peer's close"
    with pytest.raises(PeerError):
        call.result()
    await asyncio.sleep(TIMEOUT + 0.05)
    assert len(channel.answers) == 1  # never sent again
