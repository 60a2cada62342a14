"""Benchmark: the CPU cost of one replica call, both ends in one process.

A client (`dht.transport.peers.Peer`: breaker, deadline, replica channel) calls a server end
(`ServerConnection` over `InternalApi` on a real LevelDB) across loopback TCP, with
`--in-flight` calls outstanding at a time, on uvloop. CPU time (user + system) divided by
calls is what one replica write or read costs a cluster, sender and receiver together.
For reference, the same run makes the same number of aiohttp HTTP requests to an aiohttp
server that answers 200, which is what a replica call cost before the channel.

    .venv/bin/python -m bench.replica_call --calls 50000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from dht.config import NodeConfig
from dht.limits import MESSAGE_OVERHEAD
from dht.model.clock import HybridClock
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.model.topology import STABLE, TopologyState
from dht.storage.membership import Membership
from dht.storage.store import Storage
from dht.transport.channel_server import ServerConnection
from dht.transport.local_replica import LocalReplica
from dht.transport.peers import Peer

HOST = "127.0.0.1"


async def measure(calls: int, in_flight: int, call: Callable[[int], Awaitable[object]]) -> float:
    """CPU seconds per call for `calls` calls, `in_flight` at a time."""
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < calls:
            index = next_index
            next_index += 1
            await call(index)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return (time.process_time() - started) / calls


async def channel_costs(
    calls: int, in_flight: int, value: bytes, data_dir: Path
) -> tuple[float, float]:
    storage = Storage(data_dir)
    clock = HybridClock()
    cluster = (f"http://{HOST}:1", f"http://{HOST}:2")
    config = NodeConfig(
        port=0, data_dir=data_dir, cluster=cluster, self_url=cluster[0], timeout=5.0
    )
    membership = Membership(data_dir, TopologyState(0, STABLE, cluster), config.vnodes)
    service = LocalReplica(storage, clock, None, membership)
    live: set[ServerConnection] = set()
    limit = config.max_value_bytes + config.max_key_bytes + MESSAGE_OVERHEAD
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ServerConnection(service, limit, live, RateLimitedLog(logging.getLogger())), HOST, 0
    )
    port = server.sockets[0].getsockname()[1]
    routed = NodeConfig(
        port=0,
        data_dir=data_dir,
        cluster=cluster,
        self_url=cluster[0],
        timeout=5.0,
        routes=((cluster[1], f"http://{HOST}:{port}"),),
    )
    peer = Peer(cluster[1], routed, membership.identity)
    try:
        await peer.put(b"warm", Record.live(clock.now(), value))
        put = await measure(
            calls, in_flight, lambda i: peer.put(b"k%d" % i, Record.live(clock.now(), value))
        )
        get = await measure(calls, in_flight, lambda i: peer.get(b"k%d" % i))
    finally:
        await peer.close()
        server.close()
        storage.close()
    return put, get


async def http_cost(calls: int, in_flight: int, value: bytes) -> float:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"")

    app = web.Application()
    app.router.add_put("/internal", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession(f"http://{HOST}:{port}") as session:

        async def call(index: int) -> None:
            async with session.put("/internal", params={"id": f"k{index}"}, data=value) as r:
                await r.read()

        await call(0)
        cost = await measure(calls, in_flight, call)
    await runner.cleanup()
    return cost


async def main_async(args: argparse.Namespace) -> None:
    value = b"v" * args.value_bytes
    with tempfile.TemporaryDirectory() as tmp:
        put, get = await channel_costs(args.calls, args.in_flight, value, Path(tmp))
    http = await http_cost(args.calls, args.in_flight, value)
    print(
        f"{args.calls} calls, {args.in_flight} in flight, {args.value_bytes}-byte values, "
        "CPU of both ends per call:"
    )
    print("| call | CPU per call |")
    print("| --- | --- |")
    print(f"| replica channel PUT (LevelDB write included) | {put * 1e6:.1f} µs |")
    print(f"| replica channel GET (LevelDB read included) | {get * 1e6:.1f} µs |")
    print(f"| aiohttp HTTP request + response (empty handler) | {http * 1e6:.1f} µs |")
    print(
        f"target <= 40 µs: PUT {'met' if put <= 40e-6 else 'missed'}, "
        f"GET {'met' if get <= 40e-6 else 'missed'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--value-bytes", type=int, default=100)
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
