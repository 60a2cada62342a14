"""The group commit's writer thread through the real `Storage` and `GroupCommit`, on
LevelDB in a temporary folder: one batch at a time and in order; a batch failing with
any exception fails its own writes only and the next one still goes; a loop stopped or
closed while a batch is in the thread, `close` while the loop runs, a process ending
mid-batch without `close`: nothing acknowledged that is not on the disk, nothing lost
that was. And what a review of the writer thread found: the thread kept its last batch
(and through it the storage and its LevelDB lock) alive while it waited for the next;
a write queued after `close` was never answered (it fails now)."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import plyvel
import pytest
import uvloop

from dht.model.record import Record, decode
from dht.storage.disk import DiskFull
from dht.storage.group_commit import Batch
from dht.storage.store import RECORDS_PREFIX, Storage, StorageUnavailable

REPO = Path(__file__).resolve().parents[3]


class Gate:
    """Wraps the Storage's plyvel DB: a batch's write (run in the writer thread) waits
    for `release` and, if `fail` is set, raises it once instead of writing."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self.fail: BaseException | None = None

    def write_batch(self, **options: Any) -> Any:
        self.entered.set()
        if not self.release.wait(10):
            raise TimeoutError("the test never released the gate")
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail
        return self._db.write_batch(**options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def gated(storage: Storage) -> Gate:
    gate = Gate(storage._db)
    storage._db = gate
    return gate


def written(result: bool | asyncio.Future[bool]) -> asyncio.Future[bool]:
    assert isinstance(result, asyncio.Future), "a group-committed write answers later"
    return result


def stored_keys(data_dir: Path) -> list[bytes]:
    reopened = Storage(data_dir, durability="none")
    try:
        return [key for key, _ in reopened.scan(b"", None)]
    finally:
        reopened.close()


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    storage = Storage(tmp_path)
    try:
        yield storage
    finally:
        storage.close()


# -- what the review of the writer thread found ------------------------------------


async def test_a_storage_dropped_without_close_lets_its_data_dir_open_again(
    tmp_path: Path,
) -> None:
    """A writer thread whose frame held its last job while it waited on the queue kept
    the Storage alive through the job's `write`/`landed` partials (bound methods of its
    GroupCommit, whose `_write` is the Storage's): a Storage dropped without `close`
    was never collected, its LevelDB open and locked for the life of the process, so
    opening the folder again failed with "locked" (the ThreadPoolExecutor before it
    deleted each work item once run)."""
    storage = Storage(tmp_path)
    assert await written(storage.write(b"k", Record.live(1, b"v"))) is True
    await asyncio.sleep(0.05)  # the thread is back waiting on its queue
    dropped = weakref.ref(storage)
    del storage
    gc.collect()
    try:
        again = Storage(tmp_path)
    except StorageUnavailable as exc:
        leaked = dropped()
        if leaked is not None:  # let the rest of the session have its thread back
            leaked.close()
        pytest.fail(f"the dropped Storage is still alive and holds its folder: {exc}")
    try:
        assert again.get(b"k") == Record.live(1, b"v")
    finally:
        again.close()
    assert dropped() is None


async def test_no_batch_outlives_its_landing(storage: Storage) -> None:
    """Once landed, no batch (its encoded values, its waiters, after a failure its
    error and traceback) stays referenced by the idle writer thread until the next
    batch comes: a node idle after a batch of large values must not keep their bytes."""
    value = b"x" * (4 << 20)
    assert await written(storage.write(b"big", Record.live(1, value))) is True
    await asyncio.sleep(0.05)
    gc.collect()
    alive = [
        batch
        for batch in gc.get_objects()
        if type(batch) is Batch and RECORDS_PREFIX + b"big" in batch.operations
    ]
    assert alive == [], "the landed batch, with its 4 MiB value, is still referenced"


async def test_a_nonce_remembered_after_close_is_failed_not_left_waiting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Older than the change (the executor raised the same way), and unreachable from
    `Node._stop`, which drains and closes with no await between and writes nothing after:
    a queued write taken after `close` (a nonce, a hint, or a record of a key whose
    write `write_remaining` wrote, since it leaves `_pending` as it was) is flushed to
    the shut writer; `_flush` raises RuntimeError in a loop callback with `_in_flight`
    already set, so its future never resolves, and `drain` after it never returns."""
    storage = Storage(tmp_path)
    storage.close()
    storage.remember_nonce(b"late", 1)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            await asyncio.wait_for(storage.nonce_kept(), 1)
        except TimeoutError:
            pytest.fail(
                "the write taken after close was never answered; the loop logged: "
                + " | ".join(record.getMessage() for record in caplog.records)
            )
        except Exception:
            pass  # refused: what it should do
    assert storage._queue._in_flight is None


# -- what it checked and found safe ------------------------------------------------


class CountingWriter:
    """Stands between the GroupCommit and its WriterThread: counts the batches handed
    over and not yet landed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.outstanding = 0
        self.most = 0

    def write(
        self, write: Callable[[], None], landed: Callable[[BaseException | None], None]
    ) -> None:
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)

        def counted(error: BaseException | None) -> None:
            self.outstanding -= 1
            landed(error)

        self.inner.write(write, counted)

    def shutdown(self) -> None:
        self.inner.shutdown()


