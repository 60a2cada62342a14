"""The cockpit's probe load (dht/testbed/probe.py) against a small aiohttp server that
answers slowly: a recording keeps every operation on its keys that reached the server,
including the ones still in flight when it stopped, and nothing after; a refused
connection is a failure in the figures and no operation in the history."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from dht.testbed.probe import KEYS, Probe

ANSWER_AFTER = 0.3


def slow_store(received: list[tuple[str, str]]) -> web.Application:
    values: dict[str, bytes] = {}

    async def entity(request: web.Request) -> web.Response:
        key = request.query["id"]
        received.append((request.method, key))
        await asyncio.sleep(ANSWER_AFTER)
        if request.method == "PUT":
            values[key] = await request.read()
            return web.Response(status=201)
        if request.method == "DELETE":
            values.pop(key, None)
            return web.Response(status=202)
        return web.Response(body=values[key]) if key in values else web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/v0/entity", entity)
    return app


async def test_a_recording_keeps_every_operation_on_its_keys_even_those_in_flight_at_stop() -> None:
    received: list[tuple[str, str]] = []
    async with TestServer(slow_store(received)) as server:
        url = str(server.make_url("")).rstrip("/")
        probe = Probe([url], rate=40.0, seed=7)
        async with aiohttp.ClientSession() as session:
            load = asyncio.create_task(probe.run(session))
            await asyncio.sleep(0.3)
            probe.record()
            await asyncio.sleep(0.6)
            ops = await probe.recorded()
            recording_keys = {op.key for op in ops}
            await asyncio.sleep(0.5)  # the load goes on, on the probe's own keys
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        assert ops and recording_keys.isdisjoint(KEYS)
        assert all(op.completed is not None for op in ops), "in flight at stop, never waited for"
        sent = [(method, key) for method, key in received if key in recording_keys]
        assert sorted(sent) == sorted((op.kind.value, op.key) for op in ops)
        assert probe.keys == KEYS


async def test_a_refused_connection_is_a_failure_and_no_operation() -> None:
    async with TestServer(web.Application()) as server:
        url = str(server.make_url("")).rstrip("/")
    probe = Probe([url], rate=50.0, seed=1)  # the server is closed: nothing listens
    probe.record()
    async with aiohttp.ClientSession() as session:
        load = asyncio.create_task(probe.run(session))
        await asyncio.sleep(0.4)
        ops = await probe.recorded()
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
    assert ops == []
    figures = probe.stats()[0]
    assert figures["count"] > 0 and figures["error_rate"] == figures["rate"]
