"""PUT with partial overwrite of a filled key space: a share of the writes (--overwrite-share,
default half) replaces a random key of the filled space, the rest write new keys."""

from common import KeySpaceUser, fill_before_run
from locust import task

fill_before_run()


class PutOverwrite(KeySpaceUser):
    @task
    def write(self) -> None:
        if self.rng.random() < self.settings.overwrite_share:
            self.put(self.any_filled_key(), name="PUT overwrite")
        else:
            self.put(self.new_key(), name="PUT new key")
