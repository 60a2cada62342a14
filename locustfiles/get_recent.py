"""GET skewed towards the most recently written keys: the distance back from the newest
key of the filled space is exponential with a mean of 5% of the space, so about 63% of the
reads fall on the newest 5% of the keys (the hot set a cache would keep). The prefill
writes keys in roughly ascending order, so the highest numbers are the most recent."""

import random

from common import KeySpaceUser, fill_before_run
from locust import task

RECENT_SHARE = 0.05

fill_before_run()


def recent_index(keys: int, rng: random.Random) -> int:
    """A key number in [0, keys), exponentially more likely the higher (newer) it is."""
    distance = int(rng.expovariate(1 / max(1.0, keys * RECENT_SHARE)))
    return max(0, keys - 1 - distance)


class GetRecent(KeySpaceUser):
    @task
    def get_recent_key(self) -> None:
        index = recent_index(self.settings.keys, self.rng)
        self.get(self.filled_key(index), name="GET recent")
