"""PUT of keys never written before (by this run, another run or another worker): the
write path without overwrites. Needs no prefill."""

from common import KeySpaceUser
from locust import task


class PutUnique(KeySpaceUser):
    @task
    def put_new_key(self) -> None:
        self.put(self.new_key(), name="PUT new key")
