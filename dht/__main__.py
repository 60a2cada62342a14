"""The command line: `python -m dht node ...`, `python -m dht cluster ...`,
`python -m dht membership ...` and `python -m dht cockpit ...`.

Only parses flags (dht/command_line/) and hands over; heavy imports happen after parsing
so `--help` is quick and a node answers within a second of starting.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from dht.command_line.node_flags import node_config
from dht.command_line.parser import build_parser
from dht.extras import KIT, NODE, missing_line

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"), format=LOG_FORMAT, stream=sys.stderr
    )
    if (missing := missing_part(args)) is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    if args.command == "node":
        try:
            config = node_config(args)
        except ValueError as exc:
            parser.error(str(exc))
        from dht.node import run_node

        if config.secret is None:
            logging.getLogger("dht").warning(
                "no --secret: this node takes replica writes (any key, any version) from "
                "anyone who can reach %s:%d; set --secret or DHT_SECRET on every node",
                config.host,
                config.port,
            )

        from dht.storage.store import StorageUnavailable
        from dht.transport.tls import TlsSetupError

        try:
            run_node(config)
        except (
            OSError,
            StorageUnavailable,
            TlsSetupError,
        ) as exc:  # port taken, data dir locked, ...
            logging.getLogger("dht").error("cannot start: %s", exc)
            return 1
        return 0
    if args.command == "repair":
        from dht.storage.store import repair

        try:
            repair(args.data_dir)
        except Exception as exc:
            logging.getLogger("dht").error("cannot repair %s: %s", args.data_dir, exc)
            return 1
        print(f"repaired {args.data_dir}: start the node on it again")
        return 0
    if args.command == "cockpit":
        if len(set(args.nodes)) != len(args.nodes):
            parser.error("--node lists a node twice")
        from dht.testbed.cockpit import CockpitConfig, run_cockpit
        from dht.testbed.cockpit_access import TOKEN_ENVIRONMENT, new_token
        from dht.testbed.cockpit_faults import ControlAccess

        control = None
        if args.cluster_dir is not None:
            try:
                control = ControlAccess.of_cluster(args.cluster_dir)
            except ValueError as exc:
                parser.error(f"--cluster-dir: {exc}")
        runs = args.runs_dir or (
            args.cluster_dir / "runs"
            if args.cluster_dir is not None
            else Path.cwd() / "artifacts" / "cockpit-runs"
        )
        return run_cockpit(
            CockpitConfig(
                nodes=tuple(args.nodes),
                toxiproxy=args.toxiproxy,
                host=args.host,
                port=args.port,
                control=control,
                probe_rate=args.probe_rate,
                runs=runs.resolve(),
                # Given by `cluster`, or by whoever wants a token of their own; else new.
                token=os.environ.get(TOKEN_ENVIRONMENT) or new_token(),
                show_token=not os.environ.get(TOKEN_ENVIRONMENT),
            )
        )
    if args.command == "membership":
        return run_membership(args)
    if args.action is None and args.url is not None:  # argparse's choices stop this
        parser.error(f"unexpected URL {args.url}")
    if args.action not in (None, "add") and args.url is None:
        parser.error(f"cluster {args.action} needs the URL of the node to {args.action}")
    if args.action == "add" and args.url is not None:
        parser.error("cluster add takes no URL: it chooses the new node's port itself")
    if args.action is not None:
        from dht.testbed.cluster_control import run_cluster_action

        return run_cluster_action(args.data_dir, args.action, args.url)
    from dht.testbed.node_template import COURSE_HOST, NUMERIC_HOST

    if args.host is None:  # the course's form for another implementation (node_template.py)
        args.host = NUMERIC_HOST if args.node_command is None else COURSE_HOST
    if args.node_command is not None:
        from dht.testbed.node_template import template_problem

        if (problem := template_problem(args.node_command)) is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        if args.tls:
            print(
                "error: --tls gives dht's nodes their TLS flags; another implementation's "
                "nodes take none (--node-command)",
                file=sys.stderr,
            )
            return 2
    # Another implementation cannot be told to dial its peers through the links
    # (dht's --route): its links are those of a network namespace per node.
    implied_netns = args.node_command is not None and args.chaos and not args.netns
    if args.netns or implied_netns:
        if (reason := netns_refusal(args.host)) is not None:
            mode = (
                "--chaos with --node-command (each node in a network namespace, as --netns)"
                if implied_netns
                else "--netns"
            )
            print(f"error: {mode} cannot run here: {reason}", file=sys.stderr)
            return 2
        args.netns = args.chaos = True
    from dht.testbed.cluster import run_cluster

    return run_cluster(args)


def missing_part(args: argparse.Namespace) -> str | None:
    """The line that says which part of dht (dht/extras.py) the command runs on and is
    not installed, None when nothing is missing: the node's for `node` and `repair`, the
    kit's for the test bed (`cluster`, `cockpit`), and the node's too for a cluster of
    dht's own nodes. `membership` only talks to running nodes: neither."""
    command = f"python -m dht {args.command}"
    if args.command in ("node", "repair"):
        return missing_line(command, [NODE])
    if args.command not in ("cluster", "cockpit"):
        return None
    if (line := missing_line(command, [KIT])) is not None:
        return line
    if args.command == "cluster" and args.action is None and args.node_command is None:
        return missing_line(
            f"{command} without --node-command",
            [NODE],
            instead="give --node-command TEMPLATE to run another implementation's nodes",
        )
    return None


def netns_refusal(host: str) -> str | None:
    """Why `cluster --netns` cannot run, in one line; None if it can."""
    if host not in ("127.0.0.1", "localhost"):
        return (
            f"its nodes listen on 127.0.0.1 in their namespaces, and --host is {host} "
            "(leave --host out)"
        )
    from dht.testbed.netns import netns_unavailable

    return netns_unavailable()


def run_membership(args: argparse.Namespace) -> int:
    import asyncio

    import aiohttp

    from dht.membership.driver import ChangeFailed, change_membership, summary_lines

    try:
        report = asyncio.run(
            change_membership(
                args.nodes,
                args.new,
                dead=args.dead,
                accept_loss=args.accept_loss,
                secret=args.secret or None,
                step_deadline=args.step_deadline,
                say=lambda line: print(line, flush=True),
            )
        )
    except ChangeFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError, ValueError, KeyError) as exc:  # timeouts too
        print(f"error: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    for line in summary_lines(report):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
