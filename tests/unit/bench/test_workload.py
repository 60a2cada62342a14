"""Which requests the constant-rate benchmark sends (bench.workload)."""

from __future__ import annotations

import random

import pytest

from bench.workload import Workload


def test_put_writes_key_i_of_its_own_prefix_with_the_replicas_setting() -> None:
    workload = Workload("put", keys=10, replicas="2/3", prefix="run-1-")
    assert workload.request(7, random.Random(0)) == (
        "PUT",
        "/v0/entity?id=run-1-0000000007&replicas=2/3",
        b"v" * 100,
    )


def test_put_without_replicas_leaves_the_node_default() -> None:
    _, path, _ = Workload("put").request(0, random.Random(0))
    assert path == "/v0/entity?id=key0000000000"


def test_get_reads_only_keys_of_the_filled_space() -> None:
    rng = random.Random(0)
    workload = Workload("get", keys=10)
    requests = [workload.request(index, rng) for index in range(500)]
    assert {(method, body) for method, _, body in requests} == {("GET", None)}
    indexes = {int(path.removeprefix("/v0/entity?id=key")) for _, path, _ in requests}
    assert indexes == set(range(10))


def test_mixed_reads_and_overwrites_filled_keys_about_half_and_half() -> None:
    rng = random.Random(0)
    workload = Workload("mixed", keys=100, replicas="1/1")
    requests = [workload.request(index, rng) for index in range(2000)]
    puts = [path for method, path, _ in requests if method == "PUT"]
    assert 900 < len(puts) < 1100
    assert all(path.startswith("/v0/entity?id=key00000000") for _, path, _ in requests)
    assert all(path.endswith("&replicas=1/1") for _, path, _ in requests)


def test_status_asks_for_the_status() -> None:
    assert Workload("status").request(3, random.Random(0)) == ("GET", "/v0/status", None)


def test_an_unknown_workload_is_refused() -> None:
    with pytest.raises(ValueError):
        Workload("delete")
