"""The command line: `python -m dht node ...`, `python -m dht cluster ...`,
`python -m dht membership ...` and `python -m dht cockpit ...`.

Only parses flags and hands over; heavy imports happen after parsing so `--help` is quick
and a node answers within a second of starting.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from dht.config import MAX_SECRET_BYTES, NodeConfig, normalize_url, parse_route, resolve_self

_DEFAULTS = NodeConfig(port=0, data_dir=Path("."), cluster=(), self_url="")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a port number, 1 to 65535")
    return value


def port_or_zero(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a port number, 1 to 65535, or 0 for none")
    return value


def cluster_secret(text: str) -> str:
    if len(text.encode()) > MAX_SECRET_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECRET_BYTES} bytes")
    return text


def node_url(text: str) -> str:
    try:
        return normalize_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def node_url_list(text: str) -> list[str]:
    """`URL,URL,...`: at least one node, none twice."""
    try:
        urls = [normalize_url(url) for url in text.split(",") if url.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not urls:
        raise argparse.ArgumentTypeError("must list at least one node URL")
    if len(set(urls)) != len(urls):
        raise argparse.ArgumentTypeError("lists a node twice")
    return urls


def add_node_settings(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `node` and `cluster` (the cluster passes them to every node)."""
    d = _DEFAULTS
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=d.timeout,
        help="deadline in seconds of one request to a replica (default %(default)s)",
    )
    parser.add_argument(
        "--breaker-threshold",
        type=positive_int,
        default=d.breaker_threshold,
        help="consecutive failures that open a peer's circuit (default %(default)s)",
    )
    parser.add_argument(
        "--breaker-cooldown",
        type=positive_float,
        default=d.breaker_cooldown,
        help="seconds an open circuit waits before one probe (default %(default)s)",
    )
    parser.add_argument(
        "--vnodes",
        type=positive_int,
        default=d.vnodes,
        help="virtual nodes per node on the hash ring; must be the same on "
        "every node (default %(default)s)",
    )
    parser.add_argument(
        "--max-value-bytes",
        type=positive_int,
        default=d.max_value_bytes,
        help="largest accepted value; larger bodies get 413 (default %(default)s)",
    )
    parser.add_argument(
        "--max-key-bytes",
        type=positive_int,
        default=d.max_key_bytes,
        help="longest accepted key, in UTF-8 bytes; longer ones get 400 (default %(default)s)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=positive_int,
        default=d.max_in_flight,
        help="client requests worked on at once; more get 503 at once (default %(default)s)",
    )
    parser.add_argument(
        "--max-in-flight-bytes",
        type=positive_int,
        default=d.max_in_flight_bytes,
        help="bytes of values a node holds at once; a PUT past it gets 503 before its "
        "body is read (default %(default)s, 256 MiB)",
    )
    parser.add_argument(
        "--hint-max-bytes",
        type=non_negative_int,
        default=d.hint_max_bytes,
        help="cap on the hints kept for unreachable replicas; past it the oldest are "
        "dropped; 0 keeps none (default %(default)s)",
    )
    parser.add_argument(
        "--hint-max-age",
        type=positive_float,
        default=d.hint_max_age,
        help="seconds a hint is kept before it is dropped undelivered, at most half of "
        "--tombstone-grace (default %(default)s)",
    )
    parser.add_argument(
        "--hint-interval",
        type=positive_float,
        default=d.hint_interval,
        help="seconds between rounds of hint delivery (default %(default)s)",
    )
    parser.add_argument(
        "--anti-entropy-interval",
        type=non_negative_float,
        default=d.anti_entropy_interval,
        help="seconds between anti-entropy exchanges with each peer, which compare hash "
        "trees and copy what differs, newest wins; 0 turns them off (default %(default)s)",
    )
    parser.add_argument(
        "--anti-entropy-rate",
        type=positive_float,
        default=d.anti_entropy_rate,
        help="records per second an anti-entropy exchange may copy (default %(default)s)",
    )
    parser.add_argument(
        "--handoff-rate",
        type=positive_float,
        default=d.handoff_rate,
        help="records per second a node's handoff may send to the nodes that take over "
        "its keys during a membership change (default %(default)s)",
    )
    parser.add_argument(
        "--tombstone-grace",
        type=positive_float,
        default=d.tombstone_grace,
        help="seconds a tombstone (or an expired record) is kept at least; it goes once "
        "older than this and an anti-entropy exchange with every other replica began "
        "after it was written (default %(default)s, a day)",
    )
    parser.add_argument(
        "--sync-writes",
        action="store_true",
        help="fsync LevelDB's log on every write: survives power loss, not "
        "just a crash, at a large cost in write latency (default off)",
    )
    parser.add_argument(
        "--disk-reserve",
        type=non_negative_int,
        default=d.disk_reserve,
        help="bytes kept free on the data volume: below that, writes are refused with 507 "
        "and reads go on, so the node can always restart (default %(default)s, 32 MiB)",
    )
    parser.add_argument(
        "--secret",
        type=cluster_secret,
        default=os.environ.get("DHT_SECRET"),
        help="cluster secret that node-to-node traffic must carry, up to 1 KiB (default: "
        "$DHT_SECRET; `node` without one accepts replica writes from anyone who reaches "
        "its port; `cluster` generates one)",
    )
    parser.add_argument(
        "--max-clock-drift",
        type=positive_float,
        default=d.max_clock_drift,
        help="seconds a version received from a peer may be ahead of this node's clock; "
        "records further ahead are refused, so one skewed or forged version cannot "
        "push the cluster into the future (default %(default)s)",
    )
    parser.add_argument(
        "--clock-skew",
        type=float,
        default=d.clock_skew,
        help="seconds added to this node's wall clock, negative for behind: a fault for "
        "the test bed (default %(default)s)",
    )
    parser.add_argument(
        "--no-metrics",
        dest="metrics",
        action="store_false",
        help="serve no GET /metrics and count nothing for it (the path then answers 400 "
        "like any unknown one): only to measure what the counting costs (default: on)",
    )
    parser.add_argument(
        "--log-level",
        default=d.log_level,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dht",
        description="dht: a Dynamo-style distributed key-value store. Run one node, a "
        "local cluster of several, or a live dashboard over running nodes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    node = commands.add_parser(
        "node",
        help="run one node",
        description="Run one node of a cluster. Every node gets the same --cluster list.",
    )
    node.add_argument("--port", type=port_number, required=True, help="port to listen on")
    node.add_argument(
        "--host", default=_DEFAULTS.host, help="address to listen on (default %(default)s)"
    )
    node.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="folder of this node's LevelDB (created if missing)",
    )
    node.add_argument(
        "--cluster",
        required=True,
        help="comma-separated URLs of every node, http://host:port, the same on every node",
    )
    node.add_argument(
        "--self",
        dest="self_url",
        help="URL the other nodes reach this node at; default: the --cluster "
        "entry with this --port (differs behind a proxy)",
    )
    node.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="PEER_URL=DIAL_URL",
        help="reach peer PEER_URL by dialling DIAL_URL instead (a proxy on that link); "
        "repeatable. The chaos test bed uses it to put Toxiproxy on every link",
    )
    node.add_argument(
        "--join",
        action="store_true",
        help="start as a node joining the cluster of the other --cluster entries, in the "
        "joint phase of a membership change, rather than as a member of all of them; "
        "then move the cluster to the new list with `python -m dht membership` (see its "
        "--help). A data folder's saved membership wins over it, as over --cluster "
        "(default off)",
    )
    add_node_settings(node)

    cluster = commands.add_parser(
        "cluster",
        help="run a local cluster of N nodes, or add a node to or remove one from it",
        usage="%(prog)s [flags]\n       %(prog)s add [--data-dir DATA_DIR]\n"
        "       %(prog)s remove URL [--data-dir DATA_DIR]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start N node processes on consecutive ports, wait until all answer, "
        "print their URLs,\nand stop them all on Ctrl-C or SIGTERM.\n\n"
        "While it runs, a second command changes its membership (not for a --chaos "
        "cluster):\n"
        "  add          start one more node (the next free port after the highest one "
        "the cluster\n"
        "               has used, data in DATA_DIR/node-N) and move the cluster to it; "
        "the running\n"
        "               cluster supervises it and stops it on Ctrl-C like the others\n"
        "  remove URL   move the cluster to its nodes but URL, then stop that node "
        "(its data folder\n"
        "               stays)\n"
        "Both go through the steps of `python -m dht membership` (joint, handoff, "
        "stable), print\neach step as it is taken, and exit 0 once the cluster is "
        "stable on the new list,\n1 with one `error:` line otherwise. They find the "
        "running cluster through\nDATA_DIR/cluster.json, so give the --data-dir the "
        "cluster was started with; every\nother flag is the running cluster's.",
    )
    cluster.add_argument(
        "action",
        nargs="?",
        choices=["add", "remove"],
        help="change the membership of the cluster running on --data-dir (default: "
        "start a cluster)",
    )
    cluster.add_argument(
        "url",
        nargs="?",
        type=node_url,
        metavar="URL",
        help="with remove: the node to remove, http://host:port as the cluster printed it",
    )
    cluster.add_argument(
        "--nodes", type=positive_int, default=3, help="number of nodes (default %(default)s)"
    )
    cluster.add_argument(
        "--base-port",
        type=port_number,
        default=8080,
        help="port of the first node; the others follow (default %(default)s)",
    )
    cluster.add_argument(
        "--host", default="127.0.0.1", help="address the nodes listen on (default %(default)s)"
    )
    cluster.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data"),
        help="folder holding node-1, node-2, ... (default ./%(default)s)",
    )
    cluster.add_argument(
        "--chaos",
        action="store_true",
        help="put a Toxiproxy proxy on every node-to-node link (needs toxiproxy-server: "
        "`make test` builds it) and print the Toxiproxy API address",
    )
    cluster.add_argument(
        "--dashboard-port",
        type=port_or_zero,
        default=8079,
        help="port of the live dashboard (the cockpit: nodes up or down, ring shares, "
        "breakers, hints, request and error rates, p99 latency, and with --chaos buttons "
        "to cut, slow and heal links), on --host; 0 turns it off (default %(default)s)",
    )
    add_node_settings(cluster)

    membership = commands.add_parser(
        "membership",
        help="change the membership of a running cluster",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Move a running cluster from the nodes it has to the --to list, one "
        "step at a time:\n\n"
        "  stable(old) -> joint(old, new) -> handoff(old, new) -> stable(new)\n\n"
        "  joint    every node writes to and reads from the replicas of both lists\n"
        "  handoff  every node sends the keys it holds to the nodes of the new list "
        "that now own\n"
        "           them (at --handoff-rate records/s), and the step ends when every "
        "node is done\n"
        "  stable   only the new list places keys; each node deletes what it no "
        "longer owns\n\n"
        "A step is taken by every node of both lists (PUT /v0/admin/topology) before "
        "the next\nbegins, so no two nodes are ever more than one step apart. Nodes "
        "the --to list adds\nmust be running already, started with `python -m dht "
        "node ... --join` and a --cluster\nof the current nodes plus themselves; "
        "nodes it leaves out can be stopped once this\nexits 0. A node that does not "
        "answer holds the change where it is, up to\n--step-deadline; run the same "
        "command again and it resumes from the step the nodes\nreached. Prints each "
        "step, then the seconds each took and the records each node sent\nand "
        "deleted; exits 1 with one `error:` line if the change cannot go on. For a "
        "local\n`python -m dht cluster`, `cluster add` and `cluster remove` do all "
        "of this.",
    )
    membership.add_argument(
        "--node",
        dest="nodes",
        type=node_url,
        action="append",
        required=True,
        metavar="URL",
        help="a node of the running cluster, http://host:port; repeat it to have others "
        "to ask if this one does not answer",
    )
    membership.add_argument(
        "--to",
        dest="new",
        type=node_url_list,
        required=True,
        metavar="URL,URL,...",
        help="every node of the cluster after the change, comma-separated",
    )
    membership.add_argument(
        "--secret",
        default=os.environ.get("DHT_SECRET"),
        help="the cluster secret, which the topology request must carry when the nodes "
        "have one (default: $DHT_SECRET)",
    )
    membership.add_argument(
        "--step-deadline",
        type=positive_float,
        default=120.0,
        help="seconds a step may wait for a node that does not answer, or a handoff that "
        "makes no progress, before the change stops where it is (default %(default)s)",
    )

    cockpit = commands.add_parser(
        "cockpit",
        help="serve the live dashboard of running nodes",
        description="Serve one web page that shows, refreshed every second, whether each "
        "node answers, its share of the ring, each peer's breaker and pending hints, and "
        "request rate, error rate and p99 latency from each node's /metrics; with "
        "--toxiproxy also every link of the chaos test bed, with buttons to cut, slow, "
        "isolate and heal. `cluster` starts one on --dashboard-port; this runs one on its "
        "own, for nodes started some other way.",
    )
    cockpit.add_argument(
        "--port", type=port_number, default=8079, help="port to serve on (default %(default)s)"
    )
    cockpit.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default %(default)s)"
    )
    cockpit.add_argument(
        "--node",
        dest="nodes",
        type=node_url,
        action="append",
        required=True,
        metavar="URL",
        help="a node's URL, http://host:port; repeat it for every node, in --cluster "
        "order (they are shown as node1, node2, ...)",
    )
    cockpit.add_argument(
        "--toxiproxy",
        type=node_url,
        metavar="URL",
        help="the chaos test bed's Toxiproxy API, http://host:port, whose proxies are "
        "named node1-to-node2 and so on (default: none, no link controls)",
    )
    cockpit.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default %(default)s)",
    )

    repair = commands.add_parser(
        "repair",
        help="repair a damaged data folder",
        description="Rebuild a node's LevelDB from what can still be read of it (LevelDB's "
        "own repair), for a node that says its data folder is damaged. Stop the node first.",
    )
    repair.add_argument("--data-dir", type=Path, required=True, help="the node's --data-dir")
    return parser


