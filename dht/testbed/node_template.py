"""The node command template: one command line, run once per node, that starts a node of
any implementation of the v0 API (SPEC.md part one). The conformance kit grades such an
implementation with it and `python -m dht cluster --node-command` runs one, so both read
the same placeholders, check a template the same way and turn it into an argv the same
way (shlex, never a shell).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

PLACEHOLDERS = ("{port}", "{data_dir}", "{cluster}", "{self}")
# The host of the URLs in {cluster} and {self}. The course's own launcher and tests name
# every node http://localhost:PORT, and its implementations find their own entry in the
# list by that exact string: handed http://127.0.0.1:PORT, such a node takes itself for a
# peer and forwards the requests meant for itself to itself. So another implementation
# gets the course's form unless it asks for the numeric one.
COURSE_HOST = "localhost"
NUMERIC_HOST = "127.0.0.1"
TOPOLOGY_HOSTS = (COURSE_HOST, NUMERIC_HOST)
# What each placeholder stands for, for a command's --help.
PLACEHOLDER_HELP = """\
  {port}      the loopback port this node must listen on (required)
  {data_dir}  an empty folder for its data, the same one when the node restarts
  {cluster}   every node's URL, comma-separated, in the course's form
              http://localhost:PORT,... (http://127.0.0.1:PORT,... when asked)
  {self}      this node's URL in that list, the same string
"""


def topology_url(host: str, port: int) -> str:
    """A node's URL as {cluster} and {self} give it: `http://HOST:PORT`."""
    return f"http://{host}:{port}"


def template_problem(template: str) -> str | None:
    """Why `template` cannot start nodes, in one line naming --node-command; None if it
    can: it must say where the node listens, and use no placeholder but ours."""
    if "{port}" not in template:
        return "--node-command must contain {port}: where the node listens"
    try:
        template.format(port=0, data_dir="", cluster="", self="")
    except (KeyError, IndexError, ValueError) as error:
        return f"--node-command: bad placeholder {error}; use {', '.join(PLACEHOLDERS)}"
    return None


def node_line(
    template: str, port: int, data_dir: Path | str, cluster: Sequence[str], self_url: str
) -> str:
    """The template with its placeholders filled in: one shell-quoted command line (the
    data folder is quoted, so a path with spaces stays one argument)."""
    return template.format(
        port=port,
        data_dir=shlex.quote(str(data_dir)),
        cluster=",".join(cluster),
        self=self_url,
    )


def node_argv(
    template: str, port: int, data_dir: Path | str, cluster: Sequence[str], self_url: str
) -> list[str]:
    """The argv of one node: `node_line`, split as a shell would split it, without one."""
    return shlex.split(node_line(template, port, data_dir, cluster, self_url))
