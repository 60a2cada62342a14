"""dht/limits.py: every limit a client, a peer or an operator can meet is in SPEC.md's
"Limits" table with its value, the relations between the limits hold, and no module of
the node declares a limit of its own beside them."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from aiohttp.web_protocol import RequestHandler

import dht.limits as limits
from dht.config import NodeConfig

ROOT = Path(__file__).resolve().parents[2]

# Limits nobody outside the node meets: they decide where or how the node does its own
# work, not what it takes or answers.
INTERNAL = {
    "LARGE_WRITE": "which values are written in LevelDB's thread",
    "WRITE_HIGH_WATER": "when a channel connection stops feeding its socket",
}
UNITS = {"KiB", "MiB"}

# Module-level numbers in the node's modules that are not limits, by why: a wire or disk
# format's own numbers (both ends must agree, so they stay with their codec), a pure
# class's default equal to a setting's (the setting is what a node uses), and the pacing
# of loops (they change speed, not what is taken or answered).
FORMATS = {
    "dht/model/clock.py": {"COUNTER_BITS", "MICROSECOND_SHIFT", "MAX_VERSION"},
    "dht/model/record.py": {"FORMAT_V1", "FORMAT_V2", "_TOMBSTONE", "MAX_COPIES"},
    "dht/model/merkle.py": {"LEAF_BITS", "LEAVES"},
    "dht/transport/messages.py": {"PROTOCOL_VERSION", "HANDSHAKE_CALL"},
    "dht/transport/protocol.py": {"_MORE"},
    "dht/transport/channel.py": {"_LAST_CALL_ID"},
    "dht/transport/proof.py": {"NONCE_BYTES"},
    "dht/transport/tls.py": {"TLS_HANDSHAKE"},
    "dht/storage/ceiling_file.py": {"_LEGACY_SIZE"},
}
DEFAULTS = {"dht/model/clock.py": {"DEFAULT_MAX_DRIFT_MS"}}
PACING = {
    "dht/model/clock.py": {"CEILING_LEAD_MS"},
    "dht/web/admission.py": {"TRIM_AFTER", "_M_MMAP_THRESHOLD", "MMAP_THRESHOLD"},
    "dht/web/internal_api.py": {"_STREAM_BUFFER"},
    "dht/web/lean_http.py": {"_JOIN_BELOW"},
    "dht/storage/store.py": {"_INDEX_BATCH"},
    "dht/replication/collector.py": {"_BATCH", "COMPACT_AFTER"},
    "dht/replication/hints.py": {"_EVICT_TO", "_DELIVERY_BATCH", "_STALE_SLACK"},
    "dht/replication/anti_entropy.py": {"LEAVES_PER_REQUEST", "_LOAD_BATCH"},
    "dht/replication/fence.py": {"CHECK_INTERVAL", "ASK_AGAIN"},
    "dht/membership/rebalance.py": {
        "BATCH_RECORDS",
        "BATCH_BYTES",
        "RETRY_PAUSE",
        "MAX_RETRY_PAUSE",
        "KEPT_PAUSE",
        "MAX_KEPT_PAUSE",
    },
    "dht/membership/driver.py": {"POLL"},
}
# When the node logs what it saw: it changes what an operator reads, not what is taken or
# answered.
LOGGING = {"dht/storage/group_commit.py": {"SLOW_BATCH_SECONDS"}}
# How the Python process runs (the garbage collector's pace): the same requests taken and
# answered, at another cost in CPU.
PROCESS = {"dht/node.py": {"YOUNG_GC_THRESHOLD"}}
# The kit and test bed (their own test parameters) and the history's plots.
AROUND_THE_NODE = ("dht/conformance/", "dht/testbed/", "dht/history/", "dht/simulation/")


def declared_limits() -> dict[str, int | float]:
    return {
        name: value
        for name, value in vars(limits).items()
        if name.isupper() and isinstance(value, int | float) and name not in UNITS
    }


def spec_table() -> dict[str, str]:
    """SPEC.md's "Limits" table: each limit's name and its value column."""
    text = (ROOT / "SPEC.md").read_text()
    return dict(re.findall(r"^\| `([A-Z_0-9]+)` \| ([^|]+) \|", text, re.MULTILINE))


def test_every_limit_a_user_can_meet_is_in_the_spec_with_its_value() -> None:
    table = spec_table()
    for name, value in declared_limits().items():
        if name in INTERNAL:
            assert name not in table, f"{name} is in SPEC.md but listed as internal here"
            continue
        assert name in table, f"{name} is not in SPEC.md's Limits table"
        number = re.match(r"[0-9][0-9,]*(\.[0-9]+)?", table[name])
        assert number is not None, table[name]
        assert float(number[0].replace(",", "")) == value, (name, table[name], value)
    assert set(table) <= set(declared_limits()), "SPEC.md names a limit dht/limits.py lacks"


def with_declaration(source: str, name: str, value: str) -> str:
    declaration = re.compile(rf"^{name} = .*$", re.MULTILINE)
    assert len(declaration.findall(source)) == 1, name
    return declaration.sub(f"{name} = {value}", source)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LEAN_READ_LIMIT", "LEAN_MAX_BODY"),
        ("LEAN_MAX_HEADER_BYTES", "8191"),
        ("LEAN_MAX_HEADERS", "129"),
        ("HANDSHAKE_BYTES", "FRAGMENT_BYTES + 1"),
        ("PLAIN_CALL_BYTES", "32 * KiB"),
        ("WRITE_HIGH_WATER", "FRAGMENT_BYTES"),
        ("MAX_AWAITING_HELLO", "257"),
        ("LATEST_CLOCK_MS", "1 << 53"),
        ("FIRST_CHECK_SECONDS", "1.0"),
        ("MAX_TTL_SECONDS", "1 << 64"),
    ],
)
def test_a_limit_moved_past_another_fails_at_import(name: str, value: str) -> None:
    source = (ROOT / "dht" / "limits.py").read_text()
    exec(compile(source, "dht/limits.py", "exec"), {})  # as declared, the asserts hold
    with pytest.raises(AssertionError):
        exec(compile(with_declaration(source, name, value), "dht/limits.py", "exec"), {})


def test_the_settings_defaults_relate_to_the_limits() -> None:
    assert NodeConfig.timeout < limits.HANDSHAKE_DEADLINE
    assert NodeConfig.max_clock_drift * 1000 < limits.REQUEST_WINDOW_MS
    source = (ROOT / "dht" / "config.py").read_text()
    assert "assert NodeConfig.timeout < HANDSHAKE_DEADLINE" in source
    assert "assert NodeConfig.max_clock_drift * 1000 < REQUEST_WINDOW_MS" in source


def test_aiohttps_limits_are_the_ones_it_applies() -> None:
    parameters = inspect.signature(RequestHandler.__init__).parameters
    assert parameters["max_field_size"].default == limits.AIOHTTP_MAX_FIELD_SIZE
    assert parameters["max_headers"].default == limits.AIOHTTP_MAX_HEADERS


def module_numbers(path: Path) -> set[str]:
    """The upper-case names a module binds to a number (or to arithmetic on numbers)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not target.id.lstrip("_").isupper():
            continue
        leaves = [leaf for leaf in ast.walk(value) if not isinstance(leaf, ast.operator)]
        if all(isinstance(leaf, ast.BinOp | ast.UnaryOp | ast.Constant) for leaf in leaves) and any(
            isinstance(leaf, ast.Constant) and type(leaf.value) in (int, float) for leaf in leaves
        ):
            names.add(target.id)
    return names


def test_no_module_of_the_node_declares_a_limit_of_its_own() -> None:
    allowed: dict[str, set[str]] = {}
    for kind in (FORMATS, DEFAULTS, PACING, LOGGING, PROCESS):
        for path, names in kind.items():
            allowed.setdefault(path, set()).update(names)
    found = {}
    for path in sorted((ROOT / "dht").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "dht/limits.py" or relative.startswith(AROUND_THE_NODE):
            continue
        extra = module_numbers(path) - allowed.get(relative, set())
        if extra:
            found[relative] = sorted(extra)
    assert not found, (
        f"declare these in dht/limits.py (or say here why they are not limits): {found}"
    )
