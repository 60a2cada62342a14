"""python -m dht.conformance.adapters STORE: one graded run of another store (`run.py`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dht.conformance.adapters.run import ADAPTERS, run_store, store_named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dht.conformance.adapters",
        description=(
            "Grade a store the kit has an adapter for: a cluster of it on loopback ports, "
            "concurrent clients on a few keys, a seeded nemesis (kill -9 and restart, or "
            "pause and resume, one member at a time), then the history checker and, where "
            "the store promises it, the linearizability checker. Exit status: 0 the store "
            "kept what it promises, 1 it did not, 2 the run itself failed."
        ),
    )
    parser.add_argument("store", choices=sorted(ADAPTERS), help="the store to grade")
    parser.add_argument("--seconds", type=float, default=20.0, help="of faults (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="clients' and nemesis's (default 1)")
    parser.add_argument("--folder", type=Path, help="for the members' data and logs (kept)")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be more than 0")
    folder = args.folder or Path(tempfile.mkdtemp(prefix=f"dht-{args.store}-"))
    try:
        run = run_store(store_named(args.store, folder), args.seconds, args.seed)
    except (OSError, RuntimeError) as error:
        print(f"the run failed: {error}", file=sys.stderr)
        return 2
    print(run.summary())
    print("faults:\n" + ("\n".join(f"  {fault}" for fault in run.faults) or "  none"))
    if not run.ok:
        print(run.details())
    print(f"members' data and logs: {folder}")
    print(f"rerun: python -m dht.conformance.adapters {args.store} --seconds {args.seconds:g} "
          f"--seed {args.seed}")  # fmt: skip
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
