"""What `make test` counts on to run the suite on several workers (docs/testing.md, "On
several workers at once"): pytest-xdist's `--dist loadgroup` keeps an `xdist_group` on
one worker. pytest 9.2 broke that without a word (pytest-xdist#1386): the image's tests
then ran on three workers at once, each building the image into the same folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """\
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("index", range(6))
def test_grouped(index):
    pass


@pytest.mark.parametrize("index", range(6))
@pytest.mark.xdist_group("together")
def test_also_grouped(index):
    pass
"""
UNGROUPED = """\
import pytest


@pytest.mark.parametrize("index", range(12))
def test_free(index):
    pass
"""


def test_one_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_ungrouped.py").write_text(UNGROUPED)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "-o", "addopts=", "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", run.stdout, re.MULTILINE)
    grouped = {worker for worker, test in ran if "grouped.py" in test and "ungrouped" not in test}
    assert len([test for _, test in ran]) == 24, run.stdout[-2000:]
    assert len(grouped) == 1, f"one group ran on {sorted(grouped)}"
