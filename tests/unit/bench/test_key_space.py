"""The key space shared by the Locust profiles and bench/ (locustfiles/prefill.py)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from locustfiles.prefill import (
    check_replicas,
    entity_path,
    key_name,
    loopback_address,
    range_path,
    run_prefix,
)


def test_key_names_sort_in_the_order_of_their_numbers() -> None:
    names = [key_name(index) for index in (0, 9, 10, 999, 1000, 123_456_789)]
    assert sorted(names) == names
    assert key_name(42) == "key0000000042"


def test_a_range_path_bounds_exactly_count_keys_of_the_filled_space() -> None:
    query = parse_qs(urlsplit(range_path(first=500, count=1000)).query)
    start, end = query["start"][0], query["end"][0]
    inside = [key_name(index) for index in range(10_000) if start <= key_name(index) < end]
    assert len(inside) == 1000
    assert inside[0] == key_name(500)


def test_entity_paths_quote_the_key_and_carry_replicas() -> None:
    assert entity_path("a b/c", "2/3") == "/v0/entity?id=a%20b%2Fc&replicas=2/3"
    assert entity_path("k") == "/v0/entity?id=k"


def test_run_prefixes_differ_between_runs() -> None:
    assert run_prefix("put") != run_prefix("put")


@pytest.mark.parametrize("replicas", ["1/1", "2/3", "10/12"])
def test_replicas_take_the_api_form(replicas: str) -> None:
    assert check_replicas(replicas) == replicas


@pytest.mark.parametrize("replicas", ["2-3", "2/", "/3", "0/3", "a/b", "2/3/4"])
def test_malformed_replicas_are_refused(replicas: str) -> None:
    with pytest.raises(ValueError):
        check_replicas(replicas)


def test_no_replicas_means_the_node_default() -> None:
    assert check_replicas(None) is None
    assert check_replicas("") is None


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"]
)
def test_prefill_writes_to_loopback(url: str) -> None:
    assert loopback_address(url)[1] == 8080


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:8080", "http://example.com:8080", "https://127.0.0.1:8080"]
)
def test_prefill_refuses_any_other_address(url: str) -> None:
    with pytest.raises(ValueError):
        loopback_address(url)
