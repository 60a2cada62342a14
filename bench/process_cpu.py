"""CPU time of server processes, from /proc: what a request costs the server, steadier
across machines than a ratio of rates (issue 30's measure).

`/proc/PID/stat` counts user and system time of every thread of a process (LevelDB's
compaction thread included) in clock ticks; a process's children are not counted, and
a dht node starts none.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User plus system CPU seconds used so far by the processes `pids`, all threads."""
    total = 0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # The command name (field 2) may hold spaces: the fields after it are counted
        # from its closing parenthesis. utime and stime are fields 14 and 15.
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS_PER_SECOND