async def test_batches_reach_the_writer_one_at_a_time_and_land_in_order(
    storage: Storage,
) -> None:
    counting = CountingWriter(storage._queue._writer)
    storage._queue._writer = counting
    seen: list[int] = []  # the versions of b"k" the thread wrote, in its order
    write = storage._queue._write

    def recording(puts: list[tuple[bytes, bytes]], deletes: list[bytes], sync: bool) -> None:
        assert sync, "--durability group syncs every batch"
        seen.extend(decode(data).version for key, data in puts if key == RECORDS_PREFIX + b"k")
        write(puts, deletes, sync)

    storage._queue._write = recording
    answers: list[asyncio.Future[bool]] = []

    def value(version: int) -> bytes:
        return b"L" * (1 << 20) if version % 50 == 0 else b"v%d" % version

    for version in range(1, 301):
        answers.append(written(storage.write(b"k", Record.live(version, value(version)))))
        if version % 7 == 0:
            await asyncio.sleep(0)
        if version % 31 == 0:
            await asyncio.sleep(0.002)
        if version % 45 == 0:  # one older than what is queued: False once that is synced
            answers.append(written(storage.write(b"k", Record.live(version - 3, b"old"))))
    results = await asyncio.gather(*answers)
    assert counting.most == 1 and counting.outstanding == 0
    assert seen == sorted(set(seen)) and seen[-1] == 300
    assert storage.get(b"k") == Record.live(300, value(300))
    assert results.count(False) == 300 // 45 and results.count(True) == 300


@pytest.mark.parametrize(
    "error, raised",
    [
        (plyvel.IOError(b"IO error: leveldb/000005.log: No space left on device"), DiskFull),
        (plyvel.IOError(b"IO error: leveldb/000005.log: Input/output error"), plyvel.IOError),
        (plyvel.CorruptionError(b"Corruption: bad record length"), plyvel.CorruptionError),
        (RuntimeError("Database is closed"), RuntimeError),
        (SystemExit(3), SystemExit),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ],
    ids=["disk-full", "io-error", "corruption", "runtime-error", "system-exit", "keyboard"],
)
async def test_a_batch_failing_with_any_exception_fails_its_writes_and_the_next_goes(
    storage: Storage, error: BaseException, raised: type[BaseException]
) -> None:
    gate = gated(storage)
    gate.release.clear()
    failing = [written(storage.write(b"f%d" % i, Record.live(1, b"v"))) for i in range(3)]
    hint = storage.hints.put(b"peer\x00f", b"hint")  # answered to no one
    assert hint is None
    assert await asyncio.to_thread(gate.entered.wait, 10)  # the batch is in the thread
    behind = written(storage.write(b"n", Record.live(1, b"next")))
    gate.fail = error
    gate.release.set()
    # Not awaited: a SystemExit or KeyboardInterrupt awaited would stop the loop.
    await asyncio.wait_for(asyncio.wait(failing), 10)
    assert all(isinstance(future.exception(), raised) for future in failing)
    assert await asyncio.wait_for(behind, 10) is True
    await asyncio.wait_for(storage.drain(), 10)
    assert storage._queue._in_flight is None and storage._queue.idle
    assert storage.get(b"n") == Record.live(1, b"next")
    assert all(storage.get(b"f%d" % i) is None for i in range(3))
    assert not storage._queue.holds(RECORDS_PREFIX + b"f0")


