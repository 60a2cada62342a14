"""The cockpit makes a change (a process fault, a link fault, the record switch), even
for the holder of its token, only for a request that names it in Host: a DNS-rebinding
page sends its own name, and on a wildcard address only an IP address, a loopback name
or this machine's name pass."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dht.testbed.cockpit import CockpitConfig, make_app


@pytest.mark.parametrize(
    ("bind", "host", "status"),
    [
        ("0.0.0.0", "rebound.example:8079", 403),
        ("0.0.0.0", "192.0.2.7:8079", 409),  # an address: reached, refused for the probe
        ("0.0.0.0", "localhost:8079", 409),
        ("127.0.0.1", "rebound.example:8079", 403),
        ("127.0.0.1", "127.0.0.1:8079", 409),
    ],
)
async def test_a_change_needs_a_host_that_names_the_cockpit(
    bind: str, host: str, status: int
) -> None:
    config = CockpitConfig(nodes=("http://127.0.0.1:9",), host=bind, probe_rate=0)
    token = {"Authorization": f"Bearer {config.token}"}
    async with TestClient(TestServer(make_app(config))) as client:
        answer = await client.post(
            "/experiment/start", headers=token | {"X-Cockpit": "1", "Host": host}
        )
        assert answer.status == status, await answer.text()
        unmarked = await client.post("/experiment/start", headers=token | {"Host": "127.0.0.1"})
        assert unmarked.status == 403
