"""Hosts of their own on this machine, for the commands of a page written for several
(docs/several-hosts.md, run by test_several_hosts.py). As root, Linux only.

A host is a namespace holder (namespaces.py) with its own network, mounts and host
name: a veth on a bridge in a hub namespace, with its address; its name set; overlays
on /etc, /var and /opt, so what its commands write there (`useradd`, `/etc/dht`,
`/var/lib/dht`, a unit file) lands in the host's own folder, never on this machine.
Its /opt/dht is the virtualenv running the test, its code this clone's (PYTHONPATH).

Two commands are stood in for, since such a host has neither an SSH server nor a
systemd of its own: `scp` (a copy into the host's namespace, the source's mode kept)
and `systemctl` (the unit's `ExecStart`, as its `User=`, with its `EnvironmentFile=`s
and `LimitNOFILE=`, started and stopped by the test, which owns the processes; `stop`
fails unless the node exits 0, or on SIGTERM itself, within `TimeoutStopSec=`). A
stand-in asks the test through a file and waits, while the block runs, for its answer;
a command or an option they do not know fails the block. Everything started here dies
with the test, however it ends.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dht.testbed.namespaces import Namespace, stop_processes

REPOSITORY = Path(__file__).resolve().parents[2]
OPERATOR = "operator"
BLOCK_DEADLINE = 120.0
OVERLAID = ("etc", "var", "opt")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Host:
    name: str
    address: str
    folder: Path
    namespace: Namespace
    unit: dict[str, list[str]] = field(default_factory=dict)  # [Service] key: values
    node: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def home(self) -> Path:
        """Where the host's blocks run (the operator's files are kept here)."""
        return self.folder / "home"

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        done: subprocess.CompletedProcess[bytes] = subprocess.run(
            [*self.namespace.prefix, *argv], timeout=30, **kwargs
        )
        return done

    def read(self, path: str) -> str:
        done = self.run(["cat", path], capture_output=True, check=True)
        return done.stdout.decode()


def _make_host(name: str, address: str, folder: Path, hub: Namespace, veth: str) -> Host:
    namespace = Namespace(also=("mnt", "uts"))
    namespace.wait_until_ready()
    host = Host(name, address, folder, namespace)
    host.home.mkdir(parents=True, mode=0o700)
    hub.ip(
        f"link add {veth} type veth peer name eth0 netns {namespace.holder.pid}",
        f"link set {veth} master bridge up",
    )
    namespace.ip("link set lo up", f"addr add {address}/24 dev eth0", "link set eth0 up")
    host.run(["hostname", name], check=True)
    for top in OVERLAID:
        upper, work = folder / top / "upper", folder / top / "work"
        upper.mkdir(parents=True)
        work.mkdir()
        if top == "opt":
            # The page's virtualenv: the one running this test (and this clone, through
            # PYTHONPATH, whatever the virtualenv has installed).
            (upper / "dht").symlink_to(Path(sys.prefix))
        options = f"lowerdir=/{top},upperdir={upper},workdir={work}"
        host.run(["mount", "-t", "overlay", "overlay", "-o", options, f"/{top}"], check=True)
    return host


@dataclass
class Hosts:
    """The page's hosts and the operator's machine on one bridge, and what runs in them."""

    folder: Path
    hosts: dict[str, Host] = field(default_factory=dict)
    hub: Namespace | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, addresses: dict[str, str]) -> None:
        self.hub = Namespace()
        self.hub.wait_until_ready()
        self.hub.ip("link set lo up", "link add bridge type bridge", "link set bridge up")
        network = addresses["host1"].rsplit(".", 1)[0]
        taken = {address.rsplit(".", 1)[1] for address in addresses.values()}
        spare = next(str(n) for n in range(250, 1, -1) if str(n) not in taken)
        for index, (name, address) in enumerate(
            [*addresses.items(), (OPERATOR, f"{network}.{spare}")]
        ):
            self.hosts[name] = _make_host(
                name, address, self.folder / name, self.hub, f"veth{index}"
            )
        control = self.folder / "control"
        for name in self.hosts:
            standins = self.folder / "standins" / name
            standins.mkdir(parents=True)
            (control / name).mkdir(parents=True)
            for program in ("systemctl", "scp"):
                path = standins / program
                path.write_text(STANDIN.format(control=control / name, program=program))
                path.chmod(0o755)

    def stop(self) -> None:
        stop_processes(self.processes, deadline=10.0)
        for host in self.hosts.values():
            host.namespace.close()
        if self.hub is not None:
            self.hub.close()

    # -- running a block ------------------------------------------------------------------

    def run_block(self, text: str, where: str, host: Host) -> str:
        """Runs `text` in `host` under `bash -e -o pipefail`, serving the stand-ins'
        requests meanwhile; its output, or AssertionError with it, naming `where`."""
        environment = {
            "PATH": f"{self.folder / 'standins' / host.name}:{PATH}",
            "PYTHONPATH": str(REPOSITORY),
            "HOME": str(host.home),
            "LANG": "C.UTF-8",
        }
        script = f"set -eo pipefail\ncd {shlex.quote(str(host.home))}\n{text}\n"
        output = self.folder / "block.out"
        with output.open("wb") as out:
            process = host.namespace.popen(
                ["bash", "-c", script],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + BLOCK_DEADLINE
            while process.poll() is None:
                self.serve_standins()
                if time.monotonic() > deadline:
                    process.kill()
                    process.wait()
                time.sleep(0.01)
        text = output.read_text(errors="replace")
        assert process.returncode == 0, (
            f"{where} on {host.name} exited {process.returncode}:\n{text}\n{self.node_logs()}"
        )
        return text

    def node_logs(self) -> str:
        tails = []
        for host in self.hosts.values():
            log = host.folder / "node.log"
            if log.exists():
                tails.append(f"--- {host.name}'s node ---\n" + log.read_text()[-3000:])
        return "\n".join(tails)

    # -- the stand-ins -------------------------------------------------------------------

    def serve_standins(self) -> None:
        for name, host in self.hosts.items():
            for request in sorted((self.folder / "control" / name).glob("*.request")):
                lines = request.read_text().split("\n")[:-1]
                program, cwd, args = lines[0], lines[1], lines[2:]
                try:
                    if program == "systemctl":
                        self.systemctl(host, args)
                    else:
                        self.scp(Path(cwd), args)
                    answer, code = "", 0
                except StandInRefused as refused:
                    answer, code = f"{program} (the test's stand-in): {refused}\n", 1
                stem = request.with_suffix("")
                stem.with_suffix(".answer").write_text(answer)
                request.unlink()
                # Renamed into place whole: the stand-in reads the code as soon as the
                # file exists, and a file written in place exists empty for a moment.
                written = stem.with_suffix(".done.new")
                written.write_text(str(code))
                written.rename(stem.with_suffix(".done"))

    def systemctl(self, host: Host, args: list[str]) -> None:
        now = "--now" in args
        args = [arg for arg in args if arg != "--now"]
        if args == ["daemon-reload"]:
            host.unit = parse_unit(host.read("/etc/systemd/system/dht.service"))
        elif args in (["enable", "dht"], ["start", "dht"]):
            if (args[0] == "start" or now) and not self.running(host):
                self.start_unit(host)
        elif args in (["disable", "dht"], ["stop", "dht"]):
            if (args[0] == "stop" or now) and self.running(host):
                self.stop_unit(host)
        else:
            raise StandInRefused(f"knows daemon-reload, enable, disable, start, stop: {args}")

    def running(self, host: Host) -> bool:
        return host.node is not None and host.node.poll() is None

    def start_unit(self, host: Host) -> None:
        """The unit's ExecStart in the host's namespaces, as systemd would start it."""
        if not host.unit:
            raise StandInRefused("no unit loaded (systemctl daemon-reload)")
        environment = {"PATH": PATH, "PYTHONPATH": str(REPOSITORY), "LANG": "C.UTF-8"}
        for path in host.unit.get("EnvironmentFile", []):
            environment.update(parse_environment_file(host.read(path)))
        user = host.unit["User"][-1]
        environment.update(HOME="/var/lib/dht", USER=user, LOGNAME=user)
        argv = expand_exec_start(host.unit["ExecStart"][-1], environment)
        limit = int(host.unit.get("LimitNOFILE", ["0"])[-1])
        # A change of user clears the parent-death signal the node was started with
        # (namespaces.py): kept, the node dies with this test however it ends.
        setpriv = [
            "setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
            "--pdeathsig", "keep", "--",
        ]  # fmt: skip
        if limit:
            setpriv = ["prlimit", f"--nofile={limit}:{limit}", "--", *setpriv]
        host.starts += 1
        with (host.folder / "node.log").open("ab") as log:
            host.node = host.namespace.popen(
                [*setpriv, *argv], env=environment, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(host.node)

    def stop_unit(self, host: Host) -> None:
        assert host.node is not None
        seconds = float(host.unit.get("TimeoutStopSec", ["90"])[-1])
        host.node.send_signal(signal.SIGTERM)
        try:
            code = host.node.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            host.node.kill()
            host.node.wait()
            raise StandInRefused(f"the node ignored SIGTERM for {seconds:.0f} s") from None
        # As systemd: an exit on the signal itself is clean too (a node stopped before
        # its handler is set, in its first second).
        if code not in (0, -signal.SIGTERM):
            raise StandInRefused(f"the node exited {code} on SIGTERM")

    def lose(self, host: Host) -> None:
        """The host's machine is gone: its node killed, nothing saved."""
        if self.running(host):
            assert host.node is not None
            host.node.kill()
            host.node.wait()

    def scp(self, cwd: Path, args: list[str]) -> None:
        if len(args) < 2 or any(arg.startswith("-") for arg in args):
            raise StandInRefused(f"copies SOURCE... root@HOST:PATH, without options: {args}")
        *sources, target = args
        where, _, path = target.partition(":")
        name = where.split("@")[-1]
        if name not in self.hosts or not path.startswith("/"):
            raise StandInRefused(f"no host {name!r}, or no absolute path in {target!r}")
        host = self.hosts[name]
        for source in sources:
            local = cwd / source
            into = f"{path}{local.name}" if path.endswith("/") else path
            mode = f"{local.stat().st_mode & 0o777:o}"
            with local.open("rb") as data:
                copied = host.run(
                    ["sh", "-c", 'cat > "$1" && chmod "$2" "$1"', "sh", into, mode],
                    stdin=data,
                    capture_output=True,
                )
            if copied.returncode != 0:
                raise StandInRefused(copied.stderr.decode().strip())


