"""Every setting of a node, declared once: its field of `NodeConfig` carries its default
and, in `Setting`, its flag, bounds and help. The command line's flags, the flags the
local cluster passes on to its nodes and the flags table of docs/operating.md are all
made from these declarations (dht/command_line/node_flags.py,
dht/testbed/node_processes.py, and a test that the page's table is `flags_table()`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from dht.limits import (
    HANDSHAKE_DEADLINE,
    MAX_SECRET_BYTES,
    REQUEST_LINE_OVERHEAD,
    REQUEST_WINDOW_MS,
    KiB,
    MiB,
)

# How a node's writes reach the disk before it acknowledges them (SPEC.md rule 10.2).
Durability = Literal["group", "none", "each"]
DURABILITIES: tuple[Durability, ...] = ("group", "none", "each")
# How LevelDB stores its blocks: as they are, or compressed with Snappy.
Compression = Literal["none", "snappy"]
COMPRESSIONS: tuple[Compression, ...] = ("none", "snappy")
# Flags that are gone, and what each now means: (setting, value, what to say).
DEPRECATED_FLAGS: dict[str, tuple[str, Any, str]] = {
    "--sync-writes": (
        "durability",
        "group",
        "--sync-writes is deprecated: writes are synced by default now (--durability "
        "group); --durability each fsyncs every write on its own as --sync-writes did",
    ),
}


# -- the bounds of a flag's value: argparse `type`s, whose names appear in its errors -----


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


def cluster_secret(text: str) -> str:
    if len(text.encode()) > MAX_SECRET_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECRET_BYTES} bytes")
    return text


# -- the declaration of one setting --------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """How one `NodeConfig` field is given on the command line. `scope` "node": only
    `node` takes it (where and who the node is); "shared": `cluster` takes it too and
    passes it on to every node it starts (through the environment, if `environment`)."""

    help: str
    scope: Literal["node", "shared"] = "shared"
    parse: Callable[[str], Any] | None = None  # argparse's `type`: parses and bounds
    flag: str = ""  # "" for --the-field-name
    action: Literal["store_true", "store_false", "append"] | None = None
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    required: bool = False
    environment: str | None = None  # the variable the default is read from


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    scope: Literal["node", "shared"] = "shared",
    parse: Callable[[str], Any] | None = None,
    flag: str = "",
    action: Literal["store_true", "store_false", "append"] | None = None,
    choices: tuple[str, ...] = (),
    metavar: str | None = None,
    required: bool = False,
    environment: str | None = None,
) -> Any:
    """A `NodeConfig` field with its default and its `Setting` (no default: every
    NodeConfig is given one)."""
    declared = Setting(help, scope, parse, flag, action, choices, metavar, required, environment)
    return field(default=default, metadata={"setting": declared})


@dataclass(frozen=True)
class Flag:
    """A setting as the command line knows it: the field, its flag and its declaration."""

    name: str
    flag: str
    default: Any  # dataclasses.MISSING for a field every NodeConfig is given
    setting: Setting


def node_settings() -> Iterator[Flag]:
    """Every setting of `NodeConfig`, in the order `--help` and docs/operating.md list them."""
    for spec in dataclasses.fields(NodeConfig):
        declared: Setting = spec.metadata["setting"]
        flag = declared.flag or "--" + spec.name.replace("_", "-")
        yield Flag(spec.name, flag, spec.default, declared)


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    port: int = setting(scope="node", parse=port_number, required=True, help="port to listen on")
    host: str = setting(
        "127.0.0.1", scope="node", help="address to listen on (default %(default)s)"
    )
    data_dir: Path = setting(
        scope="node",
        parse=Path,
        required=True,
        help="folder of this node's LevelDB (created if missing)",
    )
    cluster: tuple[str, ...] = setting(
        scope="node",
        required=True,
        help="comma-separated URLs of every node, http://host:port, the same on every node",
    )
    self_url: str = setting(
        scope="node",
        flag="--self",
        help="URL the other nodes reach this node at; default: the --cluster "
        "entry with this --port (differs behind a proxy)",
    )
    # Peer URL -> URL actually dialled for it (a Toxiproxy link in the chaos test bed).
    routes: tuple[tuple[str, str], ...] = setting(
        (),
        scope="node",
        flag="--route",
        action="append",
        metavar="PEER_URL=DIAL_URL",
        help="reach peer PEER_URL by dialling DIAL_URL instead (a proxy on that link); "
        "repeatable. The chaos test bed uses it to put Toxiproxy on every link",
    )
    join: bool = setting(
        False,
        scope="node",
        action="store_true",
        help="start as a node joining the cluster of the other --cluster entries, in the "
        "joint phase of a membership change, rather than as a member of all of them; "
        "then move the cluster to the new list with `python -m dht membership` (see its "
        "--help). A data folder's saved membership wins over it, as over --cluster "
        "(default off)",
    )
    timeout: float = setting(
        1.0,
        parse=positive_float,
        help="deadline in seconds of one request to a replica (default %(default)s)",
    )
    breaker_threshold: int = setting(
        5,
        parse=positive_int,
        help="consecutive failures that open a peer's circuit (default %(default)s)",
    )
    breaker_cooldown: float = setting(
        2.0,
        parse=positive_float,
        help="seconds an open circuit waits before one probe (default %(default)s)",
    )
    vnodes: int = setting(
        512,
        parse=positive_int,
        help="virtual nodes per node on the hash ring; must be the same on "
        "every node (default %(default)s)",
    )
    max_value_bytes: int = setting(
        16 * MiB,
        parse=positive_int,
        help="largest accepted value; larger bodies get 413 (default %(default)s)",
    )
    max_key_bytes: int = setting(
        64 * 1024,
        parse=positive_int,
        help="longest accepted key, in UTF-8 bytes; longer ones get 400 (default %(default)s)",
    )
    max_in_flight: int = setting(
        512,
        parse=positive_int,
        help="client requests worked on at once; more get 503 at once (default %(default)s)",
    )
    max_in_flight_bytes: int = setting(
        256 * MiB,
        parse=positive_int,
        help="bytes of values a node holds at once; past it a PUT gets 503, a large one "
        "before its body is read (default %(default)s, 256 MiB)",
    )
    min_body_rate: int = setting(
        256 * KiB,
        parse=positive_int,
        help="bytes a second a request body must come at, on average, after 5 s for its "
        "first bytes; a slower one is cut with 408 and its connection closed, so a stalled "
        "client holds no budget (default %(default)s, 256 KiB)",
    )
    hint_max_bytes: int = setting(
        256 * MiB,
        parse=non_negative_int,
        help="cap on the hints kept for unreachable replicas; past it the oldest are "
        "dropped; 0 keeps none (default %(default)s)",
    )
    hint_max_age: float = setting(
        3 * 3600.0,
        parse=positive_float,
        help="seconds a hint is kept before it is dropped undelivered, at most half of "
        "--tombstone-grace (default %(default)s)",
    )
    hint_interval: float = setting(
        0.5,
        parse=positive_float,
        help="seconds between rounds of hint delivery (default %(default)s)",
    )
    anti_entropy_interval: float = setting(
        60.0,
        parse=non_negative_float,
        help="seconds between anti-entropy exchanges with each peer, which compare hash "
        "trees and copy what differs, newest wins; 0 turns them off (default %(default)s)",
    )
    anti_entropy_rate: float = setting(
        1000.0,
        parse=positive_float,
        help="records per second an anti-entropy exchange may copy (default %(default)s)",
    )
    handoff_rate: float = setting(
        5000.0,
        parse=positive_float,
        help="records per second a node's handoff may send to the nodes that take over "
        "its keys during a membership change (default %(default)s)",
    )
    # A tombstone (or an expired record) older than this, and seen by every replica (an
    # exchange with each began after it was written), is removed for good.
    tombstone_grace: float = setting(
        86400.0,
        parse=positive_float,
        help="seconds a tombstone (or an expired record) is kept at least; it goes once "
        "older than this and an anti-entropy exchange with every other replica began "
        "after it was written; exchanges copy it to a peer without the key until it is "
        "older than this and than half of it plus twice --max-clock-drift (default "
        "%(default)s, a day)",
    )
    durability: Durability = setting(
        "group",
        choices=DURABILITIES,
        help="when a write is acknowledged: group (the default) once it is synced to the "
        "disk, writes that arrive together sharing one fsync in LevelDB's writer thread; "
        "none once it is in LevelDB's log in the OS cache, so a power loss (not a crash) "
        "can lose acknowledged writes; each with one fsync per write, on the event loop "
        "(slow; to compare). --sync-writes, deprecated, means group (default %(default)s)",
    )
    compression: Compression = setting(
        "none",
        choices=COMPRESSIONS,
        help="how LevelDB stores its blocks: none (the default) as they are; snappy "
        "compressed, which keeps compressible values in less disk but costs CPU on every "
        "compaction and on every read of a block not cached (one node under sustained "
        "PUTs of 100-byte values: about 30 µs a write, a quarter of its CPU). A data "
        "folder written either way opens either way (default %(default)s)",
    )
    disk_reserve: int = setting(
        32 * MiB,
        parse=non_negative_int,
        help="bytes kept free on the data volume: below that, writes are refused with 507 "
        "and reads go on, so the node can always restart (default %(default)s, 32 MiB)",
    )
    secret: str | None = setting(
        None,
        parse=cluster_secret,
        environment="DHT_SECRET",
        help="cluster secret that node-to-node traffic and membership steps must prove (it "
        "is never sent; a proof is taken once, restarts included), up to 1 KiB; required "
        "with TLS (default: "
        "$DHT_SECRET; `node` without one accepts replica writes from anyone who reaches "
        "its port; `cluster` generates one)",
    )
    tls_cert: Path | None = setting(
        None,
        scope="node",
        parse=Path,
        metavar="PEM",
        help="this node's certificate (PEM, its chain after it), signed by the cluster's CA "
        "and naming the host of its --cluster entry: with --tls-key and --tls-ca, every "
        "node-to-node connection is TLS, both ends checked against the CA; needs --secret "
        "too, which alone guards membership steps (default: none, plain)",
    )
    tls_key: Path | None = setting(
        None,
        scope="node",
        parse=Path,
        metavar="PEM",
        help="the private key of --tls-cert (default: none)",
    )
    tls_ca: Path | None = setting(
        None,
        scope="node",
        parse=Path,
        metavar="PEM",
        help="the cluster's CA certificate: a peer must present a certificate it signed, "
        "and clients may use https on the same port (default: none)",
    )
    max_clock_drift: float = setting(
        60.0,
        parse=positive_float,
        help="seconds a version received from a peer may be ahead of this node's clock; "
        "records further ahead are refused, so one skewed or forged version cannot "
        "push the cluster into the future; a node whose clock is further than this from "
        "most of the cluster's, or ahead of as many of the nodes that answered as agree "
        "with it, serves no client (default %(default)s)",
    )
    clock_skew: float = setting(
        0.0,
        parse=float,
        help="seconds added to this node's wall clock, negative for behind: a fault for "
        "the test bed (default %(default)s)",
    )
    metrics: bool = setting(
        True,
        flag="--no-metrics",
        action="store_false",
        help="serve no GET /metrics and count nothing for it (the path then answers 400 "
        "like any unknown one): only to measure what the counting costs (default: on)",
    )
    lean_http: bool = setting(
        True,
        flag="--no-lean-http",
        action="store_false",
        help="answer every request through aiohttp's request handler, not simple entity "
        "requests straight off the socket: only to measure what that saves, or to rule it "
        "out when an HTTP client misbehaves (default: on)",
    )
    log_level: str = setting(
        "INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level (default %(default)s)",
    )

    @property
    def tls(self) -> bool:
        """Whether node-to-node traffic is TLS (`--tls-cert`, `--tls-key`, `--tls-ca`)."""
        return self.tls_ca is not None

    @property
    def max_clock_drift_ms(self) -> int:
        return round(self.max_clock_drift * 1000)

    def dial_url(self, peer: str) -> str:
        return dict(self.routes).get(peer, peer)


# How the defaults relate to dht/limits.py's limits (asserted here: that module imports
# nothing of dht). A peer dials and shakes hands within its --timeout, and a connection
# that has not said HELLO HANDSHAKE_DEADLINE after its first byte is closed as a stranger:
# a peer at the default gives up before it could be taken for one.
assert NodeConfig.timeout < HANDSHAKE_DEADLINE
# Nodes whose clocks are within --max-clock-drift of each other serve (further, one is
# fenced), so their internal requests' proofs must fall within the window.
assert NodeConfig.max_clock_drift * 1000 < REQUEST_WINDOW_MS


def request_line_limit(max_key_bytes: int) -> int:
    """The longest request line a node reads (aiohttp's and the lean parser's limit): a
    key travels percent-encoded in it, up to 3 bytes per byte."""
    return 3 * max_key_bytes + REQUEST_LINE_OVERHEAD


def normalize_url(url: str) -> str:
    """`http://host:port` with no trailing slash; raises ValueError for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"expected http://host:port, got {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"a node URL has no path or query: {url!r}")
    return f"http://{parts.netloc}"


def url_port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def resolve_self(cluster: tuple[str, ...], port: int, self_url: str | None) -> str:
    """`--self` if given (it must be in the cluster), else the entry whose port is `port`."""
    if self_url is not None:
        normalized = normalize_url(self_url)
        if normalized not in cluster:
            raise ValueError(f"--self {normalized} is not in --cluster")
        return normalized
    matches = [url for url in cluster if url_port(url) == port]
    if len(matches) != 1:
        raise ValueError(
            f"cannot tell which --cluster entry is this node from port {port} "
            f"({len(matches)} entries match); pass --self"
        )
    return matches[0]


def parse_route(text: str, cluster: tuple[str, ...]) -> tuple[str, str]:
    """`PEER_URL=DIAL_URL`: reach the node PEER_URL by dialling DIAL_URL. PEER_URL need not
    be in `cluster`: it may be a node that joins later (a membership change)."""
    peer, sep, dial = text.partition("=")
    if not sep:
        raise ValueError(f"--route takes PEER_URL=DIAL_URL, got {text!r}")
    return normalize_url(peer), normalize_url(dial)
