"""Mixed PUT/GET, half and half, over the filled key space."""

import random

from common import entity_path, prefill_on_test_start, value
from locust import FastHttpUser, task
from prefill import key_name

prefill_on_test_start()


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
