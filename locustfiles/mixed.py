"""Mixed PUT/GET, half and half, over the filled key space."""

import random

from common import entity_path, prefill_before_test, value
from locust import FastHttpUser, events, task
from prefill import key_name


@events.test_start.add_listener
def fill(environment, **_kwargs):  # type: ignore[no-untyped-def]
    prefill_before_test(environment)


class Mixed(FastHttpUser):
    def random_key(self) -> str:
        return key_name(random.randrange(self.environment.parsed_options.keys))

    @task
    def get(self) -> None:
        self.client.get(entity_path(self.random_key(), self.environment), name="GET")

    @task
    def put(self) -> None:
        self.client.put(
            entity_path(self.random_key(), self.environment),
            data=value(self.environment),
            name="PUT",
        )
