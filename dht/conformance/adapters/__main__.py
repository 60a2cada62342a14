"""python -m dht.conformance.adapters STORE: one graded run of another store (`run.py`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

from dht.conformance.adapters.run import ADAPTERS, run_store, store_named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dht.conformance.adapters",
        description=textwrap.fill(
            "Grade a store the kit has an adapter for: a cluster of it on loopback ports, "
            "concurrent clients on a few keys, a seeded nemesis (kill -9 and restart, or "
            "pause and resume, one member at a time), then the history checker and the "
            "linearizability checker (which decides only for a store that promises "
            "linearizability). Exit status: 0 the store kept what it promises, 1 it did not, "
            "2 the run itself failed.",
            88,
        ),
        epilog="stores:\n" + "\n".join(f"  {name}: {what}" for name, what in ADAPTERS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("store", choices=sorted(ADAPTERS), help="the store to grade")
    parser.add_argument("--seconds", type=float, default=20.0, help="of faults (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="clients' and nemesis's (default 1)")
    parser.add_argument("--folder", type=Path, help="for the members' data and logs (kept)")
    parser.add_argument(
        "--at-leader",
        action="store_true",
        help="strike the member that leads then (etcd's leader, Redis's primary) every time",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be more than 0")
    folder = args.folder or Path(tempfile.mkdtemp(prefix=f"dht-{args.store}-"))
    try:
        run = run_store(store_named(args.store, folder), args.seconds, args.seed, args.at_leader)
    except (OSError, RuntimeError) as error:
        print(f"the run failed: {error}", file=sys.stderr)
        return 2
    print(run.summary())
    print("faults:\n" + ("\n".join(f"  {fault}" for fault in run.faults) or "  none"))
    if not run.ok:
        print(run.details())
    print(f"members' data and logs: {folder}")
    again = " --at-leader" if args.at_leader else ""
    print(f"rerun: python -m dht.conformance.adapters {args.store} --seconds {args.seconds:g} "
          f"--seed {args.seed}{again}")  # fmt: skip
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
