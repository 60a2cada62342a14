"""The machine's shares between test runs that run at once: pytest-xdist's workers.

`make test` runs the suite on several workers (processes) at once, each starting its own
nodes, Toxiproxy servers and namespaces. What they choose from one pool of the machine's
(listening ports, the namespace test bed's /24s) could be chosen by two workers in the
window between choosing and taking it. Each worker therefore takes only its own share of
each pool: blocks of BLOCK consecutive members, worker `index` of `count` the blocks
`b` with `b % count == index`. Blocks, not single members, since `dht cluster` numbers
its nodes' ports from --base-port. The processes a worker starts (a node, `python -m dht
cluster`, the kit) inherit its environment, so they choose inside the same share.
Outside xdist the share is all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

# Consecutive members a share keeps together: the most ports one `dht cluster` numbers.
BLOCK = 16
_WORKER = re.compile(r"gw(\d+)")


def share() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker from the variables xdist sets
    (PYTEST_XDIST_WORKER=gwN, PYTEST_XDIST_WORKER_COUNT); (0, 1) outside one."""
    matched = _WORKER.fullmatch(os.environ.get("PYTEST_XDIST_WORKER", ""))
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        count = 1
    if matched is None or count < 1:
        return 0, 1
    index = int(matched.group(1))
    return (index, count) if index < count else (0, 1)


def in_share(member: int) -> bool:
    """Whether `member` of a shared pool (a port, a /24's third octet) is this worker's."""
    index, count = share()
    return (member // BLOCK) % count == index


def shared_range(start: int, stop: int) -> Sequence[int]:
    """The members of range(start, stop) in this worker's share, in order."""
    if share()[1] == 1:
        return range(start, stop)
    return [member for member in range(start, stop) if in_share(member)]
