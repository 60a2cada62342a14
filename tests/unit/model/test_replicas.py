"""The `replicas=ack/from` parameter (SPEC.md rules 1.8 and 3.3)."""

from __future__ import annotations

import pytest

from dht.model.replicas import (
    BadReplicas,
    ReplicaCount,
    default_replicas,
    parse_replicas,
    quorum,
)


@pytest.mark.parametrize(
    ("size", "expected"), [(1, "1/1"), (2, "2/2"), (3, "2/3"), (4, "3/4"), (5, "3/5")]
)
def test_the_default_is_a_quorum_of_the_whole_cluster(size: int, expected: str) -> None:
    assert str(default_replicas(size)) == expected
    assert parse_replicas(None, size) == default_replicas(size)
    assert quorum(size) == size // 2 + 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2/3", ReplicaCount(2, 3)),
        ("1/1", ReplicaCount(1, 1)),
        ("1/3", ReplicaCount(1, 3)),
        ("3/3", ReplicaCount(3, 3)),
        ("01/2", ReplicaCount(1, 2)),  # a leading zero is still the number one
        ("1/003", ReplicaCount(1, 3)),
    ],
)
def test_a_valid_parameter_parses_to_ack_and_from(text: str, expected: ReplicaCount) -> None:
    assert parse_replicas(text, 3) == expected


def test_a_replica_count_prints_as_the_parameter() -> None:
    assert str(parse_replicas("2/3", 3)) == "2/3"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "/",
        "1/",
        "/1",
        "2",
        "1/2/3",
        "1:2",
        "-1/2",
        "+1/2",
        "1/-2",
        " 1/2",
        "1/2 ",
        "1 /2",
        "1/2\n",
        "1.0/2",
        "1_0/20",
        "\uff11/\uff12",  # full-width digits
        "\u0661/\u0662",  # Arabic-Indic digits
        "1/99999999999999999999",
    ],
)
def test_a_malformed_parameter_is_rejected(text: str) -> None:
    with pytest.raises(BadReplicas):
        parse_replicas(text, 3)


@pytest.mark.parametrize("text", ["0/3", "0/0", "00/1"])
def test_ack_below_one_is_rejected(text: str) -> None:
    with pytest.raises(BadReplicas):
        parse_replicas(text, 3)


@pytest.mark.parametrize("text", ["4/3", "2/1", "1/0"])
def test_ack_above_from_is_rejected(text: str) -> None:
    with pytest.raises(BadReplicas):
        parse_replicas(text, 3)


@pytest.mark.parametrize(("text", "size"), [("2/4", 3), ("1/2", 1), ("4/4", 3)])
def test_from_above_the_cluster_size_is_rejected(text: str, size: int) -> None:
    with pytest.raises(BadReplicas):
        parse_replicas(text, size)


def test_bad_replicas_is_a_value_error() -> None:
    assert issubclass(BadReplicas, ValueError)
