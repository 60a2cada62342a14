"""The parser of `python -m dht`: its commands, `node`, `cluster`, `membership`, `cockpit`
and `repair`, and their flags. The node's own flags come from dht/config.py's
declarations (node_flags.py); this module adds the flags of the other commands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dht.command_line.node_flags import add_node_flags
from dht.config import normalize_url, port_number, positive_float, positive_int
from dht.testbed.node_template import PLACEHOLDER_HELP

NODE_COMMAND_EPILOG = (
    """\
Another implementation of the v0 API (SPEC.md part one) runs under the same test bed with
--node-command TEMPLATE: a command line run once per node, in this folder, split as a
shell would split it but run without one, with these placeholders:
"""
    + PLACEHOLDER_HELP
    + """\
The course's launcher names its nodes http://localhost:PORT and implementations find
themselves in the list by that string, so {cluster} and {self} take that form, and the
cluster prints and dials those URLs; --host 127.0.0.1 gives http://127.0.0.1:PORT.
Its data folder is DATA_DIR/node-N, made for it; `cluster restart URL` runs the same
command on it again, while `add` and `remove` are refused (membership changes are dht's
own API). dht's node flags (the ones after --dashboard-port) do not reach it. It cannot
be told to dial its peers through Toxiproxy, so --chaos runs each of its nodes in a
network namespace of its own, as --netns does (Linux, as root). Example:
  python -m dht cluster --chaos \\
      --node-command 'java -jar my.jar --port {port} --dir {data_dir} --topology {cluster}'
