"""PUT of keys never written before: the write path with no overwrites."""

from common import put_new_key
from locust import FastHttpUser, task


class PutUnique(FastHttpUser):
    @task
    def put_new_key(self) -> None:
        put_new_key(self)
