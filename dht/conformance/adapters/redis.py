"""Redis as a store the kit grades: Debian's `redis-server` 7.0, one primary and two
replicas, with three `redis-sentinel`s that fail over when the primary goes silent.

What Redis's documentation says of it, in our words: replication is asynchronous, so
a write the primary acknowledged may be lost at a failover (a replica promoted before
it received the write), and a primary cut off or paused keeps taking writes until it
learns it was replaced, and then drops them; `WAIT` narrows that window but does not
make Redis strongly consistent. So the kit must find acknowledged writes lost.

A member is a server and the sentinel beside it, and a partition cuts both off from the
other two members (the kit's clients still reach all six): Jepsen's split brain. The
old primary keeps acknowledging the clients' writes, its sentinel keeps naming it, while
the two sentinels of the majority, a quorum, promote a replica; once healed, the old
primary learns it was replaced, becomes a replica of the new one and drops those writes.
Had each sentinel stayed with every server, the majority's would not see the primary go
silent, and nothing would fail over.

A clock fault steps a member's wall clock the same way, in its server and its sentinel
(`clock.Clocks`: libfaketime, which can reach Redis as it reads the time through
glibc). Redis's documentation says Sentinel depends on the computer's time: a sentinel
that sees its clock jump (or that was stalled) enters its TILT mode for 30 s, in which
it watches but takes no part in a failover. Whether libfaketime runs Redis at all is
tried before the run (`prepare_clocks`): a redis-server started under it must answer
TIME with its offset; where it does not (Debian 12's libfaketime 0.9.10 hangs Debian's
redis-server, linked with jemalloc, at its start), the run says so and draws the other
faults.

The clients do what a Sentinel-aware client does: they send every operation to the
primary they know, and ask a sentinel (the one of the member they were given) for the
primary again after an error or a silence. Each answer is recorded in the course API's
terms: SET answered OK is a PUT answered 201, DEL a DELETE answered 202, GET a 200 or
404; an error reply (READONLY from a demoted primary, a WAIT that found no replica) is
a 503; no answer is none. Every member appends each write to its own file and fsyncs
it once a second (`appendonly yes`, Redis's default `appendfsync everysec`).

A power cut (`power.Power`) kills a member's server and its sentinel at once, then drops
what the member's folder (a mount of the lazy filesystem, holding the server's
append-only file and the sentinel's configuration) had not fsynced; both restart on
what is left. With `appendfsync everysec` and no snapshots (`save ""`), a server's file
holds its writes up to its last fsync, up to a second or two old: a primary whose power
is cut comes back without the writes it acknowledged since. They survive only where a
replica had them (it replicates asynchronously, usually within milliseconds) and that
replica's copy wins: a replica the sentinels promote while the primary is down keeps
them, and the old primary becomes its replica; a primary back before the sentinels
agree it is down stays primary and its replicas resynchronize from its shorter copy,
dropping them. Sentinel fsyncs its configuration whenever it rewrites it, and so does
this adapter when it writes the first one.

`wait`: each SET and DEL is followed by `WAIT 1`, and acknowledged only once a replica
has it; Redis still does not promise it survives a failover.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

from dht.conformance.adapters.clock import Clocks
from dht.conformance.adapters.partition import Partitions
from dht.conformance.adapters.power import Power
from dht.conformance.adapters.processes import Process, kill_all_now, kill_now, send, spawn
from dht.history.operation import Kind, Op
from dht.testbed.fake_clock import PROBE_OFFSET, PROBE_TOLERANCE
from dht.testbed.page_cache import Unsynced
from dht.testbed.toxiproxy import free_ports

MASTER = "dht"
START_DEADLINE = 20.0
# Sentinel's timing: the primary is down for a sentinel after 0.5 s of silence, a quorum
# of 2 sentinels agreeing starts a failover.
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 3000
WAIT_MS = 500  # how long `WAIT 1` waits for a replica
# How long a redis-server started under the fake clock has to answer TIME, for the
# run to step the members' clocks (it answers in a few milliseconds when it can).
CLOCK_PROBE_DEADLINE = 5.0


def redis_binaries() -> tuple[str, str] | None:
    server, sentinel = shutil.which("redis-server"), shutil.which("redis-sentinel")
    return (server, sentinel) if server and sentinel else None


class RedisError(Exception):
    """An error reply (`-READONLY ...`, `-NOREPLICAS ...`)."""


def _command(*parts: bytes) -> bytes:
    encoded = b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
    return b"*%d\r\n" % len(parts) + encoded


class _Reader:
    """RESP replies read off one socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = sock.makefile("rb")

    def reply(self) -> object:
        line = self._file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("the connection closed mid-reply")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RedisError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._file.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("the connection closed mid-reply")
            return data[:-2]
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self.reply() for _ in range(count)]
        raise ConnectionError(f"not a RESP reply: {line[:40]!r}")


