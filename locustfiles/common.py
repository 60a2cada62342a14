"""What every profile shares: the command-line settings, key names, request paths and
the prefill of the store before read profiles.

Profiles import it as a sibling module (`from common import ...`): locust puts the
locustfile's own folder on sys.path, so `locust -f locustfiles/mixed.py` works from
anywhere.

Settings (after locust's own flags): --replicas A/F (default: the node's own default),
--keys (the key space, default 10000), --value-bytes (default 100), --skip-prefill.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any
from urllib.parse import quote

from locust import events
from locust.env import Environment
from prefill import key_name, prefill

log = logging.getLogger(__name__)
_unique = itertools.count()


@events.init_command_line_parser.add_listener
def add_settings(parser: Any) -> None:
    parser.add_argument("--replicas", default="", help="ack/from of every request")
    parser.add_argument("--keys", type=int, default=10_000, help="size of the key space")
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each value")
    parser.add_argument("--skip-prefill", action="store_true", help="the store is already filled")


def settings(environment: Environment) -> Any:
    return environment.parsed_options


def entity_path(key: str, environment: Environment) -> str:
    replicas = settings(environment).replicas
    return f"/v0/entity?id={quote(key)}" + (f"&replicas={replicas}" if replicas else "")


def range_path(first: int, count: int) -> str:
    return f"/v0/entities?start={quote(key_name(first))}&end={quote(key_name(first + count))}"


def value(environment: Environment) -> bytes:
    return b"v" * settings(environment).value_bytes


def unique_key() -> str:
    """A key no other request of this run writes (per process)."""
    return f"new-{next(_unique):012d}"


def put_new_key(user: Any) -> None:
    """One PUT of a key no request of this run wrote before."""
    user.client.put(
        entity_path(unique_key(), user.environment),
        data=value(user.environment),
        name="PUT new key",
    )


def prefill_on_test_start() -> None:
    """Makes the profile that calls it fill the key space before its users start."""

    @events.test_start.add_listener
    def fill(environment: Environment, **_kwargs: Any) -> None:
        prefill_before_test(environment)


def prefill_before_test(environment: Environment) -> None:
    """Fills keys 0 .. --keys - 1 through the target host, once, before users start."""
    options = settings(environment)
    if options.skip_prefill:
        return
    log.info("prefill: writing %d keys to %s", options.keys, environment.host)
    prefill(
        environment.host or "",
        options.keys,
        value(environment),
        options.replicas or None,
    )
