"""Range scans of a fixed size: /v0/entities over 1000 consecutive keys of the filled
space (fewer if --keys is smaller), each answer checked for its record count."""

import random

from common import prefill_on_test_start, range_path
from locust import FastHttpUser, task

SCAN_RECORDS = 1000


prefill_on_test_start()


class RangeScan(FastHttpUser):
    @task
    def scan(self) -> None:
        keys = self.environment.parsed_options.keys
        count = min(SCAN_RECORDS, keys)
        first = random.randrange(keys - count + 1)
        with self.client.get(
            range_path(first, count), name=f"range of {count}", catch_response=True
        ) as response:
            records = (response.content or b"").count(b"\nv")  # one "key\nvalue" each
            if response.status_code == 200 and records != count:
                response.failure(f"{records} records, expected {count}")