def call(port: int, timeout: float, *commands: tuple[bytes, ...]) -> list[object]:
    """Each of `commands` on one new connection to 127.0.0.1:`port`, their replies in
    order. Raises OSError when nothing answers in time, RedisError for an error reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(b"".join(_command(*parts) for parts in commands))
        reader = _Reader(sock)
        return [reader.reply() for _ in commands]


class RedisCluster:
    """Three redis-servers (m0 the first primary) and a sentinel beside each."""

    def __init__(self, folder: Path, wait: bool = False) -> None:
        self.folder = folder
        self.wait = wait
        self.name = "redis-wait" if wait else "redis"
        self.promise = "acknowledged writes kept on the primary; replicas asynchronous"
        ports = free_ports(6)
        self.ports, self.sentinel_ports = ports[:3], ports[3:]
        self.members = [f"m{index}" for index in range(3)]
        self._partitions = Partitions(list(zip(self.ports, self.sentinel_ports, strict=True)))
        self._clocks = Clocks(folder, 3)
        # Each member's folder holds its server's data and its sentinel's configuration.
        self._power = Power([folder / member for member in self.members])
        self._servers: list[Process | None] = [None, None, None]
        self._sentinels: list[Process | None] = [None, None, None]
        self._primary: int | None = None  # the port the clients send to, as last learnt
        self._lock = threading.Lock()

    # -- processes ----------------------------------------------------------------------

    def start(self) -> None:
        binaries = redis_binaries()
        if binaries is None:
            raise FileNotFoundError("redis not found: apt-get install redis-server redis-sentinel")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._partitions.install()
        self._power.mount()
        for index in range(3):
            self._start_server(index)
        deadline = time.monotonic() + START_DEADLINE
        for port in self.ports:
            self._wait_answering(port, deadline)
        for index in range(3):
            self._start_sentinel(index)
        for port in self.sentinel_ports:
            self._wait_answering(port, deadline)
        self._wait_replicas_synced(deadline)

    def _start_server(self, index: int) -> None:
        binaries = redis_binaries()
        assert binaries is not None
        folder = self.folder / self.members[index]
        folder.mkdir(parents=True, exist_ok=True)
        flags = [
            "--port", str(self.ports[index]), "--bind", "127.0.0.1", "--dir", str(folder),
            "--appendonly", "yes", "--save", "", "--protected-mode", "no",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if index != 0:
            flags += ["--replicaof", "127.0.0.1", str(self.ports[0])]
        log = self.folder / f"{self.members[index]}.log"
        self._servers[index] = spawn(
            [binaries[0], *flags],
            log,
            self._partitions.group(index),
            self._clocks.environment(index),
        )

    def _start_sentinel(self, index: int) -> None:
        """Member `index`'s sentinel, on the configuration it last wrote if it has one
        (Sentinel rewrites it with what it learns: the primary, the other sentinels)."""
        binaries = redis_binaries()
        assert binaries is not None
        folder = self.folder / self.members[index]
        conf = folder / "sentinel.conf"
        if not conf.exists():
            text = (
                f"port {self.sentinel_ports[index]}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.ports[0]} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            with open(conf, "w") as written:  # on disk, as a deployed one would be
                written.write(text)
                written.flush()
                os.fsync(written.fileno())
        log = self.folder / f"sentinel{index}.log"
        group, environment = self._partitions.group(index), self._clocks.environment(index)
        self._sentinels[index] = spawn([binaries[1], str(conf)], log, group, environment)

    def _wait_answering(self, port: int, deadline: float) -> None:
        while True:
            try:
                if call(port, 1.0, (b"PING",)) == [b"PONG"]:
                    return
            except (OSError, RedisError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis on {port} did not answer: see {self.folder}")
            time.sleep(0.05)

    def _wait_replicas_synced(self, deadline: float) -> None:
        while True:
            try:  # a primary busy forking for its replicas' first sync may be slow to answer
                info = call(self.ports[0], 1.0, (b"INFO", b"replication"))[0]
            except (OSError, RedisError):
                info = None
            if isinstance(info, bytes) and info.count(b"state=online") == 2:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicas did not sync: see {self.folder}")
            time.sleep(0.05)

    def stop(self) -> None:
        try:
            for process in [*self._servers, *self._sentinels]:
                kill_now(process)
                self._clocks.release(process)
        finally:
            try:
                self._partitions.remove()
            finally:
                self._power.unmount()

    # -- the nemesis's controls ---------------------------------------------------------

    def leader(self) -> int | None:
        """The member most sentinels name primary now: a sentinel just back from a
        partition may still name the primary it knew, for a few seconds."""
        ask = (b"SENTINEL", b"get-master-addr-by-name", MASTER.encode())
        named = []
        for port in self.sentinel_ports:
            try:
                answer = call(port, 1.0, ask)[0]
            except (OSError, RedisError):
                continue
            if isinstance(answer, list) and len(answer) == 2 and isinstance(answer[1], bytes):
                named.append(int(answer[1]))
        if not named:
            return None
        most = max(set(named), key=named.count)
        return self.ports.index(most) if most in self.ports else None

    def kill(self, index: int) -> None:
        kill_now(self._servers[index])
        self._clocks.release(self._servers[index])

    def restart(self, index: int) -> None:
        """On its data, with the flags it first had: a former primary comes back as a
        primary, until the sentinels make it a replica of the one they promoted. Its
        sentinel too, if it is down (after a power cut)."""
        self._start_server(index)
        sentinel = self._sentinels[index]
        if sentinel is not None and sentinel.poll() is not None:
            self._start_sentinel(index)

    def pause(self, index: int) -> None:
        send(self._servers[index], signal.SIGSTOP)

    def resume(self, index: int) -> None:
        send(self._servers[index], signal.SIGCONT)

    def prepare_partitions(self) -> str | None:
        return self._partitions.prepare()

    def partition(self, index: int) -> None:
        """Server `index` and its sentinel cut off from the other servers and sentinels."""
        self._partitions.cut(index)

    def heal(self, index: int) -> None:
        self._partitions.heal(index)

    def prepare_clocks(self) -> str | None:
        """None once a redis-server under the fake clock answered TIME with the offset
        it was given, else why not: the fake clock's own reason, or what the server
        did (and libfaketime's own words, from its log)."""
        return self._clocks.prepare(self._probe_clock)

    def _probe_clock(self) -> str | None:
        binaries = redis_binaries()
        if binaries is None:
            return "redis not found: apt-get install redis-server redis-sentinel"
        folder = self.folder / "clock-probe"
        folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "clock-probe.log"
        (port,) = free_ports(1)
        flags = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", ""]
        self._clocks.step(0, PROBE_OFFSET)
        probe = spawn([binaries[0], *flags], log, None, self._clocks.environment(0))
        shown = None
        try:
            deadline = time.monotonic() + CLOCK_PROBE_DEADLINE
            while shown is None and time.monotonic() < deadline and probe.poll() is None:
                try:
                    reply = call(port, 1.0, (b"TIME",))[0]
                except (OSError, RedisError):
                    time.sleep(0.05)
                    continue
                if isinstance(reply, list) and len(reply) == 2:
                    shown = int(reply[0]) + int(reply[1]) / 1e6 - time.time()
        finally:
            kill_now(probe)
            self._clocks.release(probe)
            self._clocks.step(0, 0.0)
        if shown is None:
            said = [line for line in log.read_text(errors="replace").splitlines() if line]
            its = [line for line in said if line.startswith("libfaketime")][:2] or said[-1:]
            words = " ".join(its) or "nothing"
            return (
                f"redis-server under libfaketime did not answer TIME in "
                f"{CLOCK_PROBE_DEADLINE:g} s (its log: {words})"
            )
        if abs(shown - PROBE_OFFSET) > PROBE_TOLERANCE:
            return (
                f"redis-server under libfaketime shows its clock {shown:+.0f} s off, "
                f"not {PROBE_OFFSET:+.0f}"
            )
        return None

    def clocks_unreached(self) -> str | None:
        return self._clocks.unreached(list(zip(self._servers, self._sentinels, strict=True)))

    def step_clock(self, index: int, seconds: float) -> None:
        """Server `index`'s wall clock and its sentinel's `seconds` off the true time."""
        self._clocks.step(index, seconds)

    def prepare_power(self) -> str | None:
        return self._power.prepare()

    def power_cut(self, index: int) -> Unsynced:
        """Server `index` and its sentinel killed at once, then what their folder had
        not fsynced dropped."""
        processes = [self._servers[index], self._sentinels[index]]
        kill_all_now(processes)
        for process in processes:
            self._clocks.release(process)
        return self._power.cut(index)

    # -- the clients' operations --------------------------------------------------------

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        """One operation on the primary the clients know (after asking member `index`'s
        sentinel when they know none), recorded in the course API's terms."""
        invoked = time.monotonic()
        try:
            port = self._primary_port(index, timeout)
            reply = call(port, timeout, *self._commands(kind, key, value))
        except RedisError:
            self._forget_primary()
            return Op(kind, key, value, invoked, time.monotonic(), 503, node=name)
        except OSError:
            self._forget_primary()
            return Op(kind, key, value, invoked, None, None, node=name)
        completed = time.monotonic()
        if kind is Kind.GET:
            read = reply[0]
            assert read is None or isinstance(read, bytes)
            return Op(kind, key, read, invoked, completed, 404 if read is None else 200, node=name)
        if self.wait and reply[-1] == 0:  # no replica had it within WAIT_MS
            return Op(kind, key, value, invoked, completed, 503, node=name)
        return Op(kind, key, value, invoked, completed, 201 if kind is Kind.PUT else 202, node=name)

    def _commands(self, kind: Kind, key: str, value: bytes | None) -> list[tuple[bytes, ...]]:
        if kind is Kind.GET:
            return [(b"GET", key.encode())]
        write = (b"SET", key.encode(), value or b"") if kind is Kind.PUT else (b"DEL", key.encode())
        return [write, (b"WAIT", b"1", str(WAIT_MS).encode())] if self.wait else [write]

    def _primary_port(self, index: int, timeout: float) -> int:
        with self._lock:
            if self._primary is not None:
                return self._primary
        ask = (b"SENTINEL", b"get-master-addr-by-name", MASTER.encode())
        answer = call(self.sentinel_ports[index], timeout, ask)[0]
        if not isinstance(answer, list) or len(answer) != 2:
            raise ConnectionError(f"sentinel {index} named no primary: {answer!r}")
        port = int(answer[1])
        with self._lock:
            self._primary = port
        return port

    def _forget_primary(self) -> None:
        with self._lock:
            self._primary = None
