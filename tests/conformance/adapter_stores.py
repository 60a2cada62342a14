"""What the adapter tests share: a mark each for the stores they start (skipped, saying
how to install it, where it is missing) and the example adapter users copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.adapters.etcd import etcd_binary
from dht.conformance.adapters.redis import redis_binaries

needs_etcd = pytest.mark.skipif(
    etcd_binary() is None, reason="etcd not found: `make test` installs etcd-server (as root)"
)
needs_redis = pytest.mark.skipif(
    redis_binaries() is None,
    reason="redis not found: `make test` installs redis-server and redis-sentinel (as root)",
)
EXAMPLE = Path(__file__).parents[2] / "dht" / "conformance" / "adapters" / "example.py"
