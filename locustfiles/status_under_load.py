"""/v0/status measured while heavy requests run: most users scan ranges and read, a few
ask for the status, and the status latency shows what a light request waits for behind
heavy ones."""

import random

from common import entity_path, prefill_on_test_start, range_path
from locust import FastHttpUser, task
from prefill import key_name

HEAVY_RANGE = 1000


prefill_on_test_start()


class HeavyReader(FastHttpUser):
    weight = 4

    @task
    def scan(self) -> None:
        keys = self.environment.parsed_options.keys
        count = min(HEAVY_RANGE, keys)
        self.client.get(range_path(random.randrange(keys - count + 1), count), name="heavy range")

    @task
    def get(self) -> None:
        key = key_name(random.randrange(self.environment.parsed_options.keys))
        self.client.get(entity_path(key, self.environment), name="heavy GET")


class StatusProbe(FastHttpUser):
    weight = 1

    @task
    def status(self) -> None:
        self.client.get("/v0/status", name="status (light)")
