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
