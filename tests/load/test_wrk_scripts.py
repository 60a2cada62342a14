"""bench/wrk_put.lua and wrk_get.lua with wrk against a real node, read by bench.wrk:
every PUT writes a key and every GET reads one that PUT wrote (a GET of a key the PUT
did not write would be a 404, a non-2xx answer). `make test` installs wrk."""

from __future__ import annotations

import pytest

from bench.wrk import run_wrk
from dht.conformance.launcher import Node


@pytest.mark.alone  # wrk at full speed takes both cores from whatever runs beside it
def test_get_reads_only_keys_that_put_wrote(node: Node) -> None:
    put = run_wrk(node.url, "wrk_put.lua", 1, 4, ["replicas=1/1", "prefix=wrk-test-"])
    assert put.requests > 100 and put.errors == 0, put
    assert 0 < put.cpu_share < 1.5
    keys = put.requests - 4  # the last 4 (one per connection) may not have finished
    get = run_wrk(node.url, "wrk_get.lua", 1, 4, ["prefix=wrk-test-", f"keys={keys}"])
    assert get.requests > 100 and get.errors == 0, get


def test_a_get_over_keys_never_written_is_counted_as_errors(node: Node) -> None:
    get = run_wrk(node.url, "wrk_get.lua", 1, 4, ["prefix=never-written-", "keys=50"])
    assert get.requests > 0 and get.non_2xx == get.requests


def test_a_script_argument_it_does_not_know_fails_the_run(node: Node) -> None:
    with pytest.raises(RuntimeError, match="unknown argument"):
        run_wrk(node.url, "wrk_put.lua", 1, 1, ["replica=1/1"])


@pytest.mark.alone  # wrk at full speed, as above
def test_the_warm_up_writes_to_each_dht_server_and_leaves_the_references_alone(
    node: Node,
) -> None:
    """bench.throughput --warm: PUTs to the dht servers only (a reference server would be
    measured warm for nothing), under keys of their own, so the rounds write new ones."""
    from bench.throughput import Load, Server, warm_up
    from bench.throughput_report import BARE, ONE_NODE
    from dht.conformance.http_client import request

    # The node stands for the reference too: a warm-up sent to it would write warm0- keys.
    servers = [Server(BARE, node.url, ()), Server(ONE_NODE, node.url, ())]
    warm_up("pinned", servers, Load(1, 1, 2, 1.0), [])
    assert request("GET", f"{node.url}/v0/entities?start=warm0-&end=warm1").body == b""
    written = request("GET", f"{node.url}/v0/entities?start=warm1-&end=warm2").body
    assert written.count(b"warm1-0-") > 100  # the second server's keys, `v` * 100 each
    assert written.count(b"v" * 100) == written.count(b"warm1-0-")
