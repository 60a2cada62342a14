"""Reading vegeta's JSON report and writing its targets (bench.vegeta); vegeta itself
is not needed."""

from __future__ import annotations

import base64
import json
import os
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from bench.vegeta import (
    SPARE_TARGETS,
    VALUE,
    feed,
    get_targets,
    parse_report,
    put_targets,
    target_count,
)

# `vegeta report -type=json` of a real run against the bare server, plus failures.
REPORT = json.dumps(
    {
        "latencies": {
            "total": 1129926241,
            "mean": 5649631,
            "50th": 363887,
            "90th": 3632151,
            "95th": 53778802,
            "99th": 93810492,
            "max": 101845283,
            "min": 244709,
        },
        "bytes_in": {"total": 0, "mean": 0},
        "bytes_out": {"total": 20000, "mean": 100},
        "earliest": "2026-11-23T10:22:28.850183376Z",
        "latest": "2026-11-23T10:22:29.844778984Z",
        "end": "2026-11-23T10:22:29.845205033Z",
        "duration": 994595608,
        "wait": 426049,
        "requests": 200,
        "rate": 201.08675163182502,
        "throughput": 190.5,
        "success": 0.95,
        "status_codes": {"201": 190, "404": 4, "0": 6},
        "errors": ["404 Not Found", "context deadline exceeded"],
    }
)


def test_the_report_gives_latencies_in_ms_rates_and_failures() -> None:
    report = parse_report(REPORT, rate=200, cpu_seconds=0.5, seconds=2.0)
    assert report.latencies_ms == pytest.approx(
        {"p50": 0.363887, "p90": 3.632151, "p95": 53.778802, "p99": 93.810492, "max": 101.845283}
    )
    assert report.percentile_ms("p99") == pytest.approx(93.810492)
    assert (report.requests, report.throughput) == (200, 190.5)
    assert report.sent_rate == 201.08675163182502
    assert report.status_codes == {201: 190, 404: 4, 0: 6}
    assert report.failures == 10  # a 404 and no answer (0) both count
    assert report.errors == ("404 Not Found", "context deadline exceeded")
    assert report.generator_cores == 0.25
    assert report.cpu_us_per_request == 2500


def test_vegeta_kept_pace_only_when_it_sent_nearly_the_requested_rate() -> None:
    assert parse_report(REPORT, rate=200).kept_pace
    assert not parse_report(REPORT, rate=250).kept_pace  # sent 201/s of 250/s


def test_a_report_without_answers_has_no_status_codes_and_is_not_failures() -> None:
    data = json.loads(REPORT) | {"status_codes": None, "errors": None}
    report = parse_report(json.dumps(data), rate=1)
    assert report.failures == 0 and report.errors == ()


@pytest.mark.parametrize("broken", ["", "{}", '{"latencies": {}}', "Requests [total] 200"])
def test_anything_but_a_full_report_is_an_error_not_zeros(broken: str) -> None:
    with pytest.raises(ValueError, match="not a vegeta JSON report"):
        parse_report(broken, rate=100)


def test_put_targets_are_valid_json_with_unique_keys_and_the_value() -> None:
    lines = list(put_targets("http://127.0.0.1:8080", "put-ab-", "1/1", 1000))
    targets = [json.loads(line) for line in lines]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert {t["method"] for t in targets} == {"PUT"}
    queries = [parse_qs(urlsplit(t["url"]).query) for t in targets]
    keys = [query["id"][0] for query in queries]
    assert len(set(keys)) == 1000 and all(key.startswith("put-ab-") for key in keys)
    assert {query["replicas"][0] for query in queries} == {"1/1"}
    assert {base64.b64decode(t["body"]) for t in targets} == {VALUE}


def test_get_targets_spread_over_the_prefilled_keys_only() -> None:
    targets = [json.loads(line) for line in get_targets("http://127.0.0.1:1", 50, None, 5000)]
    keys = {parse_qs(urlsplit(t["url"]).query)["id"][0] for t in targets}
    assert keys == {f"key{index:010d}" for index in range(50)}
    assert all(t["method"] == "GET" and "replicas" not in t["url"] for t in targets)


def test_a_run_gets_rate_times_duration_targets_and_a_few_spare() -> None:
    assert target_count(1000, 2.0) == 2000 + SPARE_TARGETS
    assert target_count(333, 1.5) == 500 + SPARE_TARGETS  # rounded up


def test_feed_writes_every_line_then_closes() -> None:
    read_end, write_end = os.pipe()
    lines = [f"{index}\n" for index in range(1000)]
    with os.fdopen(write_end, "wb") as stdin, os.fdopen(read_end, "rb") as out:
        writer = threading.Thread(target=feed, args=(stdin, iter(lines)))
        writer.start()
        assert out.read().decode() == "".join(lines)  # read to EOF: feed closed it
        writer.join()


def test_feed_stops_quietly_when_vegeta_stops_reading() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # vegeta's duration is over: it exited
    with os.fdopen(write_end, "wb") as stdin:
        feed(stdin, (f"{index}\n" for index in range(100_000)))  # no BrokenPipeError
