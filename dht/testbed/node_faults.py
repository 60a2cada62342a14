"""Faults of one node's process in a running `python -m dht cluster`, as the cockpit's
buttons and `cluster kill|pause|resume|wipe URL` ask for them: kill -9, pause (SIGSTOP)
and resume (SIGCONT), and wipe (kill -9, data folder deleted, started again empty), and
the state of each node's process. A mixin of `LocalCluster` (local_cluster.py), whose
lock guards every field used here.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dht.testbed.cluster_control import ActionFailed, one_at_a_time

# The clock skew `skew` gives a node: twice the default --max-clock-drift, so its peers
# refuse its writes as too far ahead (SPEC.md rule 8.4).
SKEW_SECONDS = 120.0


class NodeFaults:
    # The fields of LocalCluster these methods share with it, under `lock`.
    lock: threading.Lock
    changing: threading.Lock  # one add, remove, restart or wipe at a time
    urls: list[str]
    processes: dict[str, subprocess.Popen[bytes]]
    unwatched: dict[str, subprocess.Popen[bytes]]
    data_dirs: dict[str, Path]
    down: dict[str, int]
    paused: set[str]
    restarting: set[str]  # from the start of a restart until the new process serves
    skews: dict[str, float] | None  # None: the nodes take no --clock-skew
    closing: bool

    if TYPE_CHECKING:  # LocalCluster's, which mixes this in

        def _restart(self, url: str, say: Callable[[str], None]) -> None: ...

    def _check_member(self, url: str) -> None:
        """Raises ActionFailed unless `url` is a member; called with `lock` held."""
        if url not in self.processes:
            raise ActionFailed(f"{url} is not a node of this cluster: {', '.join(self.urls)}")

    def kill(self, url: str, say: Callable[[str], None]) -> None:
        """SIGKILL to member `url`: it dies with no chance to flush or say goodbye, and
        stays down (the main loop logs it) until `restart`."""
        process = self._running(url, "kill")
        process.send_signal(signal.SIGKILL)
        process.wait()
        with self.lock:
            self.paused.discard(url)
        say(f"killed {url} (kill -9, pid {process.pid}); `restart` starts it again on its data")

    def pause(self, url: str, say: Callable[[str], None]) -> None:
        """SIGSTOP to member `url`: it holds its connections and answers nothing, like a
        machine in a long GC pause or a stalled VM, until `resume`."""
        process = self._running(url, "pause")
        with self.lock:
            if url in self.paused:
                raise ActionFailed(f"{url} is paused already")
            process.send_signal(signal.SIGSTOP)
            self.paused.add(url)
        say(f"paused {url} (SIGSTOP, pid {process.pid})")

    def resume(self, url: str, say: Callable[[str], None]) -> None:
        process = self._running(url, "resume")
        with self.lock:
            if url not in self.paused:
                raise ActionFailed(f"{url} is not paused")
            process.send_signal(signal.SIGCONT)
            self.paused.discard(url)
        say(f"resumed {url} (SIGCONT, pid {process.pid})")

    def wipe(self, url: str, say: Callable[[str], None]) -> None:
        """kill -9 member `url`, delete its data folder and start it again on an empty
        one: a machine whose disk is lost, replaced by a blank one at the same address.
        What it held survives only on its peers' copies."""
        with one_at_a_time(self.changing):
            with self.lock:
                self._check_member(url)
                process, data_dir = self.processes[url], self.data_dirs[url]
                self.down.setdefault(url, -signal.SIGKILL)  # no failure: it is asked for
                self.paused.discard(url)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
                say(f"killed {url} (kill -9, pid {process.pid})")
            try:
                shutil.rmtree(data_dir)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ActionFailed(
                    f"{url} is down, and its data folder could not be deleted: {exc}; "
                    "`restart` starts it again on what is left"
                ) from None
            data_dir.mkdir(parents=True)
            say(f"deleted its data folder {data_dir}")
            self._restart(url, say)

    def skew(self, url: str, say: Callable[[str], None]) -> None:
        """Restarts dht node `url` with its clock SKEW_SECONDS ahead (`--clock-skew`),
        or, if it is skewed, with its clock right again: further off than the default
        --max-clock-drift, so its peers refuse what it writes."""
        if self.skews is None:
            raise ActionFailed(
                "the clock skew is a flag of dht's own nodes; these nodes run another "
                "implementation (--node-command)"
            )
        with one_at_a_time(self.changing):
            with self.lock:
                self._check_member(url)
                skewed = self.skews.pop(url, None)
                if skewed is None:
                    self.skews[url] = SKEW_SECONDS
            say(
                f"restarting {url} with its clock right again"
                if skewed is not None
                else f"restarting {url} with its clock {SKEW_SECONDS:g} s ahead"
            )
            self._restart(url, say)
            if skewed is not None and skewed > 0:
                say(
                    f"its versions stay ahead for up to {skewed:g} s more: a node never "
                    "goes below the highest version it used (SPEC.md 8.7), so its peers "
                    "refuse its writes until the clock passes it"
                )

    def _running(self, url: str, action: str) -> subprocess.Popen[bytes]:
        with self.lock:
            self._check_member(url)
            if self.closing:
                raise ActionFailed("the cluster is stopping")
            if url in self.unwatched or url in self.restarting:
                raise ActionFailed(f"{url} is being restarted; {action} it once it serves")
            process = self.processes[url]
            if process.poll() is not None:
                raise ActionFailed(
                    f"{url} is down (exit code {process.returncode}); restart it first"
                )
            return process

    def node_states(self) -> list[dict[str, object]]:
        """Each member's process as the cockpit shows it: "running", "paused", "down"
        (with its exit code) or "restarting", and its pid."""
        with self.lock:
            states: list[dict[str, object]] = []
            for url in self.urls:
                process = self.processes[url]
                code = process.poll()
                if url in self.unwatched:
                    state = "restarting"
                elif code is not None:
                    state = "down"
                else:
                    state = "paused" if url in self.paused else "running"
                entry: dict[str, object] = {
                    "url": url,
                    "state": state,
                    "pid": process.pid,
                    "exit_code": code,
                }
                if self.skews is not None:
                    entry["clock_skew"] = self.skews.get(url, 0.0)
                states.append(entry)
            return states
