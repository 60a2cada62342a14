"""The replica channel's dial (dht.transport.channel) closed while its handshake is
under way leaves no connection open."""

from __future__ import annotations

import asyncio

from dht.transport.channel import PeerError, ReplicaChannel
from dht.transport.messages import PROTOCOL_VERSION, Answer, GetRecord, Hello

HELLO = Hello(PROTOCOL_VERSION, "http://127.0.0.1:1", "ring", b"")


async def test_a_channel_closed_during_its_handshake_closes_the_connection_it_opened() -> None:
    heard = asyncio.Event()
    ended = asyncio.Event()

    async def silent_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads the HELLO and never answers it (a peer paused, or a slow link)."""
        await reader.read(1)
        heard.set()
        try:
            while await reader.read(65536):
                pass
        except OSError:
            pass  # reset: the other end aborted
        ended.set()  # the other end closed
        writer.close()

    server = await asyncio.start_server(silent_peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    channel = ReplicaChannel(url, url, HELLO, "secret", 1 << 20, timeout=30.0)
    answers: list[Answer | PeerError] = []
    try:
        channel.call(lambda call_id: GetRecord(call_id, b"k"), answers.append)
        await asyncio.wait_for(heard.wait(), 5)
        await channel.close()  # the peer leaves the membership, or the node stops
        assert len(answers) == 1 and isinstance(answers[0], PeerError)
        await asyncio.wait_for(ended.wait(), 2)  # the connection went with the channel
    finally:
        server.close()
