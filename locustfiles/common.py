"""What every Locust profile shares: its command-line settings, a user class that knows
the key space, and the prefill of the store before the profiles that read.

Profiles import it as a sibling module (`from common import ...`): locust puts the
locustfile's own folder on sys.path, so `locust -f locustfiles/mixed.py` works from any
directory. Key names and the prefill itself live in prefill.py, which has no locust in
it so that bench/ can use the same key space.

Settings, after locust's own flags:
  --replicas A/F        ack/from of every request (default: none, the node's default)
  --keys N              size of the filled key space (default 10000)
  --value-bytes N       size of each written value (default 100)
  --overwrite-share P   put_overwrite: share of PUTs that overwrite a filled key (0.5)
  --skip-prefill        the store already holds the key space
"""

from __future__ import annotations

import itertools
import logging
import random
from dataclasses import dataclass
from typing import Any

from locust import FastHttpUser, events
from locust.env import Environment
from locust.runners import Runner, WorkerRunner
from prefill import check_replicas, entity_path, key_name, prefill, run_prefix

log = logging.getLogger(__name__)


@events.init_command_line_parser.add_listener
def add_settings(parser: Any, **_kwargs: Any) -> None:
    parser.add_argument("--replicas", default="", help="ack/from of every request, e.g. 2/3")
    parser.add_argument("--keys", type=int, default=10_000, help="size of the key space")
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each value")
    parser.add_argument(
        "--overwrite-share",
        type=float,
        default=0.5,
        help="put_overwrite: share of PUTs that replace a filled key",
    )
    parser.add_argument("--skip-prefill", action="store_true", help="the store is already filled")


@events.init.add_listener
def check_settings(environment: Environment, **_kwargs: Any) -> None:
    """A malformed setting stops locust at start-up, before any request."""
    settings(environment)


@dataclass(frozen=True)
class Settings:
    replicas: str | None
    keys: int
    value: bytes
    overwrite_share: float
    skip_prefill: bool


def settings(environment: Environment) -> Settings:
    """The profile settings of this run; raises ValueError on a malformed one."""
    options = environment.parsed_options
    if options is None:  # a library run without the command line
        return Settings(None, 10_000, b"v" * 100, 0.5, False)
    if options.keys < 1 or options.value_bytes < 0 or not 0 <= options.overwrite_share <= 1:
        raise ValueError("--keys must be >= 1, --value-bytes >= 0, --overwrite-share in [0, 1]")
    return Settings(
        replicas=check_replicas(options.replicas),
        keys=options.keys,
        value=b"v" * options.value_bytes,
        overwrite_share=options.overwrite_share,
        skip_prefill=options.skip_prefill,
    )


class KeySpaceUser(FastHttpUser):
    """A user that reads and writes the shared key space with the run's settings. No wait
    between tasks: each user sends its next request as soon as the last one answered."""

    abstract = True

    def on_start(self) -> None:
        self.settings = settings(self.environment)
        self.rng = random.Random()
        self.new_key_prefix = run_prefix("new")
        self.new_key_numbers = itertools.count()

    def filled_key(self, index: int) -> str:
        return key_name(index)

    def any_filled_key(self) -> str:
        return key_name(self.rng.randrange(self.settings.keys))

    def new_key(self) -> str:
        """A key that no other user, process or run writes."""
        return key_name(next(self.new_key_numbers), self.new_key_prefix)

    def get(self, key: str, name: str) -> None:
        self.client.get(entity_path(key, self.settings.replicas), name=name)

    def put(self, key: str, name: str) -> None:
        path = entity_path(key, self.settings.replicas)
        # locust's hint leaves out bytes, which its docs and geventhttpclient accept
        self.client.put(path, data=self.settings.value, name=name)  # type: ignore[arg-type]


def fill_before_run() -> None:
    """Makes the profile fill keys 0 .. --keys - 1 before its users start: once per run,
    on the master or the local runner (never on workers), in locust's `init` event when
    --host is given, so the fill does not eat into --run-time; with the web UI and no
    --host, when the test starts."""
    events.init.add_listener(_fill_at_init)


def _fill_at_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return
    if environment.host:
        _fill(environment)
    else:
        environment.events.test_start.add_listener(_fill_at_start)


def _fill_at_start(environment: Environment, **_: Any) -> None:
    _fill(environment)


def _fill(environment: Environment) -> None:
    chosen = settings(environment)
    if chosen.skip_prefill:
        return
    log.info("prefill: writing %d keys through %s", chosen.keys, environment.host)
    prefill(environment.host or "", chosen.keys, chosen.value, chosen.replicas)
