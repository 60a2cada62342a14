"""A peer's local range stream as the cluster-wide range reads it (`Peer.open_scan`,
SPEC.md rule 11.3), from a fake peer: a tiny aiohttp server in this process whose frame
lengths no node would send."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from dht.config import NodeConfig
from dht.model.record import Record
from dht.transport.peers import Peer, PeerError
from dht.transport.wire import RECORDS_PATH, encode_frame

HOST = "127.0.0.1"
MAX_VALUE = 1024 * 1024
LARGEST_LENGTH = (1 << 32) - 1  # 4 GiB: what a u32 length may claim


def frame_header(key_length: int, key: bytes, record_length: int | None) -> bytes:
    head = struct.pack(">I", key_length) + key
    return head if record_length is None else head + struct.pack(">I", record_length)


@contextlib.asynccontextmanager
async def fake_peer(stream: bytes) -> AsyncIterator[str]:
    """Serves `stream` as a range stream's start, then waits (with a bound) for the
    reader to give up; yields its URL."""
    finished = asyncio.Event()

    async def records(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(stream)
        # The reader must not wait for the body the stream promised: none comes.
        async with asyncio.timeout(10):
            await finished.wait()
        return response

    app = web.Application()
    app.router.add_get(RECORDS_PATH, records)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://{HOST}:{port}"
    finally:
        finished.set()
        await runner.cleanup()


def peer_at(url: str, tmp_path: Path) -> Peer:
    config = NodeConfig(
        port=0,
        data_dir=tmp_path,
        cluster=("http://127.0.0.1:1", url),
        self_url="http://127.0.0.1:1",
        timeout=5.0,
        max_value_bytes=MAX_VALUE,
        max_key_bytes=1024,
    )
    return Peer(url, config, "0123456789abcdef")


@pytest.mark.parametrize(
    ("first", "what"),
    [
        pytest.param(frame_header(1, b"k", LARGEST_LENGTH), "record", id="a 4 GiB record"),
        pytest.param(
            frame_header(1, b"k", MAX_VALUE + 65), "record", id="a record one value too large"
        ),
        pytest.param(frame_header(LARGEST_LENGTH, b"", None), "key", id="a 4 GiB key"),
    ],
)
async def test_a_length_no_record_can_have_fails_the_source_before_anything_is_read(
    tmp_path: Path, first: bytes, what: str
) -> None:
    good = encode_frame(b"a", Record.live(1, b"v"))
    async with fake_peer(good + first) as url:
        peer = peer_at(url, tmp_path)
        try:
            stream = await peer.open_scan(b"a", None)
            assert await anext(stream) == (b"a", Record.live(1, b"v"))
            with pytest.raises(PeerError, match=f"a {what} of [0-9]+ bytes, over the largest"):
                await anext(stream)
        finally:
            await peer.close()


async def test_a_record_of_the_largest_value_still_passes(tmp_path: Path) -> None:
    largest = encode_frame(b"k", Record.live(1, b"v" * MAX_VALUE))
    async with fake_peer(largest) as url:
        peer = peer_at(url, tmp_path)
        try:
            stream = await peer.open_scan(b"a", None)
            key, record = await anext(stream)
            assert (key, len(record.value)) == (b"k", MAX_VALUE)
        finally:
            await peer.close()
