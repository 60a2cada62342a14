"""Fills a store with keys `key0000000000` ... before read benchmarks (bench and Locust).

Plain threads and urllib, so it runs the same inside Locust (gevent) and in scripts; no
imports from this repository, so locust can load it as a sibling of the profiles.
"""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

KEY_PREFIX = "key"


def key_name(index: int, prefix: str = KEY_PREFIX) -> str:
    return f"{prefix}{index:010d}"


def prefill(
    url: str,
    keys: int,
    value: bytes = b"v" * 100,
    replicas: str | None = None,
    threads: int = 16,
) -> None:
    """PUTs keys 0 .. keys-1 through `url`; raises if any write is not acknowledged."""
    suffix = f"&replicas={replicas}" if replicas else ""

    def put(index: int) -> int:
        target = f"{url}/v0/entity?id={quote(key_name(index))}{suffix}"
        request = urllib.request.Request(target, data=value, method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        failed = sum(1 for status in pool.map(put, range(keys)) if status != 201)
    if failed:
        raise RuntimeError(f"prefill: {failed} of {keys} writes were not acknowledged")
