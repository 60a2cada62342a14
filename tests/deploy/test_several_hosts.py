"""docs/several-hosts.md, run: every shell block of the page, in order, on the hosts its
first line names, each host a namespace of its own with the page's address for it
(page_hosts.py: network, mounts, host name, and stand-ins for `scp` and `systemctl`).

The page's blocks are read from the page, never copied here. Each one's first line is
`# on HOST, HOST and the operator's machine` or `# not run by the test: REASON`; a block
without either fails the test, so a new command cannot go unrun by accident. The
hosts' names and addresses are the page's own (its `/etc/hosts` block), on a bridge no
other namespace sees; the operator's machine is one more host, with no node. The
page installs from a wheel (tests/installs does that); here /opt/dht is the
virtualenv running the test. Where a block names a host `--dead`, that host's node is
killed first (SIGKILL: its machine is lost).

As root where the tools below and overlayfs are; elsewhere skipped with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.page_hosts import OPERATOR, REPOSITORY, Hosts

PAGE = REPOSITORY / "docs" / "several-hosts.md"
NOT_RUN = "# not run by the test: "
TOOLS = ("ip", "nsenter", "unshare", "setpriv", "prlimit", "openssl", "curl", "nft", "useradd")

FENCE = re.compile(r"^```(.*)$")
HOST_LINE = re.compile(r"^(\d+\.\d+\.\d+\.\d+)\s+(host\d+)$", re.M)
HOST_NAME = re.compile(r"\bhost\d+\b")


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    text: str
    hosts: list[str]  # in order; OPERATOR for the operator's machine; empty: not run
    reason: str = ""  # why it is not run


def page_blocks(text: str) -> list[Block]:
    """Every fenced block of the page, with where it runs; AssertionError naming the
    line of any block whose first line says neither where it runs nor why not."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if FENCE.match(lines[index]) is None:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1
        first = body[0] if body else ""
        line = start + 1
        if first.startswith(NOT_RUN):
            blocks.append(Block(line, "\n".join(body), [], first[len(NOT_RUN) :]))
            continue
        assert first.startswith("# on "), (
            f"docs/several-hosts.md:{line}: a block must begin with `# on HOST ...` or "
            f"`{NOT_RUN}REASON`, not {first!r}"
        )
        where = first[len("# on ") :].split(":")[0]
        hosts = HOST_NAME.findall(where)
        if "operator's machine" in where:
            hosts.append(OPERATOR)
        assert hosts, f"docs/several-hosts.md:{line}: no host named in {first!r}"
        blocks.append(Block(line, "\n".join(body), hosts))
    return blocks


def test_every_block_of_the_page_says_where_it_runs_or_why_not() -> None:
    blocks = page_blocks(PAGE.read_text())
    assert any(block.hosts for block in blocks)
    for block in blocks:
        assert block.hosts or block.reason.strip(), block


def test_a_block_that_says_neither_where_it_runs_nor_why_not_fails_the_page() -> None:
    page = "text\n\n```sh\n# on host1\ntrue\n```\n\n```sh\nsystemctl reboot\n```\n"
    with pytest.raises(AssertionError, match=r"several-hosts.md:8: a block must begin"):
        page_blocks(page)


def page_addresses(blocks: list[Block]) -> dict[str, str]:
    """The hosts' addresses, from the page's `/etc/hosts` block."""
    for block in blocks:
        if "/etc/hosts" in block.text:
            return {name: address for address, name in HOST_LINE.findall(block.text)}
    raise AssertionError("the page defines no hosts (`cat >> /etc/hosts`)")


def _unavailable() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "the hosts are namespaces with mounts of their own: run as root"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "overlayfs is not available"
    return None


# -- the test ---------------------------------------------------------------------------


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    made = Hosts(tmp_path)
    try:
        made.start(page_addresses(page_blocks(PAGE.read_text())))
        yield made
    finally:
        made.stop()


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
@pytest.mark.timeout(600)
def test_every_command_of_the_several_hosts_page_runs(hosts: Hosts) -> None:
    ran = 0
    for block in page_blocks(PAGE.read_text()):
        for dead in re.findall(r"--dead (\S+)", block.text):
            for name in HOST_NAME.findall(dead):
                hosts.lose(hosts.hosts[name])
        for name in block.hosts:
            hosts.run_block(block.text, f"docs/several-hosts.md:{block.line}", hosts.hosts[name])
            ran += 1
    # Where the page leaves the cluster: host1, host2 and host5, host3 lost, host4 out,
    # each node still running since it was last started, with the page's first write.
    operator = hosts.hosts[OPERATOR]
    for name in ("host1", "host2", "host5"):
        assert hosts.running(hosts.hosts[name]), f"{name}'s node exited\n{hosts.node_logs()}"
        read = operator.run(
            ["curl", "-fsS", f"http://{name}:8080/v0/entity?id=greeting&replicas=3/3"],
            capture_output=True,
        )
        assert read.stdout == b"hello", (name, read)
    assert not hosts.running(hosts.hosts["host4"]) and hosts.hosts["host4"].starts == 1
    assert ran > 0
