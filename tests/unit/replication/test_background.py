"""OwnedTask (dht/replication/background.py): the loops of hints, anti-entropy and the
tombstone collector end with the node, and a loop that died is reported, not raised."""

from __future__ import annotations

import asyncio

import pytest

from dht.replication.background import OwnedTask


async def test_close_cancels_a_running_loop_and_waits_for_it() -> None:
    ended = asyncio.Event()

    async def run() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.set()

    task = OwnedTask("sleeper", run)
    task.start()
    await asyncio.sleep(0)
    await task.close()
    assert ended.is_set()


async def test_a_loop_that_died_is_logged_at_close_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        raise RuntimeError("boom")

    task = OwnedTask("faulty", run)
    task.start()
    await asyncio.sleep(0)
    await task.close()
    assert "faulty had stopped with an error" in caplog.text
    assert "boom" in caplog.text


async def test_close_before_start_does_nothing() -> None:
    async def run() -> None:
        raise AssertionError("never started")

    await OwnedTask("idle", run).close()
