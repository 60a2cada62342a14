"""The scenarios runner's pure parts: the verdict on one rate, the search for the highest
sustained one (bench.rate_search), and what the report says bounded each search
(bench.scenarios_report)."""

from __future__ import annotations

from bench.rate_search import Search, bound_by, highest_sustained, sustains, why_over
from bench.scenario_setup import SCENARIOS
from bench.scenarios_report import ceiling_table, reference_verdict
from bench.vegeta import Report


def measured(
    rate: float,
    p99_ms: float = 5.0,
    failures: int = 0,
    sent_share: float = 1.0,
    answered_share: float = 1.0,
    cores: float = 0.2,
) -> Report:
    statuses = {201: int(rate)} | ({504: failures} if failures else {})
    return Report(
        rate=rate,
        requests=int(rate),
        sent_rate=rate * sent_share,
        throughput=rate * answered_share,
        latencies_ms={"p50": 1.0, "p90": 2.0, "p95": 3.0, "p99": p99_ms, "max": p99_ms * 2},
        status_codes=statuses,
        cpu_seconds=cores,
        seconds=1.0,
    )


def test_a_rate_is_sustained_only_under_the_bound_without_errors_at_full_rate() -> None:
    assert sustains(measured(100))
    assert not sustains(measured(100, p99_ms=80.0))  # p99 over 50 ms
    assert not sustains(measured(100, failures=1))
    assert not sustains(measured(100, sent_share=0.9))  # vegeta fell behind
    assert not sustains(measured(100, answered_share=0.5))  # answered half the rate


def test_search_doubles_then_bisects_to_the_highest_sustained_rate() -> None:
    capacity = 3000.0
    tried: list[float] = []

    def measure(rate: float) -> Report:
        tried.append(rate)
        return measured(rate, p99_ms=5.0 if rate <= capacity else 90.0)

    best = highest_sustained(measure, start=250, limit=64_000, refinements=3)
    assert best is not None
    assert tried[:5] == [250, 500, 1000, 2000, 4000]
    assert best.rate == 3000  # 2000..4000 bisected: 3000 ok, 3500 over, 3250 over


def test_search_gives_none_when_even_the_start_is_not_sustained() -> None:
    assert highest_sustained(lambda rate: measured(rate, 99.0), start=250, limit=1000) is None


def search(*steps: Report) -> Search:
    return Search(list(steps), best=next((s for s in steps if sustains(s)), None))


def test_the_bound_is_the_server_only_if_vegeta_kept_pace_at_the_first_failed_rate() -> None:
    over = measured(8000, p99_ms=300.0)
    behind = measured(8000, p99_ms=300.0, sent_share=0.9)
    assert bound_by(search(measured(4000), over)) == "server"
    assert bound_by(search(measured(4000), behind)) == "generator"
    assert bound_by(search(measured(4000), measured(8000))) == "--max-rate"
    # The lowest failed rate decides, not the last one tried.
    assert bound_by(search(measured(4000), behind, measured(6000, p99_ms=90.0))) == "server"


def test_why_a_step_failed_names_each_reason() -> None:
    assert why_over(measured(100, p99_ms=80.0)) == "p99 80 ms"
    reasons = why_over(measured(100, failures=3, sent_share=0.5, answered_share=0.5))
    assert reasons == "3 failed, vegeta fell behind, answered 50/s"


def test_the_report_says_whether_the_bare_figures_are_the_servers() -> None:
    bare = SCENARIOS[0].name
    searches = {
        (bare, "put"): search(measured(4000), measured(8000, p99_ms=300.0, cores=0.3)),
        (bare, "get"): search(measured(4000), measured(8000, p99_ms=300.0, sent_share=0.8)),
    }
    put, get = reference_verdict(searches)
    assert put.startswith("- PUT: bound by the server.") and "0.30 cores." in put
    assert get.startswith("- GET: NOT bound by the server") and "6,400/s" in get
    rows = ceiling_table(searches)[2:]
    assert rows[0].endswith("| server |") and rows[1].endswith("| generator |")


def test_a_generator_using_a_servers_core_is_called_out_even_when_it_kept_pace() -> None:
    bare = SCENARIOS[0].name
    heavy = search(measured(4000), measured(8000, p99_ms=300.0, cores=5.0))
    (line,) = reference_verdict({(bare, "put"): heavy})
    assert "bound by the server" in line and "cut into the server's share" in line


def test_without_the_bare_scenario_the_report_says_there_is_no_reference() -> None:
    assert reference_verdict({}) == [
        "- not run (--only): the ratios have no reference in this report."
    ]
