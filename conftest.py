"""Shared fixtures for tests/ and chaos/: the kit's (real node processes, the tiers'
markers) and the repository's own (a cluster behind Toxiproxy)."""

pytest_plugins = ["dht.conformance.fixtures", "tests.fixtures"]
