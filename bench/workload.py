"""Which request the constant-rate benchmark sends as its i-th (pure; no I/O).

`put` writes a new key per request (key i under the workload's prefix); `get` reads a
uniformly random key of a filled key space (locustfiles/prefill.py writes it); `mixed`
reads or overwrites a random filled key, half and half; `status` asks for /v0/status.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from locustfiles.prefill import KEY_PREFIX, entity_path, key_name

WORKLOADS = ("put", "get", "mixed", "status")
Request = tuple[str, str, bytes | None]  # method, path with query, body


@dataclass(frozen=True)
class Workload:
    kind: str
    keys: int = 10_000
    value: bytes = b"v" * 100
    replicas: str | None = None
    prefix: str = KEY_PREFIX  # of the filled keys (get, mixed), or of the new ones (put)
    write_share: float = 0.5  # mixed: share of PUTs

    def __post_init__(self) -> None:
        if self.kind not in WORKLOADS:
            raise ValueError(f"workload must be one of {WORKLOADS}, not {self.kind!r}")
        if self.keys < 1:
            raise ValueError("keys must be >= 1")

    @property
    def reads_filled_keys(self) -> bool:
        return self.kind in ("get", "mixed")

    def request(self, index: int, rng: random.Random) -> Request:
        """(method, path with query, body) of request number `index`."""
        if self.kind == "status":
            return "GET", "/v0/status", None
        if self.kind == "put":
            return "PUT", entity_path(key_name(index, self.prefix), self.replicas), self.value
        key = key_name(rng.randrange(self.keys), self.prefix)
        if self.kind == "mixed" and rng.random() < self.write_share:
            return "PUT", entity_path(key, self.replicas), self.value
        return "GET", entity_path(key, self.replicas), None