class StandInRefused(Exception):
    """What a stand-in tells the block, on its standard error, before it exits 1."""


# The stand-ins' one script: the request (program, working folder, arguments, a line
# each) is written whole and renamed, then the answer awaited while the block runs.
STANDIN = """#!/bin/sh
request={control}/$$
printf '%s\\n' {program} "$PWD" "$@" > "$request.new"
mv "$request.new" "$request.request"
while [ ! -e "$request.done" ]; do
    kill -0 "$PPID" 2>/dev/null || exit 1  # the block's shell is gone: the test too
    sleep 0.02
done
cat "$request.answer" >&2
code=$(cat "$request.done")
rm -f "$request.answer" "$request.done"
exit "$code"
"""


def parse_unit(text: str) -> dict[str, list[str]]:
    """The [Service] section of a unit file, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    section, service = "", dict[str, list[str]]()
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            service.setdefault(key.strip(), []).append(value.strip())
    return service


def parse_environment_file(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("\"'")
    return values


def expand_exec_start(line: str, environment: dict[str, str]) -> list[str]:
    """systemd's rules for the variables of ExecStart: `${NAME}` is replaced in its
    word, `$NAME` alone as a word becomes the value split at whitespace (no word when
    empty or unset)."""
    if "%" in line:
        raise StandInRefused(f"specifiers (%) are not stood in for: {line}")
    argv: list[str] = []
    for word in shlex.split(line):
        alone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if alone:
            argv += environment.get(alone.group(1), "").split()
        else:
            argv.append(
                re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: environment.get(m[1], ""), word)
            )
    return argv
