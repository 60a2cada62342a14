"""A ballast file: zeros written into a volume until it has not a byte left (ENOSPC),
then removed, which is how the test bed fills a node's disk from outside (SPEC.md
sections 20 and 21). Used in-process where the volume is this process's to see (the
power-loss filesystem's mount, `power_loss.py`), and as `python -m dht.testbed.ballast
PATH` where it is seen only from another mount namespace (`small_disk.py`)."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

BALLAST = ".ballast"


def fill(path: Path) -> int:
    """Appends zeros to `path` until the volume refuses a byte more; keeps what it wrote
    and returns how much that was. Big writes first, then smaller ones, so the last
    block is taken too."""
    written = 0
    chunk = bytes(1 << 20)
    with open(path, "ab", buffering=0) as ballast:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    written += ballast.write(chunk[:size]) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def main(argv: list[str] | None = None) -> None:
    """Fills the volume of the path given; prints how many bytes it took."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m dht.testbed.ballast PATH")
    print(fill(Path(args[0])))


if __name__ == "__main__":
    main()
