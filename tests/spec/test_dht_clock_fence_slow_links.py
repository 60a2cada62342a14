"""SPEC.md rule 9.13: the clock fence's look at start holds clients off while a peer
behind a slow link has yet to answer, so a node restarted with its clock off never
answers from its own data first."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, expect, wait_for
from dht.conformance.rules import rule
from dht.limits import FIRST_CHECK_SECONDS
from dht.testbed.toxiproxy import free_ports

pytestmark = pytest.mark.dht

SKEW = 120
# Each way, so a round trip takes twice this: more than the start-up look waits.
DELAY = 0.6


@contextmanager
def slow_links(upstreams: list[int], delay: float) -> Iterator[list[int]]:
    """A TCP proxy per upstream port, on free ports, that delays every chunk by `delay`
    seconds in each direction (order kept): a slow but healthy link."""
    ports = free_ports(len(upstreams))
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def later() -> None:
            while True:
                at, data = await queue.get()
                await asyncio.sleep(max(0.0, at - loop.time()))
                if not data:
                    writer.close()
                    return
                writer.write(data)

        sender = asyncio.ensure_future(later())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + delay, data))
        except OSError:
            pass
        queue.put_nowait((loop.time() + delay, b""))
        await sender

    def serve(upstream: int) -> object:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, upstream)
            except OSError:
                writer.close()
                return
            try:
                await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
            except asyncio.CancelledError:  # the proxy stops (asyncio 3.11 logs it otherwise)
                writer.close()
                up_writer.close()

        return accepted

    async def main() -> None:
        servers = [
            await asyncio.start_server(serve(upstream), HOST, port)  # type: ignore[arg-type]
            for upstream, port in zip(upstreams, ports, strict=True)
        ]
        ready.set()
        await asyncio.gather(*(server.serve_forever() for server in servers))

    running = loop.create_task(main())

    def run() -> None:
        try:
            loop.run_until_complete(running)
        except asyncio.CancelledError:
            pass
        rest = asyncio.all_tasks(loop)  # the connections' pipes
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield ports
    finally:
        loop.call_soon_threadsafe(running.cancel)
        thread.join(5)


@rule("9.13")
def test_a_node_restarted_with_its_clock_off_behind_slow_links_is_fenced_from_its_first_answer(
    start_cluster: ClusterFactory,
) -> None:
    assert 2 * DELAY > FIRST_CHECK_SECONDS
    cluster = start_cluster(3, ["--timeout", "5"])
    healthy, skewed = cluster.nodes[:2], cluster[2]
    expect(healthy[0].put("before", b"v", "3/3"), 201)
    skewed.stop()
    with slow_links([node.port for node in healthy], DELAY) as proxies:
        routes = [
            arg
            for node, port in zip(healthy, proxies, strict=True)
            for arg in ("--route", f"{node.cluster_url}=http://{HOST}:{port}")
        ]
        skewed.extra_args += ["--clock-skew", str(SKEW), *routes]
        skewed.start()
        first = skewed.get("before", "1/3")  # its first answer
        # The links do carry the look: the fence comes, a round trip later.
        wait_for(
            lambda: skewed.status()["clock_fence"]["fenced"],
            lambda fenced: fenced is not None,
            deadline=10,
        )
        assert first.status == 503, (first.status, first.text[:200])
        skewed.stop()