@pytest.mark.parametrize("closed", [True, False], ids=["loop-closed", "loop-stopped"])
def test_a_loop_gone_with_a_batch_in_the_thread_leaves_close_to_write_the_rest(
    tmp_path: Path, closed: bool
) -> None:
    """The landed callback cannot run (call_soon_threadsafe raises on a closed loop and
    is swallowed; a stopped loop never runs it): nothing is answered, the batch in the
    thread is written by it, and `close` writes the batch still open."""
    storage = Storage(tmp_path)
    gate = gated(storage)
    loop = uvloop.new_event_loop()

    async def take_writes() -> tuple[asyncio.Future[bool], asyncio.Future[bool]]:
        gate.release.clear()
        in_flight = written(storage.write(b"a", Record.live(1, b"in the thread")))
        assert await asyncio.to_thread(gate.entered.wait, 10)
        still_open = written(storage.write(b"b", Record.live(1, b"queued behind it")))
        return in_flight, still_open

    in_flight, still_open = loop.run_until_complete(take_writes())
    if closed:
        loop.close()
    threading.Timer(0.1, gate.release.set).start()
    storage.close()  # joins the thread: the batch it had is on the disk first
    assert not in_flight.done() and not still_open.done(), "nothing was acknowledged"
    assert stored_keys(tmp_path) == [b"a", b"b"]
    if not closed:
        loop.close()


async def test_close_while_the_loop_runs_answers_the_batch_in_flight_once_durable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`close` with a batch in the thread and one open: the thread's batch is written
    before `shutdown` returns, its landed callback then runs on the loop and answers it
    (durable by then) and finds nothing to flush (`write_remaining` took the open
    batch, which is written and answered to no one). No exception in any callback."""
    storage = Storage(tmp_path)
    gate = gated(storage)
    gate.release.clear()
    in_flight = written(storage.write(b"a", Record.live(1, b"in the thread")))
    assert await asyncio.to_thread(gate.entered.wait, 10)
    still_open = written(storage.write(b"b", Record.live(1, b"queued behind it")))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        threading.Timer(0.1, gate.release.set).start()
        storage.close()
        assert await asyncio.wait_for(in_flight, 10) is True
        await asyncio.sleep(0.05)
    assert not still_open.done()
    assert storage._queue._in_flight is None
    assert not [record for record in caplog.records if record.name == "asyncio"]
    assert stored_keys(tmp_path) == [b"a", b"b"]


async def test_the_nodes_order_drain_then_close_leaves_nothing_in_the_thread(
    storage: Storage,
) -> None:
    """`Node._stop`: `drain` returns only when no batch is open or in flight, and
    `close` follows with no await between, so the writer never has a batch at `close`."""
    gate = gated(storage)
    gate.release.clear()
    writes = [written(storage.write(b"k%d" % i, Record.live(1, b"v"))) for i in range(5)]
    assert await asyncio.to_thread(gate.entered.wait, 10)
    writes += [written(storage.write(b"j%d" % i, Record.live(1, b"v"))) for i in range(5)]
    threading.Timer(0.05, gate.release.set).start()
    await asyncio.wait_for(storage.drain(), 10)
    assert all(future.done() and future.result() is True for future in writes)
    assert storage._queue.idle and storage._queue.in_flight() == {}


def test_a_process_ending_mid_batch_without_close_keeps_the_folder_whole(
    tmp_path: Path,
) -> None:
    """The daemon thread is cut off at exit (the executor's worker was joined at exit
    and finished the batch): the batch in it was never answered, and LevelDB drops it
    whole (all its keys or none), the folder opening as after kill -9."""
    script = textwrap.dedent(
        f"""
        import asyncio
        from pathlib import Path
        from dht.model.record import Record
        from dht.storage.store import Storage

        async def main():
            storage = Storage(Path({str(tmp_path)!r}))
            for i in range(8):
                storage.write(b"k%d" % i, Record.live(1, b"x" * (2 << 20)))
            await asyncio.sleep(0.005)
            assert storage._queue.in_flight(), "the batch is in the thread"

        asyncio.run(main())  # and the process ends, without close
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert len(stored_keys(tmp_path)) in (0, 8)
