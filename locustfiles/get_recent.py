"""GET skewed towards recent keys: reads fall mostly on the last-written 5% of the filled
space (exponential distribution from the newest key), the hot set of a cache-friendly
store."""

import random

from common import entity_path, prefill_on_test_start
from locust import FastHttpUser, task
from prefill import key_name

RECENT_SHARE = 0.05


prefill_on_test_start()


def recent_index(keys: int) -> int:
    distance = int(random.expovariate(1 / max(1.0, keys * RECENT_SHARE)))
    return max(0, keys - 1 - distance)


class GetRecent(FastHttpUser):
    @task
    def get_recent_key(self) -> None:
        key = key_name(recent_index(self.environment.parsed_options.keys))
        self.client.get(entity_path(key, self.environment), name="GET recent")
