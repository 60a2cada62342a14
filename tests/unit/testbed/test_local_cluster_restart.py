"""`cluster restart URL` (LocalCluster.restart, SPEC 6.8) against the control server's
other threads and the main loop: one process per member at a time, and every process
the cluster started is among those `close()` returns to stop. Node processes are
`sleep` here, and "serving" is a gate the test opens."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from dht.testbed import local_cluster
from dht.testbed.cluster_control import ActionFailed
from dht.testbed.local_cluster import LocalCluster

URL = "http://127.0.0.1:47001"
OTHER = "http://127.0.0.1:47002"


class Serving:
    """wait_until_serving, decided by the test: per process, serve or fail."""

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.fails: set[int] = set()
        self.lock = threading.Lock()

    def gate(self, process: subprocess.Popen[bytes]) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(process.pid, threading.Event())

    def __call__(self, url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
        if not self.gate(process).wait(timeout=10):
            raise RuntimeError(f"node {url} did not answer")
        if process.pid in self.fails:
            raise RuntimeError(f"node {url} exited with code 1")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    made = LocalCluster("127.0.0.1", tmp_path, [], {})
    launched: list[subprocess.Popen[bytes]] = []

    def launch(url: str, command: list[str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(["sleep", "60"])
        launched.append(process)
        return process

    made.launch = launch
    made.launched = launched  # type: ignore[attr-defined]
    for url in (URL, OTHER):
        made.supervise(url, launch(url, []), tmp_path / url.rsplit(":", 1)[1])
    yield made
    for process in launched:
        if process.poll() is None:
            process.kill()
        process.wait()


def in_thread(work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def main_loop_until(cluster: LocalCluster, done: Callable[[], bool], timeout: float = 5) -> None:
    """What the cluster's main thread does: start the processes restarts wait for."""
    until = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < until, "timed out"
        cluster.start_waiting()
        time.sleep(0.01)


def running(processes: list[Any]) -> list[Any]:
    return [process for process in processes if process.poll() is None]


def test_two_restarts_of_one_node_at_once_leave_no_process_unstopped(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = Serving()
    monkeypatch.setattr(local_cluster, "wait_until_serving", serving)
    launched: list[subprocess.Popen[bytes]] = cluster.launched  # type: ignore[attr-defined]
    first, _ = in_thread(lambda: cluster.restart(URL, lambda line: None))
    main_loop_until(cluster, lambda: len(launched) == 3)
    second, second_errors = in_thread(lambda: cluster.restart(URL, lambda line: None))
    # The second asks for a process too, unless it is refused; give it the time to.
    main_loop_until(cluster, lambda: len(launched) == 4 or bool(second_errors))
    if len(launched) == 4:
        # Two nodes on one data folder: the later one loses LevelDB's lock and exits.
        loser = launched[3]
        loser.kill()
        loser.wait()
        serving.fails.add(loser.pid)
        serving.gate(loser).set()
        second.join(5)
    else:
        assert isinstance(second_errors[0], ActionFailed)
    # Ctrl-C now, while the first restart waits for its node to serve.
    to_stop = cluster.close()
    serving.gate(launched[2]).set()
    first.join(5)
    assert set(running(launched)) <= set(to_stop), "a node process is left running after close"


def test_a_restart_that_races_ctrl_c_leaves_no_process_unstopped(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main thread starts the process and returns to its loop; Ctrl-C comes before
    the restart's thread (woken by the future) has taken the process in."""
    serving = Serving()
    monkeypatch.setattr(local_cluster, "wait_until_serving", serving)

    class SlowToWake(Future):  # type: ignore[type-arg]
        def result(self, timeout: float | None = None) -> Any:
            value = super().result(timeout)
            time.sleep(0.3)  # the thread is scheduled late
            return value

    monkeypatch.setattr(local_cluster, "Future", SlowToWake)
    launched: list[subprocess.Popen[bytes]] = cluster.launched  # type: ignore[attr-defined]
    thread, _ = in_thread(lambda: cluster.restart(URL, lambda line: None))
    main_loop_until(cluster, lambda: len(launched) == 3)
    to_stop = cluster.close()  # Ctrl-C: the main thread stops what close() returns
    for process in launched:
        serving.gate(process).set()
    thread.join(5)
    assert set(running(launched)) <= set(to_stop), "a node process is left running after close"


def test_a_restart_during_a_remove_of_that_node_does_not_bring_it_back(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving = Serving()
    monkeypatch.setattr(local_cluster, "wait_until_serving", serving)
    changing = threading.Event()
    proceed = threading.Event()

    def slow_change(
        via: list[str], new: tuple[str, ...], say: Callable[[str], None], dead: object = ()
    ) -> None:
        changing.set()
        proceed.wait(10)

    monkeypatch.setattr(cluster, "_check_stable", lambda urls: None)
    monkeypatch.setattr(cluster, "_change", slow_change)
    launched: list[subprocess.Popen[bytes]] = cluster.launched  # type: ignore[attr-defined]
    remove, remove_errors = in_thread(lambda: cluster.remove(URL, lambda line: None))
    assert changing.wait(5)
    restart, restart_errors = in_thread(lambda: cluster.restart(URL, lambda line: None))
    main_loop_until(cluster, lambda: len(launched) == 3 or bool(restart_errors))
    proceed.set()  # the change ends while the restarted node starts
    remove.join(5)
    for process in launched:
        serving.gate(process).set()
    restart.join(5)
    assert not remove_errors
    assert URL not in cluster.urls
    assert URL not in cluster.processes or cluster.processes[URL].poll() is not None, (
        "the removed node runs again, watched as a member"
    )
    to_stop = cluster.close()
    assert set(running(launched)) <= set(to_stop), "a node process is left running after close"