def node_config(args: argparse.Namespace) -> NodeConfig:
    cluster = tuple(normalize_url(url) for url in args.cluster.split(",") if url.strip())
    if len(set(cluster)) != len(cluster):
        raise ValueError("--cluster lists a node twice")
    return NodeConfig(
        port=args.port,
        host=args.host,
        data_dir=args.data_dir,
        cluster=cluster,
        self_url=resolve_self(cluster, args.port, args.self_url),
        timeout=args.timeout,
        breaker_threshold=args.breaker_threshold,
        breaker_cooldown=args.breaker_cooldown,
        vnodes=args.vnodes,
        max_value_bytes=args.max_value_bytes,
        max_key_bytes=args.max_key_bytes,
        max_in_flight=args.max_in_flight,
        max_in_flight_bytes=args.max_in_flight_bytes,
        sync_writes=args.sync_writes,
        disk_reserve=args.disk_reserve,
        secret=args.secret or None,
        hint_max_bytes=args.hint_max_bytes,
        hint_max_age=args.hint_max_age,
        hint_interval=args.hint_interval,
        anti_entropy_interval=args.anti_entropy_interval,
        anti_entropy_rate=args.anti_entropy_rate,
        tombstone_grace=args.tombstone_grace,
        log_level=args.log_level,
        max_clock_drift=args.max_clock_drift,
        clock_skew=args.clock_skew,
        metrics=args.metrics,
        join=args.join,
        handoff_rate=args.handoff_rate,
        routes=tuple(parse_route(route, cluster) for route in args.route),
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"), format=LOG_FORMAT, stream=sys.stderr
    )
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

        try:
            run_node(config)
        except (OSError, StorageUnavailable) as exc:  # port taken, data dir locked, ...
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

        return run_cockpit(
            CockpitConfig(
                nodes=tuple(args.nodes), toxiproxy=args.toxiproxy, host=args.host, port=args.port
            )
        )
    if args.command == "membership":
        return run_membership(args)
    if args.action is None and args.url is not None:  # argparse's choices stop this
        parser.error(f"unexpected URL {args.url}")
    if args.action == "remove" and args.url is None:
        parser.error("cluster remove needs the URL of the node to remove")
    if args.action == "add" and args.url is not None:
        parser.error("cluster add takes no URL: it chooses the new node's port itself")
    if args.action is not None:
        from dht.testbed.cluster import run_cluster_action

        return run_cluster_action(args.data_dir, args.action, args.url)
    from dht.testbed.cluster import run_cluster

    return run_cluster(args)


def run_membership(args: argparse.Namespace) -> int:
    import asyncio

    import aiohttp

    from dht.testbed.cluster import summary_lines
    from dht.testbed.membership import ChangeFailed, change_membership

    try:
        report = asyncio.run(
            change_membership(
                args.nodes,
                args.new,
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
