"""Range scans of a fixed size: /v0/entities from key i to key i + 1000 of the filled space
(start and end bound exactly 1000 keys; all of them if --keys is smaller), each answer
checked for its record count."""

from common import KeySpaceUser, fill_before_run
from locust import task
from prefill import range_path

SCAN_RECORDS = 1000

fill_before_run()


class RangeScan(KeySpaceUser):
    @task
    def scan(self) -> None:
        count = min(SCAN_RECORDS, self.settings.keys)
        first = self.rng.randrange(self.settings.keys - count + 1)
        with self.client.get(
            range_path(first, count), name=f"range of {count}", catch_response=True
        ) as response:
            # One `key \n value` per record, and the values written hold no newline.
            records = (response.content or b"").count(b"\n")
            if response.status_code == 200 and records != count:
                response.failure(f"{records} records, expected {count}")
