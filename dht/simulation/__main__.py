"""`python -m dht.simulation`: one seed, or a range of them, each run to its verdict.

    python -m dht.simulation --seed 7 --seconds 60
    python -m dht.simulation --seeds 1..200 --seconds 60
    python -m dht.simulation --seeds 1..300 --write-once --faults \
    partition,one-way,slow,reset,pause,crash,clock,ahead-then-crash,power,restart-skewed

Set iteration over strings depends on PYTHONHASHSEED, so the command runs itself again
with PYTHONHASHSEED=0 when it is not set: a seed replays the same on every machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from dht.simulation.faults import CLOCK_KINDS, KINDS, MEMBERSHIP_KINDS
from dht.simulation.run import Result, Settings, shrink, simulate


def _seeds(text: str) -> range:
    first, _, last = text.partition("..")
    return range(int(first), int(last or first) + 1)


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(text.split(","))
    unknown = [kind for kind in kinds if kind not in KINDS + MEMBERSHIP_KINDS + CLOCK_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"not a kind of fault: {', '.join(unknown)}")
    return kinds


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dht.simulation",
        description="A deterministic simulation of a dht cluster: real node code, virtual "
        "time, an in-memory network and disk, faults and requests (their replicas=A/F "
        "too) from the seed, the history checked.",
        epilog="Tombstone collection is best tried with idle keys and clocks minutes off: "
        f"--write-once --faults {','.join(KINDS)},restart-skewed",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, default=1, help="the seed to run (default 1)")
    which.add_argument("--seeds", type=_seeds, help="a range of seeds, A..B, each run in turn")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of load")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument(
        "--think", type=float, default=0.2, help="mean seconds between a client's requests"
    )
    parser.add_argument("--no-faults", action="store_true", help="run with no fault at all")
    parser.add_argument(
        "--faults",
        type=_kinds,
        default=KINDS,
        help=f"the kinds of fault drawn from, comma-separated (default {','.join(KINDS)}; "
        f"also {', '.join(MEMBERSHIP_KINDS)}: a spare node joins, a member leaves; "
        "behind-then-cut: a node's clock behind, then the node cut off; restart-skewed: "
        "a node restarted with its clock minutes off, alone among the faults until it is "
        "back; restart-skewed-amid: the same amid the others, on any number of members)",
    )
    parser.add_argument(
        "--narrow-deletes",
        action="store_true",
        help="one DELETE in two at replicas=2/2 (tombstones narrower than the values)",
    )
    parser.add_argument(
        "--write-once",
        action="store_true",
        help="one request in three on a client's own keys, each written once, left idle "
        "5-20 s, deleted, and read again",
    )
    parser.add_argument(
        "--default-replicas",
        action="store_true",
        help="every request at the default replicas (else one in two at an A/F drawn "
        "from the seed, majorities only with grow or shrink; a read is held only to the "
        "writes its quorum meets)",
    )
    parser.add_argument(
        "--shrink", action="store_true", help="shrink a failing seed to a shorter failing run"
    )
    parser.add_argument("--defect", help=argparse.SUPPRESS)  # the simulator's own test
    parser.add_argument("--log", help="show the nodes' log at this level (e.g. INFO)")
    return parser


def _replay(args: argparse.Namespace, seed: int, settings: Settings | None = None) -> str:
    seconds = args.seconds if settings is None else settings.seconds
    kinds = args.faults if settings is None else settings.fault_kinds
    command = f"python -m dht.simulation --seed {seed} --seconds {seconds:g} --nodes {args.nodes}"
    if tuple(kinds) != KINDS:
        command += f" --faults {','.join(kinds)}"
    if args.clients != 3:
        command += f" --clients {args.clients}"
    if args.think != 0.2:
        command += f" --think {args.think:g}"
    if args.no_faults:
        command += " --no-faults"
    if args.narrow_deletes:
        command += " --narrow-deletes"
    if args.write_once:
        command += " --write-once"
    if args.default_replicas:
        command += " --default-replicas"
    if args.defect:
        command += f" --defect {args.defect}"
    return command


def _settings(args: argparse.Namespace, seed: int) -> Settings:
    return Settings(
        seed=seed,
        seconds=args.seconds,
        nodes=args.nodes,
        clients=args.clients,
        think=args.think,
        faults=not args.no_faults,
        fault_kinds=tuple(args.faults),
        narrow_deletes=args.narrow_deletes,
        write_once=args.write_once,
        mixed_replicas=not args.default_replicas,
        defect=args.defect,
    )


def _show(result: Result) -> None:
    print(f"seed {result.settings.seed}: {result.verdict}")
    print(
        f"  simulated {result.simulated:.1f} s in {result.wall:.2f} s wall "
        f"({result.speed:.0f} sim-s/s), {result.operations} operations, "
        f"{len(result.faults)} faults, trace {result.trace_hash}"
    )


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "dht.simulation", *sys.argv[1:]])
    args = parser().parse_args(argv)
    if args.log:
        logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
        logging.getLogger("dht").setLevel(args.log.upper())
    seeds = args.seeds if args.seeds is not None else range(args.seed, args.seed + 1)
    started = time.perf_counter()
    failed = []
    for seed in seeds:
        result = simulate(_settings(args, seed))
        _show(result)
        if not result.ok:
            failed.append(seed)
            if result.details:
                print("  " + result.details.replace("\n", "\n  "))
            for fault in result.faults[:40]:
                print(f"  fault: {fault}")
            print(f"  replay: {_replay(args, seed)}")
            if args.shrink:
                shrunk = shrink(result.settings)
                print(f"  shrunk: {_replay(args, seed, shrunk)}")
    wall = time.perf_counter() - started
    if len(seeds) > 1:
        print(
            f"{len(seeds)} seeds in {wall:.1f} s ({len(seeds) / wall * 60:.0f} seeds/minute), "
            f"{len(failed)} failed{': ' + ' '.join(map(str, failed)) if failed else ''}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
