"""The node's flags, made from the settings `NodeConfig` declares (dht/config.py): the
argparse arguments of `node` and `cluster`, the `NodeConfig` built from what was parsed,
and the flags table of docs/operating.md (`python -m dht.command_line.node_flags` prints
it; tests/unit/command_line/test_node_settings.py checks the page holds it)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, Literal

from dht.config import (
    DEPRECATED_FLAGS,
    NodeConfig,
    node_settings,
    normalize_url,
    parse_route,
    resolve_self,
)

# The end of a help text that says the default: "(default 1.0)", "(default: on)",
# "(default: $DHT_SECRET; more about it)".
_DEFAULT_CLAUSE = re.compile(r"\s*\(default:? (?P<default>[^;]*?)(?:; (?P<more>.*))?\)$")


def add_node_flags(parser: argparse.ArgumentParser, scope: Literal["node", "shared"]) -> None:
    """Adds the flags of the settings in `scope`, in their declared order: "node" for
    every setting (the `node` command), "shared" for those `cluster` passes on."""
    for flag in node_settings():
        declared = flag.setting
        if scope == "shared" and declared.scope != "shared":
            continue
        options: dict[str, Any] = {"dest": flag.name, "help": declared.help}
        if declared.action is not None:
            options["action"] = declared.action
        if declared.parse is not None:
            options["type"] = declared.parse
        if declared.choices:
            options["choices"] = list(declared.choices)
        if declared.metavar is not None:
            options["metavar"] = declared.metavar
        if declared.required:
            options["required"] = True
        if declared.environment is not None:
            options["default"] = os.environ.get(declared.environment)
        elif declared.action == "append":
            options["default"] = []
        elif declared.action is None and flag.default is not dataclasses.MISSING:
            options["default"] = flag.default
        parser.add_argument(flag.flag, **options)
    for name, (dest, value, message) in DEPRECATED_FLAGS.items():
        parser.add_argument(
            name,
            dest=dest,
            action=_Deprecated,
            const=value,
            message=message,
            help=argparse.SUPPRESS,
        )


class _Deprecated(argparse.Action):
    """A flag that is gone: sets what it now means, and says so on stderr."""

    def __init__(self, option_strings: list[str], dest: str, message: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.message = message

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(f"warning: {self.message}", file=sys.stderr)
        setattr(namespace, self.dest, self.const)


def node_config(args: argparse.Namespace) -> NodeConfig:
    """The `NodeConfig` of parsed `node` flags; ValueError for a cluster list, --self or
    --route that does not make sense, or TLS flags that are incomplete or come without a
    cluster secret."""
    cluster = tuple(normalize_url(url) for url in args.cluster.split(",") if url.strip())
    if len(set(cluster)) != len(cluster):
        raise ValueError("--cluster lists a node twice")
    given = {flag.name: getattr(args, flag.name) for flag in node_settings()}
    tls = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(tls) and not all(tls):
        raise ValueError("TLS needs all three of --tls-cert, --tls-key and --tls-ca")
    if all(tls) and not args.secret:
        raise ValueError(
            "TLS between nodes needs a cluster secret too (--secret or DHT_SECRET): a "
            "membership step is guarded by the secret alone, so without one anyone who "
            "reaches the port could change this node's membership"
        )
    return NodeConfig(
        **given
        | {
            "cluster": cluster,
            "self_url": resolve_self(cluster, args.port, args.self_url),
            "secret": args.secret or None,
            "routes": tuple(parse_route(route, cluster) for route in args.routes),
        }
    )


def flags_table() -> str:
    """docs/operating.md's table of the node's flags: flag, default and meaning, from the help."""
    lines = ["| flag | default | meaning |", "| --- | --- | --- |"]
    for flag in node_settings():
        declared = flag.setting
        name = f"{flag.flag} {declared.metavar}" if declared.metavar else flag.flag
        meaning = declared.help.replace("%(default)s", str(flag.default))
        match = _DEFAULT_CLAUSE.search(meaning)
        if match is None:
            default = "(required)" if declared.required else "none"
        else:
            default = match["default"]
            meaning = meaning[: match.start()] + (f"; {match['more']}" if match["more"] else "")
        if declared.choices:
            meaning += f": {', '.join(declared.choices)}"
        lines.append(f"| `{name}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(flags_table(), end="")
