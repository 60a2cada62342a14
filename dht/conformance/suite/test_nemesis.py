"""SPEC.md section 21: the nemesis. A 3-node cluster with every fault hook this machine
has (dht/conformance/nemesis.py) under a random schedule of faults drawn from a seed
(dht/conformance/nemesis_schedule.py), one node at a time, with clients through every
node; the history judged as section 14's. A failing run is shrunk (delta debugging over
its faults, dht/conformance/shrink.py) within the kit's --shrink-minutes, and the
failure names the seed and the smallest schedule that still fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.nemesis import (
    RUN_OVERHEAD_SECONDS,
    drive,
    given_schedule,
    nemesis_seconds,
    nemesis_seed,
    shrink_minutes,
    shrink_run,
)
from dht.conformance.nemesis_cluster import NemesisCluster, unavailable_kinds
from dht.conformance.nemesis_schedule import draw
from dht.conformance.rules import rule

pytestmark = pytest.mark.nemesis

# The first run, then the shrink's budget and the one run it may finish past it.
TIMEOUT = 2 * (nemesis_seconds() + RUN_OVERHEAD_SECONDS) + shrink_minutes() * 60.0


@rule("21.1")
@pytest.mark.timeout(TIMEOUT)
def test_under_a_seeded_random_schedule_of_faults_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    replayed = given_schedule()
    seed = nemesis_seed() if replayed is None else replayed.seed
    with NemesisCluster(tmp_path / "run", unavailable_kinds()) as nemesis:
        schedule = replayed or draw(seed, nemesis_seconds(), nemesis.left_out)
        missing = {fault.kind for fault in schedule.faults} & set(nemesis.left_out)
        if missing:
            pytest.skip(f"the schedule has faults this machine cannot apply: {nemesis.left_out}")
        first = drive(nemesis, schedule, "nemesis")
    if not first.failure:
        return
    left_out = "; ".join(f"{kind}: {why}" for kind, why in schedule.left_out.items())
    count = len(schedule.faults)
    found = f"seed {seed}, {count} fault{'' if count == 1 else 's'} in {schedule.seconds:.0f} s"
    # The shrink first: a report line is cut at a few hundred characters.
    if shrink_minutes() > 0:
        found += "; " + shrink_run(first, tmp_path / "s", shrink_minutes()).summary()
    found += f"; the first run: {first.failure}"
    pytest.fail(f"{found}{'; left out: ' + left_out if left_out else ''}")
