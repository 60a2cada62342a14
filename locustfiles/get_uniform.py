"""GET uniform over a filled key space: every read finds its key."""

import random

from common import entity_path, prefill_before_test
from locust import FastHttpUser, events, task
from prefill import key_name


@events.test_start.add_listener
def fill(environment, **_kwargs):  # type: ignore[no-untyped-def]
    prefill_before_test(environment)


class GetUniform(FastHttpUser):
    @task
    def get_any_key(self) -> None:
        key = key_name(random.randrange(self.environment.parsed_options.keys))
        self.client.get(entity_path(key, self.environment), name="GET uniform")
