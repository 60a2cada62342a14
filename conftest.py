"""Shared fixtures for tests/ and chaos/: real node processes (tests/launcher.py)."""

pytest_plugins = ["tests.fixtures"]
