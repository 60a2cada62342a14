"""PUT with partial overwrite: half the writes replace a key of the filled space, half
write new keys."""

import random

from common import entity_path, prefill_on_test_start, put_new_key, value
from locust import FastHttpUser, task
from prefill import key_name

prefill_on_test_start()


class PutOverwrite(FastHttpUser):
    @task
    def overwrite_existing_key(self) -> None:
        key = key_name(random.randrange(self.environment.parsed_options.keys))
        self.client.put(
            entity_path(key, self.environment), data=value(self.environment), name="PUT overwrite"
        )

    @task
    def put_new_key(self) -> None:
        put_new_key(self)
