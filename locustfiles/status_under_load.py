"""/v0/status measured while heavy GETs run: one light user asks for the status ten times
a second, every other user reads the filled key space as fast as it answers. The status
latency shows how long a cheap request waits behind the load (run with -u 2 or more: the
status user is always exactly one of them)."""

from common import KeySpaceUser, fill_before_run
from locust import FastHttpUser, constant_pacing, task

STATUS_EVERY_SECONDS = 0.1

fill_before_run()


class HeavyReader(KeySpaceUser):
    @task
    def get_any_key(self) -> None:
        self.get(self.any_filled_key(), name="GET (heavy load)")


class StatusProbe(FastHttpUser):
    fixed_count = 1
    wait_time = constant_pacing(STATUS_EVERY_SECONDS)

    @task
    def status(self) -> None:
        self.client.get("/v0/status", name="status (light)")
