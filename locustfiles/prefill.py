"""The key space the load profiles and bench/ share: key names, request paths, and the
prefill that writes keys `key0000000000 .. ` before a read workload.

Plain threads and http.client, no locust and no imports from this repository: Locust loads
it as a sibling of the profiles (under gevent, whose patched threads become greenlets), and
bench/ imports it as `locustfiles.prefill` without pulling in gevent's monkey-patching.
Prefill only talks to a loopback address.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import re
import secrets
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit

KEY_PREFIX = "key"
REPLICAS_FORMAT = re.compile(r"[1-9][0-9]*/[1-9][0-9]*")
LOOPBACK_NAMES = ("localhost",)
PREFILL_THREADS = 16
PREFILL_ATTEMPTS = 3  # per key: a 503 (overload) or 504 is retried after a short pause
REQUEST_TIMEOUT = 10.0

log = logging.getLogger(__name__)


def key_name(index: int, prefix: str = KEY_PREFIX) -> str:
    """Key number `index` of a key space: fixed width, so byte order is index order and a
    range [key_name(i), key_name(i + n)) holds exactly the keys i .. i + n - 1."""
    return f"{prefix}{index:010d}"


def run_prefix(kind: str) -> str:
    """A key prefix no other run (or process) uses, for writes that must be new keys."""
    return f"{kind}-{secrets.token_hex(4)}-"


def check_replicas(replicas: str | None) -> str | None:
    """`A/F` as the API takes it, or None (the node's default); raises ValueError else."""
    if not replicas:
        return None
    if not REPLICAS_FORMAT.fullmatch(replicas):
        raise ValueError(f"--replicas must look like 2/3, not {replicas!r}")
    return replicas


def entity_path(key: str, replicas: str | None = None) -> str:
    suffix = f"&replicas={replicas}" if replicas else ""
    return f"/v0/entity?id={quote(key, safe='')}{suffix}"


def range_path(first: int, count: int, prefix: str = KEY_PREFIX) -> str:
    """/v0/entities over the `count` keys from number `first` of a filled key space."""
    start, end = key_name(first, prefix), key_name(first + count, prefix)
    return f"/v0/entities?start={quote(start, safe='')}&end={quote(end, safe='')}"


def loopback_address(url: str) -> tuple[str, int]:
    """(host, port) of `url`; raises ValueError unless the host is a loopback address."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host in LOOPBACK_NAMES or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not loopback:
        raise ValueError(f"prefill only writes to http://127.0.0.1:PORT, not {url!r}")
    return host, parts.port or 80


def prefill(
    url: str,
    keys: int,
    value: bytes = b"v" * 100,
    replicas: str | None = None,
    threads: int = PREFILL_THREADS,
) -> float:
    """PUTs keys 0 .. keys-1 through the node at `url` (loopback only) and returns the
    seconds it took; raises RuntimeError if any write is not acknowledged. Each of at most
    `threads` threads keeps one connection and writes every `threads`-th key, so keys are
    written in roughly ascending order (the newest have the highest numbers)."""
    host, port = loopback_address(url)
    started = time.monotonic()
    workers = max(1, min(threads, keys))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        shares = [range(first, keys, workers) for first in range(workers)]
        failed = sum(pool.map(lambda share: _write(host, port, share, value, replicas), shares))
    if failed:
        raise RuntimeError(f"prefill: {failed} of {keys} writes were not acknowledged")
    seconds = time.monotonic() - started
    log.info("prefill: %d keys in %.1fs through %s", keys, seconds, url)
    return seconds


def _write(host: str, port: int, indexes: Iterable[int], value: bytes, replicas: str | None) -> int:
    """Writes the keys `indexes` on one kept-alive connection; returns how many failed."""
    connection = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT)
    failed = 0
    try:
        for index in indexes:
            path = entity_path(key_name(index), replicas)
            for attempt in range(PREFILL_ATTEMPTS):
                status = _put(connection, path, value)
                if status == 201:
                    break
                time.sleep(0.05 * (attempt + 1))
            else:
                failed += 1
    finally:
        connection.close()
    return failed


def _put(connection: http.client.HTTPConnection, path: str, value: bytes) -> int:
    """One PUT; a dropped connection is reopened once by http.client on the next call."""
    try:
        connection.request("PUT", path, body=value)
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException) as error:
        log.warning("prefill: PUT %s failed: %s", path, error)
        connection.close()
        return 0
