"""The volume of fixed size in a mount namespace of its own (dht/testbed/small_disk.py):
what a process started through its prefix sees at the folder, what the machine sees
there, filling and freeing it. Linux, as root; skipped with the reason elsewhere."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.testbed.small_disk import SmallDisk, small_disk_unavailable

unavailable = small_disk_unavailable()
pytestmark = pytest.mark.skipif(unavailable is not None, reason=unavailable or "")
SIZE = 8 * 1024 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    made = SmallDisk(tmp_path / "data", SIZE)
    yield made
    made.close()


def run_inside(disk: SmallDisk, code: str) -> str:
    done = subprocess.run(
        [*disk.prefix(), sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_process_started_through_the_prefix_writes_on_the_volume_the_machine_does_not_see(
    disk: SmallDisk,
) -> None:
    run_inside(disk, f"open({str(disk.folder / 'value')!r}, 'w').write('kept')")
    assert run_inside(disk, f"print(open({str(disk.folder / 'value')!r}).read())") == "kept"
    assert list(disk.folder.iterdir()) == []  # outside the namespace: the empty folder
    assert 0 < disk.free_bytes() <= SIZE


def test_fill_takes_every_byte_and_free_gives_them_back(disk: SmallDisk) -> None:
    taken = disk.fill()
    assert SIZE - 64 * 1024 <= taken <= SIZE, taken
    assert disk.free_bytes() == 0
    write = f"open({str(disk.folder / 'more')!r}, 'wb', buffering=0).write(bytes(4096))"
    refused = subprocess.run([*disk.prefix(), sys.executable, "-c", write], capture_output=True)
    assert refused.returncode != 0 and b"No space left" in refused.stderr
    disk.free()
    assert disk.free_bytes() >= taken
    run_inside(disk, write)


def test_the_working_folder_of_a_process_is_kept(disk: SmallDisk, tmp_path: Path) -> None:
    """Entering a mount namespace starts at its root; the prefix keeps the folder a
    node command's relative paths are read from."""
    assert run_inside(disk, "import os; print(os.getcwd())") == str(Path.cwd())
    inside = [*disk.prefix(tmp_path), sys.executable, "-c", "import os; print(os.getcwd())"]
    assert subprocess.run(inside, capture_output=True, text=True).stdout.strip() == str(tmp_path)


def test_closing_takes_the_volume_and_its_data(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path / "data", SIZE)
    run_inside(disk, f"open({str(disk.folder / 'value')!r}, 'w').write('gone')")
    holder = disk.holder.pid
    disk.close()
    assert not Path(f"/proc/{holder}").exists()
    assert list(disk.folder.iterdir()) == []
