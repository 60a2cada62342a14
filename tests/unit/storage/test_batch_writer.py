"""The group commit's writer thread: batches run one at a time in the order handed over,
off the loop, and each is answered on the loop with its error."""

from __future__ import annotations

import asyncio
import threading

import pytest

from dht.storage.batch_writer import WriterThread


async def test_batches_run_in_order_off_the_loop_and_land_on_it() -> None:
    writer = WriterThread()
    loop = asyncio.get_running_loop()
    ran: list[tuple[int, str]] = []
    landed: list[tuple[int, BaseException | None, bool]] = []
    all_landed = loop.create_future()

    def write(i: int) -> None:
        ran.append((i, threading.current_thread().name))

    def on_landed(i: int, error: BaseException | None) -> None:
        landed.append((i, error, asyncio.get_running_loop() is loop))
        if len(landed) == 20:
            all_landed.set_result(None)

    try:
        for i in range(20):
            writer.write(lambda i=i: write(i), lambda error, i=i: on_landed(i, error))
        await asyncio.wait_for(all_landed, 10)
    finally:
        writer.shutdown()
    assert ran == [(i, "leveldb-writer") for i in range(20)]
    assert landed == [(i, None, True) for i in range(20)]


async def test_a_failed_write_lands_with_its_error_and_the_next_still_runs() -> None:
    writer = WriterThread()
    loop = asyncio.get_running_loop()
    answers: list[asyncio.Future[BaseException | None]] = [loop.create_future() for _ in range(2)]
    failure = OSError("No space left on device")

    def fail() -> None:
        raise failure

    try:
        writer.write(fail, answers[0].set_result)
        writer.write(lambda: None, answers[1].set_result)
        assert await asyncio.wait_for(asyncio.gather(*answers), 10) == [failure, None]
    finally:
        writer.shutdown()


async def test_shutdown_waits_for_the_write_under_way_and_then_takes_no_more() -> None:
    writer = WriterThread()
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(10)
        finished.append("slow")

    writer.write(slow, lambda error: None)
    assert await asyncio.to_thread(started.wait, 10)
    threading.Timer(0.2, release.set).start()
    writer.shutdown()
    assert finished == ["slow"]
    with pytest.raises(RuntimeError, match="shut down"):
        writer.write(lambda: None, lambda error: None)


def test_a_writer_never_handed_a_batch_shuts_down_without_a_thread() -> None:
    before = threading.active_count()
    WriterThread().shutdown()
    assert threading.active_count() == before
