"""Mixed PUT/GET, half and half, over the filled key space: reads find their key, writes
overwrite one."""

from common import KeySpaceUser, fill_before_run
from locust import task

fill_before_run()


class Mixed(KeySpaceUser):
    @task
    def read(self) -> None:
        self.get(self.any_filled_key(), name="GET")

    @task
    def write(self) -> None:
        self.put(self.any_filled_key(), name="PUT")
