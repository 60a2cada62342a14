"""The `replicas=ack/from` parameter: parsing, validation and the default quorum."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PATTERN = re.compile(r"([0-9]{1,9})/([0-9]{1,9})")


class BadReplicas(ValueError):
    """The `replicas` parameter is malformed or impossible for this cluster."""


@dataclass(frozen=True, slots=True)
class ReplicaCount:
    ack: int
    from_: int

    def __str__(self) -> str:
        return f"{self.ack}/{self.from_}"


def quorum(size: int) -> int:
    return size // 2 + 1


def default_replicas(cluster_size: int) -> ReplicaCount:
    return ReplicaCount(quorum(cluster_size), cluster_size)


def parse_replicas(text: str | None, cluster_size: int) -> ReplicaCount:
    """`None` (absent) gives the default; anything invalid raises BadReplicas."""
    if text is None:
        return default_replicas(cluster_size)
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise BadReplicas(f"replicas must be ack/from, got {text!r}")
    ack, from_ = int(match.group(1)), int(match.group(2))
    if ack < 1:
        raise BadReplicas("replicas: ack must be at least 1")
    if ack > from_:
        raise BadReplicas("replicas: ack must not exceed from")
    if from_ > cluster_size:
        raise BadReplicas(f"replicas: from must not exceed the cluster size {cluster_size}")
    return ReplicaCount(ack, from_)
