"""The node's request dispatcher (dht.web.server): routes, the in-flight bound, and the
mapping of errors to one-line answers, on aiohttp's own mocked requests."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from dht.web.server import BadRequest, HttpServer, Params, PayloadTooLarge, Route


def server(handler: object, max_in_flight: int = 10) -> HttpServer:
    return HttpServer(
        {"/v0/x": Route({"GET": handler}), "/v0/free": Route({"GET": handler}, counted=False)},
        max_in_flight,
    )  # type: ignore[dict-item]


async def answer(http: HttpServer, method: str, path: str) -> web.Response:
    response = await http.handle(make_mocked_request(method, path))
    assert isinstance(response, web.Response)
    return response


async def test_an_unexpected_exception_is_a_one_line_500_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: web.BaseRequest, params: Params) -> web.Response:
        raise RuntimeError("planted")

    http = server(broken)
    with caplog.at_level(logging.ERROR):
        response = await answer(http, "GET", "/v0/x?id=k")
    assert response.status == 500
    assert response.text == "Internal Server Error: RuntimeError\n"
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert "GET /v0/x?id=k failed" in errors[0].getMessage()
    assert http.errors == 1
    assert http.in_flight == 0


async def test_bad_input_maps_to_400_and_413_and_unknown_paths_and_methods() -> None:
    async def picky(request: web.BaseRequest, params: Params) -> web.Response:
        if params.get("id") == b"big":
            raise PayloadTooLarge("values are limited to 1 bytes")
        raise BadRequest("missing or empty parameter 'id'")

    http = server(picky)
    assert (await answer(http, "GET", "/v0/x")).text == (
        "Bad Request: missing or empty parameter 'id'\n"
    )
    too_large = await answer(http, "GET", "/v0/x?id=big")
    assert (too_large.status, too_large.text) == (
        413,
        "Payload Too Large: values are limited to 1 bytes\n",
    )
    assert (await answer(http, "GET", "/v0/nothing")).status == 400
    wrong_method = await answer(http, "POST", "/v0/x")
    assert (wrong_method.status, wrong_method.headers["Allow"]) == (405, "GET")


async def test_past_the_bound_counted_requests_get_503_at_once_and_others_pass() -> None:
    release = asyncio.Event()

    async def slow(request: web.BaseRequest, params: Params) -> web.Response:
        await release.wait()
        return web.Response(text="done")

    http = server(slow, max_in_flight=2)
    held = [asyncio.ensure_future(answer(http, "GET", "/v0/x")) for _ in range(2)]
    await asyncio.sleep(0)
    refused = await answer(http, "GET", "/v0/x")
    assert (refused.status, refused.headers["Retry-After"]) == (503, "1")
    free = asyncio.ensure_future(answer(http, "GET", "/v0/free"))
    await asyncio.sleep(0)
    assert http.in_flight == 2 and http.refused == 1
    release.set()
    assert [r.status for r in await asyncio.gather(*held, free)] == [200, 200, 200]
    assert http.in_flight == 0
