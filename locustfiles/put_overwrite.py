"""PUT with partial overwrite: half the writes replace a key of the filled space, half
write new keys."""

import random

from common import entity_path, prefill_before_test, unique_key, value
from locust import FastHttpUser, events, task
from prefill import key_name


@events.test_start.add_listener
def fill(environment, **_kwargs):  # type: ignore[no-untyped-def]
    prefill_before_test(environment)


class PutOverwrite(FastHttpUser):
    @task
    def overwrite_existing_key(self) -> None:
        key = key_name(random.randrange(self.environment.parsed_options.keys))
        self.client.put(
            entity_path(key, self.environment), data=value(self.environment), name="PUT overwrite"
        )

    @task
    def put_new_key(self) -> None:
        self.client.put(
            entity_path(unique_key(), self.environment),
            data=value(self.environment),
            name="PUT new key",
        )
