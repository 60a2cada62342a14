"""The adapters' write-once keys (`--write-once`, dht/conformance/adapters/write_once.py):
a share of each client's operations are PUTs of fresh keys, each written once, never
overwritten or deleted, and every one read at the end, so an acknowledged PUT of one
that the final read misses is counted lost. Without the flag a seed sends exactly what
it sent before the flag existed; with it, every other draw of the clients stays.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from dht.conformance.adapters.etcd import EtcdCluster
from dht.conformance.adapters.redis import RedisCluster
from dht.conformance.adapters.run import CLIENT_TIMEOUT, CLIENTS, KEYS, MIX, run_store
from dht.conformance.adapters.write_once import WriteOnce, sender
from dht.conformance.traffic import Clients, key_space
from dht.history.linearizability import Verdict
from dht.history.operation import Kind, Op
from tests.conformance.adapter_stores import needs_etcd, needs_redis
from tests.conformance.test_adapter_clock import FakeTime
from tests.conformance.test_adapter_partitions import needs_partitions

# A client's first operations for seed 1 as (member, kind, key, value), hashed: what the
# run's clients sent before write-once keys existed (the code of 38dda7f).
FIRST = 200
SEED_1_FIRST_SENT = {
    "client-0": "64a2f446154021d1",
    "client-1": "736420502bf248c3",
    "client-2": "d41de3442f0a9e8b",
    "client-3": "2e596bb6b581cfbd",
    "client-4": "a966376998d30824",
}
Sent = tuple[int, str, str, bytes | None]


class Register:
    """A store that keeps every write, answers at once and records what each client
    thread sent it (the final read is sent by the run's own thread). `forget`: the
    fresh keys whose PUT it acknowledges and drops."""

    name = "register"
    promise = "linearizable"

    def __init__(self, forget: frozenset[str] = frozenset()) -> None:
        self.members = ["m0", "m1", "m2"]
        self.sent: dict[str, list[Sent]] = {}
        self._values: dict[str, bytes] = {}
        self._forget = forget
        self._lock = threading.Lock()

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def leader(self) -> int | None:
        return None

    def kill(self, index: int) -> None: ...

    def restart(self, index: int) -> None: ...

    def pause(self, index: int) -> None: ...

    def resume(self, index: int) -> None: ...

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        time.sleep(0.0005)  # a history of thousands of operations, not millions
        with self._lock:
            self.sent.setdefault(threading.current_thread().name, []).append(
                (index, kind.value, key, value)
            )
            invoked = time.monotonic()
            if kind is Kind.PUT:
                assert value is not None
                if key not in self._forget:
                    self._values[key] = value
                status = 201
            elif kind is Kind.DELETE:
                self._values.pop(key, None)
                status = 202
            else:
                value = self._values.get(key)
                status = 200 if value is not None else 404
            return Op(kind, key, value, invoked, time.monotonic(), status, None, name)


def sent_by_clients(once: WriteOnce | None, least: int = FIRST) -> dict[str, list[Sent]]:
    """What seed 1's clients send a `Register` until each has sent `least` operations."""
    store = Register()
    clients = Clients(
        [0, 1, 2], key_space(KEYS), CLIENTS, 1, CLIENT_TIMEOUT, MIX, sender(store.attempt, once)
    )
    clients.start()
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        time.sleep(0.05)
        with store._lock:
            if len(store.sent) == CLIENTS and all(len(s) >= least for s in store.sent.values()):
                break
    clients.stop()
    return store.sent


def fingerprint(sent: list[Sent]) -> str:
    return hashlib.sha256(repr(sent[:FIRST]).encode()).hexdigest()[:16]


def test_without_write_once_a_seed_sends_what_it_sent_before() -> None:
    sent = sent_by_clients(None)
    assert {client: fingerprint(ops) for client, ops in sent.items()} == SEED_1_FIRST_SENT


def test_with_write_once_a_client_sends_its_draws_or_a_fresh_put_in_their_place() -> None:
    before = sent_by_clients(None)
    after = sent_by_clients(WriteOnce(1, CLIENTS, 1.0, time.monotonic, most_keys=10**6))
    for client, ops in after.items():
        fresh = 0
        for drawn, sent in zip(before[client][:FIRST], ops[:FIRST], strict=True):
            if sent != drawn:
                assert sent[1] == "PUT" and sent[2].startswith("once-"), (drawn, sent)
                fresh += 1
        assert FIRST / 6 < fresh < FIRST / 2, (client, fresh)  # about one in three


def test_a_clients_fresh_keys_are_allowed_evenly_over_the_run_up_to_the_cap() -> None:
    clock = FakeTime()
    once = WriteOnce(1, 2, 10.0, clock.monotonic, share=1.0, most_keys=200)
    assert [once.fresh(0) is not None for _ in range(3)] == [True, False, False]
    clock.sleep(5.0)  # half the run: half of the client's 100, and one more
    assert sum(once.fresh(0) is not None for _ in range(100)) == 50
    clock.sleep(50.0)
    assert sum(once.fresh(0) is not None for _ in range(200)) == 49
    assert sum(once.fresh(1) is not None for _ in range(200)) == 100
    assert len(once.keys()) == len(set(once.keys())) == 200


def test_fresh_keys_are_written_once_and_all_read_at_the_end() -> None:
    store = Register()
    run = run_store(store, 1.0, seed=1, faults=("kill", "pause"), write_once=True)
    fresh = [
        (kind, key)
        for client, ops in store.sent.items()
        if client.startswith("client-")
        for _, kind, key, _ in ops
        if key.startswith("once-")
    ]
    assert {kind for kind, _ in fresh} == {"PUT"}
    puts = [key for _, key in fresh]
    assert puts and len(puts) == len(set(puts)) == run.write_once_keys
    final_reads = [key for _, kind, key, _ in store.sent["MainThread"] if kind == "GET"]
    assert set(puts) <= set(final_reads)
    assert f"write-once: {len(puts)} keys, each read at the end" in run.summary()
    assert run.ok, run.summary() + "\n" + run.details()


def test_a_fresh_key_the_store_acknowledged_and_dropped_is_counted_lost() -> None:
    dropped = frozenset({"once-0-00001", "once-3-00002"})
    run = run_store(Register(dropped), 1.0, seed=1, faults=("kill",), write_once=True)
    assert run.report is not None
    assert {lost.write.key for lost in run.report.lost} == dropped, run.summary()
    assert "acknowledged PUT" in str(run.report.lost[0]) and not run.ok


@needs_etcd
def test_etcd_with_write_once_keys_under_kills_and_pauses_loses_nothing(tmp_path: Path) -> None:
    run = run_store(EtcdCluster(tmp_path), 10.0, seed=1, faults=("kill", "pause"), write_once=True)
    assert run.faults and run.write_once_keys, run.summary()
    assert run.ok, run.summary() + "\n" + run.details()
    assert run.report is not None and run.report.lost == ()
    assert run.linearizability is not None
    assert run.linearizability.verdict is Verdict.LINEARIZABLE, run.summary()


@needs_redis
@needs_partitions
def test_redis_partitioned_at_its_primary_loses_acknowledged_write_once_puts(
    tmp_path: Path,
) -> None:
    """Seed 1 in 15 s cuts off the primary 4 times, for 2.8 to 3.3 s: the clients keep
    writing to it, and it drops what they wrote once a replica was promoted. Seen: 1,934
    to 2,377 of the 3,000 fresh keys lost in each of 7 runs."""
    run = run_store(
        RedisCluster(tmp_path), 15.0, seed=1, at_leader=True, faults=("partition",),
        write_once=True,
    )  # fmt: skip
    assert run.faults and run.write_once_keys, run.summary()
    assert run.report is not None and run.linearizability is not None
    print(run.summary())
    once = [lost for lost in run.report.lost if lost.write.key.startswith("once-")]
    assert once, run.summary() + "\n" + run.details()
    assert "acknowledged PUT" in str(once[0]) and not run.ok, once[0]
