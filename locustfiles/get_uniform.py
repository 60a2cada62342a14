"""GET uniform over the filled key space: every read finds its key."""

from common import KeySpaceUser, fill_before_run
from locust import task

fill_before_run()


class GetUniform(KeySpaceUser):
    @task
    def get_any_key(self) -> None:
        self.get(self.any_filled_key(), name="GET uniform")
