"""How long the fuzz suite runs: short in CI, as long as asked on demand.

One knob, DHT_FUZZ_EXAMPLES, scales every fuzz test together (the state machine and the
replica channel's live fuzz in tests/fuzz, and the raw-request fuzz,
dht/conformance/suite/test_robustness_fuzz.py), so a long run is one variable
away (`DHT_FUZZ_EXAMPLES=5000 pytest tests/fuzz dht/conformance/suite/test_robustness_fuzz.py -s`)
and the default keeps them well under a minute on a shared 2-core machine while they pass.
DHT_FUZZ_STEPS sets the steps of a state-machine run. A failure costs more: hypothesis
then shrinks it to a minimal example, hundreds of short runs against the real nodes
(up to a minute or two for the 3-node state machine); the example is worth it, and
hypothesis keeps it in .hypothesis/ so the next run replays it at once.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 200
# Raw requests per fuzz test; state-machine runs get 3 for every 20 of these (200 -> 30).
RAW_REQUESTS = max(1, int(os.environ.get("DHT_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)))
MACHINE_RUNS = max(1, RAW_REQUESTS * 3 // 20)
MACHINE_STEPS = max(1, int(os.environ.get("DHT_FUZZ_STEPS", 20)))

# Real processes answer in milliseconds but not reliably so on a shared machine: no
# per-example deadline, and no complaint that generation or a run is slow.
_PATIENT = {
    "deadline": None,
    "suppress_health_check": [
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
}


def raw_request_settings(share: float = 1.0) -> settings:
    """For a fuzz run that sends `share` of the raw requests."""
    return settings(max_examples=max(1, round(RAW_REQUESTS * share)), **_PATIENT)  # type: ignore[arg-type]


def machine_settings() -> settings:
    return settings(
        max_examples=MACHINE_RUNS,
        stateful_step_count=MACHINE_STEPS,
        **_PATIENT,  # type: ignore[arg-type]
    )
