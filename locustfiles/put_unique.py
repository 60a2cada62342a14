"""PUT of keys never written before: the write path with no overwrites."""

from common import entity_path, unique_key, value
from locust import FastHttpUser, task


class PutUnique(FastHttpUser):
    @task
    def put_new_key(self) -> None:
        self.client.put(
            entity_path(unique_key(), self.environment),
            data=value(self.environment),
            name="PUT new key",
        )