"""
)


def port_or_zero(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a port number, 1 to 65535, or 0 for none")
    return value


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


def rate_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000, not {text}")
    return value


def add_probe_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--probe-rate",
        type=rate_or_zero,
        default=5.0,
        metavar="PER_SECOND",
        help="the cockpit's own light load, in requests a second over all nodes, on keys "
        "cockpit-probe-00 to -15: the page shows its rate, errors and p99 for nodes "
        "without /metrics, and a recorded experiment is its history; 0 turns it off "
        "(default %(default)s)",
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
    add_node_flags(node, "node")

    cluster = commands.add_parser(
        "cluster",
        help="run a local cluster of N nodes, or add, remove, restart or fault one of its nodes",
        usage="%(prog)s [flags]\n       %(prog)s add [--data-dir DATA_DIR]\n"
        "       %(prog)s {remove,restart,kill,pause,resume,wipe,skew} URL [--data-dir DATA_DIR]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start N node processes on consecutive ports, wait until all answer, "
        "print their URLs,\nand stop them all on Ctrl-C or SIGTERM.\n\n"
        "While it runs, a second command changes its membership (not for a --chaos or "
        "--node-command\ncluster):\n"
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
        "cluster was started with; every\nother flag is the running cluster's.\n\n"
        "And faults and restarts of one node's process (the cockpit's buttons; any "
        "cluster):\n"
        "  restart URL  stop it if it runs and start it again on its data folder\n"
        "  kill URL     kill -9: down until `restart` (the cluster does not restart a "
        "node on its own)\n"
        "  pause URL    SIGSTOP: it answers nothing and holds its connections, until "
        "`resume URL`\n"
        "  wipe URL     kill -9, delete its data folder and start it again empty (a "
        "lost disk)\n"
        "  skew URL     restart it with its clock 120 s ahead (--clock-skew), or, if it is, "
        "with its\n               clock right again (dht's own nodes only)",
        epilog=NODE_COMMAND_EPILOG,
    )
    cluster.add_argument(
        "action",
        nargs="?",
        choices=["add", "remove", "restart", "kill", "pause", "resume", "wipe", "skew"],
        help="change the membership of the cluster running on --data-dir, or restart or "
        "fault one of its nodes (default: start a cluster)",
    )
    cluster.add_argument(
        "url",
        nargs="?",
        type=node_url,
        metavar="URL",
        help="with any action but add: the node, http://host:port as the cluster printed it",
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
        "--host",
        help="address dht's nodes listen on, the host of their URLs (default 127.0.0.1); "
        "with --node-command, the host of the URLs in {cluster} and {self} (default "
        "localhost, the course's form; 127.0.0.1 asks for http://127.0.0.1:PORT)",
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
        "--netns",
        action="store_true",
        help="run each node in a network namespace of its own, where its peers' ports "
        "are Toxiproxy proxies, so no node is told of them (no --route); implies --chaos. "
        "Linux only, as root, with iproute2, nsenter, unshare and toxiproxy-server; "
        "--host must stay 127.0.0.1 (or localhost)",
    )
    cluster.add_argument(
        "--tls",
        action="store_true",
        help="make node-to-node traffic TLS: a throwaway CA and a certificate per node "
        "are made in DATA_DIR/tls (kept for the next run) and given to each node with "
        "--tls-cert, --tls-key and --tls-ca; clients keep plain HTTP (or use https with "
        "DATA_DIR/tls/ca.pem). dht's nodes only, not with --node-command",
    )
    cluster.add_argument(
        "--node-command",
        metavar="TEMPLATE",
        help="run each node with this command line, the nodes of another implementation "
        "of the v0 API, instead of dht's own `python -m dht node`; {port}, {data_dir}, "
        "{cluster} and {self} are filled in per node (see the end); with --chaos it "
        "implies --netns",
    )
    cluster.add_argument(
        "--dashboard-port",
        type=port_or_zero,
        default=8079,
        help="port of the live dashboard (the cockpit: nodes up or down, ring shares, "
        "breakers, hints, request and error rates, p99 latency, and with --chaos buttons "
        "to cut, slow and heal links), on --host; 0 turns it off (default %(default)s). "
        "It serves only whoever holds its token: open the URL with ?token= that "
        "`cluster` prints (also kept in DATA_DIR/cluster.json)",
    )
    add_probe_flag(cluster)
    add_node_flags(cluster, "shared")

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
        "longer owns\n"
        "  closed   once every node, leaving ones included, is done: tombstones are "
        "collected\n"
        "           again, and the nodes that left are refused (a delete stays "
        "deleted)\n\n"
        "A step is taken by every node of both lists (PUT /v0/admin/topology) before "
        "the next\nbegins, so no two nodes are ever more than one step apart. Nodes "
        "the --to list adds\nmust be running already, started with `python -m dht "
        "node ... --join` and a --cluster\nof the current nodes plus themselves; "
        "nodes it leaves out can be stopped once this\nexits 0. A node that "
        "does not answer at all stops the change within 10 s,\nwhere it is (before the "
        "first step, the cluster serves on unchanged), naming it; one\nthat is busy "
        "holds the change up to --step-deadline. Run the same command again and it\n"
        "resumes from the step the nodes reached, closing a change stopped in the "
        "last one.\nA node gone for good is removed, or a change closed without it, "
        "with --dead.\nPrints each "
        "step, then the seconds each took and the records each node sent and\n"
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
        "--dead",
        type=node_url_list,
        default=[],
        metavar="URL,URL,...",
        help="nodes of the cluster that are gone for good (their disk is lost), left out "
        "of --to: they are asked nothing, and the nodes that stay hand off what they held "
        "from their own copies. With --to naming a new node too, the new node replaces "
        "them. Before the first step the command prints how much of the key space has "
        "every copy on the nodes removed",
    )
    membership.add_argument(
        "--accept-loss",
        action="store_true",
        help="go on even where keys written with F of 2 or more may have no live copy "
        "left (two or more dead nodes next to each other on the ring): they are lost",
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
        "own, for nodes started some other way. It serves only whoever holds its token, "
        "as a Jupyter server does: open the URL with ?token= it prints (scripts send "
        "Authorization: Bearer TOKEN); the token is new at each start, unless given in "
        "the environment as DHT_COCKPIT_TOKEN.",
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
        "--cluster-dir",
        type=Path,
        metavar="DATA_DIR",
        help="the --data-dir of a running `python -m dht cluster` whose nodes these are: "
        "the page gets buttons to kill, pause, resume, restart and wipe each node "
        "(`cluster` passes it; default: none)",
    )
    add_probe_flag(cockpit)
    cockpit.add_argument(
        "--runs-dir",
        type=Path,
        metavar="DIR",
        help="where recorded experiments go, one run folder each (default: "
        "CLUSTER_DIR/runs, else ./artifacts/cockpit-runs)",
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
