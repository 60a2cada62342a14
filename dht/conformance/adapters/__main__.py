"""python -m dht.conformance.adapters STORE: one graded run of another store (`run.py`)."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import textwrap
from pathlib import Path

from dht.conformance.adapters.partition import GID_BASE
from dht.conformance.adapters.run import (
    ADAPTERS,
    CLOCK_FOR,
    CLOCK_OFFSETS,
    DEFAULT_FAULTS,
    FAULT_FOR,
    FAULTS,
    load_adapter,
    run_store,
    store_named,
)
from dht.conformance.adapters.write_once import MOST_KEYS as WRITE_ONCE_KEYS
from dht.conformance.adapters.write_once import SHARE as WRITE_ONCE_SHARE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dht.conformance.adapters",
        description=textwrap.fill(
            "Grade a store the kit has an adapter for: a cluster of it on loopback ports, "
            "concurrent clients on a few keys, a seeded nemesis (kill -9 and restart, pause "
            "and resume, a network partition and its heal, a wall clock stepped and set "
            "true again, or a power cut and a restart, one member at a time), then "
            "the history checker and the "
            "linearizability checker (which decides only for a store that promises "
            "linearizability). Exit status: 0 the store kept what it promises, 1 it did not, "
            "2 the run itself failed.",
            88,
        ),
        epilog="stores:\n" + "\n".join(f"  {name}: {what}" for name, what in ADAPTERS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("store", nargs="?", choices=sorted(ADAPTERS), help="the store to grade")
    chosen.add_argument(
        "--adapter",
        metavar="FILE.py:CLASS",
        help="your own adapter instead (dht/conformance/adapters/example.py shows one)",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="of faults (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="clients' and nemesis's (default 1)")
    parser.add_argument("--folder", type=Path, help="for the members' data and logs (kept)")
    parser.add_argument(
        "--faults",
        type=_faults,
        default=DEFAULT_FAULTS,
        metavar="KIND,KIND",
        help=(
            "the faults the nemesis draws among, the seed choosing (default "
            f"{','.join(DEFAULT_FAULTS)}):"
            " kill (kill -9, then a restart on its data), pause (SIGSTOP, then SIGCONT),"
            " partition (the member, for Redis its server and sentinel, cut off from the"
            " other members both ways while the clients still reach it, then healed; needs"
            " root and iptables, and runs the members under group ids"
            f" {GID_BASE}+member; where it cannot, the run says so and draws the others),"
            " clock (the member's wall clock, for Redis its server's and its sentinel's,"
            f" stepped by one of {', '.join(f'{offset:+.0f}' for offset in CLOCK_OFFSETS)} s"
            f" for {CLOCK_FOR[0]:g} to {CLOCK_FOR[1]:g} s, then true again: libfaketime"
            " preloaded, which cannot reach a Go program such as etcd; where it cannot,"
            " the run says so and draws the others),"
            " power (every process of the member killed with SIGKILL at once, what its"
            " data folder had not fsynced dropped, then restarted on what is left"
            f" {FAULT_FOR[0]:g} to {FAULT_FOR[1]:g} s later: each member's folder a mount"
            " of the lazy filesystem, which needs root and FUSE; where it cannot, the run"
            " says so and draws the others)."
            " With kill,pause a seed draws the schedule it drew before partitions existed,"
            " with the default the one it drew before clock faults existed, with"
            " kill,pause,partition,clock the one it drew before power cuts existed"
        ),
    )
    parser.add_argument(
        "--at-leader",
        action="store_true",
        help="strike the member that leads then (etcd's leader, Redis's primary) every time",
    )
    parser.add_argument(
        "--write-once",
        action="store_true",
        help=(
            f"one operation in {round(1 / WRITE_ONCE_SHARE)} of each client a PUT of a fresh"
            " key instead, written once and never overwritten or deleted, and read at the"
            " end with the others: an acknowledged write the store discarded is then found"
            " as lost (on the few keys overwritten all along, a later write hides it, and"
            f" it shows at most as a stale read). At most {WRITE_ONCE_KEYS} such keys a run,"
            " allowed evenly over its seconds (a fast store's clients write fewer than one"
            " in 3); the clients' other draws and the nemesis's schedule stay the seed's"
        ),
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be more than 0")
    folder = args.folder or Path(tempfile.mkdtemp(prefix=f"dht-{args.store or 'adapter'}-"))
    # A SIGTERM ends the run as Ctrl-C does, through the `finally`s that stop the
    # members and remove the firewall rules of partitions.
    terminated = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        store = (
            load_adapter(args.adapter, folder) if args.adapter else store_named(args.store, folder)
        )
        run = run_store(
            store, args.seconds, args.seed, args.at_leader, args.faults, args.write_once
        )
    except (OSError, RuntimeError, ValueError) as error:
        print(f"the run failed: {error}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, terminated)
    print(run.summary())
    print("faults:\n" + ("\n".join(f"  {fault}" for fault in run.faults) or "  none"))
    if details := run.details():  # a failure, or a store not linearizable that never said it was
        print(details)
    print(f"members' data and logs: {folder}")
    again = " --at-leader" if args.at_leader else ""
    if tuple(args.faults) != DEFAULT_FAULTS:
        again += f" --faults {','.join(args.faults)}"
    if args.write_once:
        again += " --write-once"
    which = f"--adapter {args.adapter}" if args.adapter else args.store
    print(f"rerun: python -m dht.conformance.adapters {which} --seconds {args.seconds:g} "
          f"--seed {args.seed}{again}")  # fmt: skip
    return 0 if run.ok else 1


def _exit_on_sigterm(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def _faults(given: str) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(part.strip() for part in given.split(",") if part.strip()))
    unknown = [kind for kind in kinds if kind not in FAULTS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"{given!r}: a comma-separated list of {', '.join(FAULTS)}"
        )
    return tuple(kind for kind in FAULTS if kind in kinds)


if __name__ == "__main__":
    sys.exit(main())
