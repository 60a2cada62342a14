"""GET uniform over a filled key space: every read finds its key."""

import random

from common import entity_path, prefill_on_test_start
from locust import FastHttpUser, task
from prefill import key_name

prefill_on_test_start()


class GetUniform(FastHttpUser):
    @task
    def get_any_key(self) -> None:
        key = key_name(random.randrange(self.environment.parsed_options.keys))
        self.client.get(entity_path(key, self.environment), name="GET uniform")
