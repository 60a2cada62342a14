"""The tally of one fan-out (`dht.coordination.tally`): when an answer counts, and when
the request is decided."""

from __future__ import annotations

import asyncio

from dht.coordination.tally import Counters, Tally
from dht.transport.peers import PeerError

NODES = ["http://a", "http://b", "http://c"]


def answered(value: object) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def test_an_answer_already_known_is_counted_when_watched() -> None:
    tally: Tally[object] = Tally([(NODES, 2)], Counters())
    tally.watch(NODES[0], answered(True))
    assert tally.answers == {NODES[0]: True} and not tally.pending
    tally.watch(NODES[1], answered(False))
    assert tally.is_decided and tally.quorum_met
    await tally.decision()  # decided already: returns at once


async def test_a_call_refused_before_it_was_sent_is_a_failure_at_once() -> None:
    tally: Tally[object] = Tally([(NODES, 2)], Counters())
    refused: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    refused.set_exception(PeerError("http://a: circuit open"))
    tally.watch(NODES[0], refused)
    running: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    tally.watch(NODES[1], running)
    assert tally.failures == 1 and not tally.is_decided
    running.set_exception(PeerError("http://b: reset"))
    await tally.decision()  # two of three failed: 2 of 3 is out of reach
    assert not tally.quorum_met and tally.failures == 2


async def test_an_accept_that_refuses_an_answer_known_at_once_counts_a_failure() -> None:
    def refuse(url: str, value: object) -> None:
        raise PeerError(f"{url}: version too far ahead")

    tally: Tally[object] = Tally([(NODES, 1)], Counters())
    tally.watch(NODES[0], answered(True), refuse)
    assert tally.failures == 1 and tally.answers == {}


async def test_late_answers_go_to_the_late_callback_once_decided() -> None:
    tally: Tally[object] = Tally([(NODES, 1)], Counters(), keeps_late=True)
    tally.watch(NODES[0], answered("first"))
    later: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    tally.watch(NODES[1], later)
    seen: list[tuple[str, object]] = []
    tally.on_late(lambda url, value: seen.append((url, value)))
    later.set_result("second")
    await asyncio.sleep(0)
    assert tally.answers == {NODES[0]: "first"} and seen == [(NODES[1], "second")]
