"""The linearizability checker for single-key registers (dht/history/linearizability.py):
which operations count, what is and is not linearizable, keys judged apart, the bounds,
and generated histories of a correct register."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dht.history.checker import CLOCK_SLACK
from dht.history.linearizability import (
    Standing,
    Verdict,
    check_linearizable,
    standing,
)
from dht.history.operation import Kind, Op


def put(value: bytes, invoked: float, completed: float | None, status: int | None = 201) -> Op:
    return Op(Kind.PUT, "k", value, invoked, completed, status)


def delete(invoked: float, completed: float | None, status: int | None = 202) -> Op:
    return Op(Kind.DELETE, "k", None, invoked, completed, status)


def get(value: bytes | None, invoked: float, completed: float) -> Op:
    """A GET that read `value` (None: answered 404)."""
    return Op(Kind.GET, "k", value, invoked, completed, 404 if value is None else 200)


def on(key: str, ops: list[Op]) -> list[Op]:
    return [Op(op.kind, key, op.value, op.invoked, op.completed, op.status) for op in ops]


def verdict_of(ops: list[Op], time_budget: float = 10.0, clock_slack: float = 0.0) -> Verdict:
    return check_linearizable(ops, time_budget=time_budget, clock_slack=clock_slack).verdict


class JumpingClock:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def hard_history(writers: int = 20) -> list[Op]:
    """Many overlapping PUTs, then a read of a value none of them wrote: the search must
    try every subset of the PUTs before it can say no."""
    puts = [put(b"v%d" % n, 0.0, 100.0) for n in range(writers)]
    return [*puts, get(b"never written", 200.0, 201.0)]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (put(b"a", 0, 1, 201), Standing.PLACED),
        (delete(0, 1, 202), Standing.PLACED),
        (get(b"a", 0, 1), Standing.PLACED),
        (get(None, 0, 1), Standing.PLACED),
        (put(b"a", 0, None, None), Standing.OPTIONAL),
        (put(b"a", 0, 1, 503), Standing.OPTIONAL),
        (put(b"a", 0, 1, 504), Standing.OPTIONAL),
        (delete(0, 1, 507), Standing.OPTIONAL),
        (put(b"a", 0, 1, 400), Standing.DROPPED),
        (put(b"a", 0, 1, 413), Standing.DROPPED),
        (Op(Kind.GET, "k", None, 0, 1, 504), Standing.DROPPED),
        (Op(Kind.GET, "k", None, 0, None, None), Standing.DROPPED),
    ],
)
def test_acknowledged_writes_and_answered_reads_count_5xx_and_time_outs_may(
    op: Op, expected: Standing
) -> None:
    assert standing(op) is expected


def test_an_empty_history_is_linearizable() -> None:
    report = check_linearizable([])
    assert report.ok
    assert report.keys == ()


def test_a_sequential_history_is_linearizable() -> None:
    ops = [
        get(None, 0, 1),
        put(b"a", 2, 3),
        get(b"a", 4, 5),
        put(b"b", 6, 7),
        get(b"b", 8, 9),
        delete(10, 11),
        get(None, 12, 13),
        put(b"a", 14, 15),
        get(b"a", 16, 17),
    ]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.LINEARIZABLE
    assert report.line().startswith("linearizable: keys=1 linearizable=1 ")


def test_reads_after_two_concurrent_puts_that_agree_on_one_order_are_linearizable() -> None:
    ops = [put(b"a", 0, 3), put(b"b", 1, 2), get(b"a", 4, 5), get(b"a", 6, 7)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE
    ops = [put(b"a", 0, 3), put(b"b", 1, 2), get(b"b", 4, 5), get(b"b", 6, 7)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_a_read_during_a_put_may_see_the_value_before_or_after_it() -> None:
    for seen in (b"a", b"b"):
        ops = [put(b"a", 0, 1), put(b"b", 2, 5), get(seen, 3, 4), get(b"b", 6, 7)]
        assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_reads_after_two_concurrent_puts_that_see_both_orders_are_not_linearizable() -> None:
    ops = [put(b"a", 0, 3), put(b"b", 1, 2), get(b"a", 4, 5), get(b"b", 6, 7), get(b"a", 8, 9)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.NOT_LINEARIZABLE
    assert not report.ok


def test_a_stale_read_after_a_completed_write_is_not_linearizable() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, 3), get(b"a", 4, 5), get(b"b", 6, 7)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.NOT_LINEARIZABLE
    (key,) = report.keys
    assert key.witness is not None
    assert key.witness.stuck == ops[2]
    assert key.witness.placed == (ops[0], ops[1])
    assert key.witness.state == b"b"


def test_a_read_of_a_value_never_written_is_not_linearizable() -> None:
    ops = [put(b"a", 0, 1), get(b"z", 2, 3)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.NOT_LINEARIZABLE
    assert report.keys[0].witness is not None
    assert report.keys[0].witness.stuck == ops[1]


def test_an_acknowledged_put_read_over_by_the_older_value_is_not_linearizable() -> None:
    ops = [put(b"a", 0, 1), get(b"a", 2, 3), put(b"b", 4, 5), get(b"a", 6, 7), get(b"a", 8, 9)]
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE


def test_a_read_of_the_value_a_delete_removed_is_not_linearizable() -> None:
    ops = [put(b"a", 0, 1), delete(2, 3), get(b"a", 4, 5)]
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE
    ops = [put(b"a", 0, 1), delete(2, 3), get(None, 4, 5)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_a_key_starts_absent() -> None:
    assert verdict_of([get(None, 0, 1), put(b"a", 2, 3)]) is Verdict.LINEARIZABLE
    assert verdict_of([put(b"a", 0, 1), get(None, 2, 3)]) is Verdict.NOT_LINEARIZABLE


def test_a_write_with_no_answer_may_take_effect_any_time_after_its_invocation() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, None, None), get(b"a", 3, 4), get(b"b", 50, 51)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE
    # Even after a write acknowledged later: it has no answer to be placed before.
    ops = [put(b"b", 0, None, None), put(b"c", 1, 2), get(b"c", 3, 4), get(b"b", 5, 6)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_a_write_with_no_answer_may_never_take_effect() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, None, None), get(b"a", 3, 4), get(b"a", 50, 51)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.LINEARIZABLE
    assert report.keys[0].indeterminate == 1
    ops = [put(b"a", 0, 1), delete(2, None, None), get(None, 3, 4), get(b"a", 5, 6)]
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE
    ops = [put(b"a", 0, 1), delete(2, None, None), get(b"a", 3, 4), get(b"a", 5, 6)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_a_write_answered_5xx_may_take_effect_at_any_time_after_its_invocation_or_never() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, 3, 504), get(b"b", 4, 5)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE
    ops = [put(b"a", 0, 1), put(b"b", 2, 3, 503), get(b"a", 4, 5)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE
    # Carried on after its 504 (a hint delivered later), past a write acknowledged since.
    ops = [put(b"a", 0, 1), put(b"b", 2, 3, 504), put(b"c", 4, 5), get(b"b", 6, 7)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE
    # But not before its invocation.
    ops = [put(b"a", 0, 1), get(b"b", 2, 3), put(b"b", 4, 5, 504)]
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE


def test_an_indeterminate_write_serves_a_later_read_past_another_left_out() -> None:
    ops = [delete(1, None, None), get(None, 2, 5), put(b"c", 4, 5, 504), get(b"c", 8, 9)]
    assert verdict_of(ops) is Verdict.LINEARIZABLE


def test_a_refused_write_is_dropped() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, 3, 400), get(b"b", 4, 5)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.NOT_LINEARIZABLE
    assert report.dropped == 1


def test_a_violation_is_reported_on_its_own_key_only() -> None:
    good = on("good", [put(b"a", 0, 1), get(b"a", 2, 3)])
    bad = on("bad", [put(b"a", 0, 1), put(b"b", 2, 3), get(b"a", 4, 5)])
    report = check_linearizable([*good, *bad])
    assert report.verdict is Verdict.NOT_LINEARIZABLE
    verdicts = {key.key: key.verdict for key in report.keys}
    assert verdicts == {"good": Verdict.LINEARIZABLE, "bad": Verdict.NOT_LINEARIZABLE}
    assert "'bad'" in report.details()
    assert "'good'" not in report.details()


def test_the_witness_reads_as_the_order_found_and_the_op_that_did_not_fit() -> None:
    ops = [put(b"a", 0, 1), put(b"b", 2, 3), get(b"a", 4, 5)]
    report = check_linearizable(ops)
    assert report.line() == (
        "not linearizable: keys=1 linearizable=0 not_linearizable=1 unknown=0 "
        "ops=3 indeterminate=0 dropped=0"
    )
    assert report.details().splitlines() == [
        "'k': not linearizable (3 ops, 2 states): GET [4.000, 5.000] saw b'a' cannot be "
        "placed: the longest order found places 2 ops, the last acknowledged "
        "PUT b'b' [2.000, 3.000], and leaves b'b'; no order of the ops before its answer "
        "leaves b'a'",
        "  the end of the longest order found (2 ops):",
        "  1. acknowledged PUT b'a' [0.000, 1.000]",
        "  2. acknowledged PUT b'b' [2.000, 3.000]",
    ]


def test_clock_slack_leaves_writes_closer_than_it_unordered() -> None:
    ops = [put(b"a", 0, 1.0), put(b"b", 1.005, 2), get(b"a", 3, 4)]
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE
    assert verdict_of(ops, clock_slack=CLOCK_SLACK) is Verdict.LINEARIZABLE


def test_a_key_with_an_expiring_put_is_unknown() -> None:
    ops = [Op(Kind.PUT, "k", b"a", 0, 1, 201, ttl=5.0), get(None, 10, 11)]
    report = check_linearizable(ops)
    assert report.verdict is Verdict.UNKNOWN
    assert "ttl" in report.keys[0].reason


def test_the_time_budget_ends_a_search_as_unknown_and_keys_after_it_go_unsearched() -> None:
    small = on("small", [put(b"a", 0, 1), get(b"a", 2, 3)])
    later = on("later", [put(b"v%d" % n, 2 * n, 2 * n + 1) for n in range(30)])
    clock = JumpingClock(step=1.0)
    report = check_linearizable([*later, *hard_history(), *small], time_budget=10, clock=clock)
    verdicts = {key.key: key.verdict for key in report.keys}
    assert verdicts == {
        "small": Verdict.LINEARIZABLE,
        "k": Verdict.UNKNOWN,
        "later": Verdict.UNKNOWN,
    }
    assert report.verdict is Verdict.UNKNOWN
    reasons = {key.key: key.reason for key in report.keys}
    assert reasons["k"] == "the time budget of 10 s ran out"
    assert reasons["later"].startswith("not searched")
    assert clock.reads < 20


def test_the_state_budget_ends_a_search_as_unknown() -> None:
    report = check_linearizable(hard_history(), max_states=1000)
    assert report.verdict is Verdict.UNKNOWN
    assert report.keys[0].reason == "more than 1000 states to search"
    assert report.keys[0].states == 1001


def register_run(rng: random.Random, clients: int, ops_per_client: int) -> list[Op]:
    """A history a correct register could give. Each client runs its ops one after
    another; each op takes effect at one moment (its point) inside its interval, and
    the register, run over the points in order, gives the reads their answers. Some
    writes get no answer or a 504, and of those some took effect; some are refused."""
    planned: list[tuple[float, float, float | None, Kind, int | None, bool]] = []
    for _ in range(clients):
        now = rng.random()
        for _ in range(ops_per_client):
            point = now + 0.01 + rng.random()
            completed = point + 0.01 + rng.random()
            kind = rng.choices([Kind.GET, Kind.PUT, Kind.DELETE], [5, 4, 1])[0]
            status: int | None = {Kind.GET: 200, Kind.PUT: 201, Kind.DELETE: 202}[kind]
            applied = True
            if kind is not Kind.GET and rng.random() < 0.2:
                status = rng.choice([None, 504, 400])
                applied = status != 400 and rng.random() < 0.5
            answered = None if status is None else completed
            planned.append((point, now, answered, kind, status, applied))
            now = completed + 0.01 + rng.random() / 2
    ops: list[Op] = []
    state: bytes | None = None
    for number, (_, invoked, answered, kind, status, applied) in enumerate(
        sorted(planned, key=lambda plan: plan[0])
    ):
        value = b"v%d" % number if kind is Kind.PUT else None
        if kind is Kind.GET:
            value, status = state, (404 if state is None else 200)
        elif applied:
            state = value
        ops.append(Op(kind, "k", value, invoked, answered, status))
    return ops


@settings(max_examples=100, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 5), st.integers(1, 8))
def test_a_correct_registers_history_is_linearizable(
    rng: random.Random, clients: int, ops_per_client: int
) -> None:
    assert verdict_of(register_run(rng, clients, ops_per_client)) is Verdict.LINEARIZABLE


@settings(max_examples=100, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 5), st.integers(1, 8), st.data())
def test_one_read_of_a_value_never_written_makes_it_not_linearizable(
    rng: random.Random, clients: int, ops_per_client: int, data: st.DataObject
) -> None:
    ops = register_run(rng, clients, ops_per_client)
    reads = [n for n, op in enumerate(ops) if op.kind is Kind.GET]
    assume(reads)
    n = data.draw(st.sampled_from(reads))
    read = ops[n]
    ops[n] = Op(Kind.GET, "k", b"never written", read.invoked, read.completed, 200)
    assert verdict_of(ops) is Verdict.NOT_LINEARIZABLE


def test_a_thousand_ops_from_five_clients_are_checked_within_the_budget() -> None:
    ops = register_run(random.Random(7), clients=5, ops_per_client=200)
    assert verdict_of(ops, time_budget=5.0) is Verdict.LINEARIZABLE


def linearizable_by_brute_force(ops: list[Op]) -> bool:
    """The definition, tried on every subset of the indeterminate writes and every order."""
    placed = [op for op in ops if standing(op) is Standing.PLACED]
    optional = [op for op in ops if standing(op) is Standing.OPTIONAL]
    for count in range(len(optional) + 1):
        for chosen in itertools.combinations(optional, count):
            for order in itertools.permutations([*placed, *chosen]):
                if all(
                    returned(later) >= earlier.invoked
                    for n, earlier in enumerate(order)
                    for later in order[n + 1 :]
                ) and fits_the_register(order):
                    return True
    return False


def returned(op: Op) -> float:
    """When `op` took effect at the latest: by its answer, or, indeterminate, any time."""
    return op.settled_by if standing(op) is Standing.PLACED else math.inf


def fits_the_register(order: tuple[Op, ...]) -> bool:
    state: bytes | None = None
    for op in order:
        if op.kind is Kind.GET and op.value != state:
            return False
        if op.is_write:
            state = op.value
    return True


@st.composite
def small_histories(draw: st.DrawFn) -> list[Op]:
    """Up to 6 ops on times that often coincide, with any answer."""
    ops = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(Kind))
        invoked = draw(st.integers(0, 6))
        completed: float | None = invoked + draw(st.integers(0, 4))
        if kind is Kind.GET:
            value = draw(st.sampled_from([b"a", b"b", None]))
            status: int | None = 404 if value is None else 200
        else:
            value = draw(st.sampled_from([b"a", b"b"])) if kind is Kind.PUT else None
            status = draw(st.sampled_from([201 if kind is Kind.PUT else 202, None, 504, 400]))
            completed = None if status is None else completed
        ops.append(Op(kind, "k", value, invoked, completed, status))
    return ops


@settings(max_examples=300, deadline=None)
@given(small_histories())
def test_the_search_agrees_with_trying_every_order(ops: list[Op]) -> None:
    expected = (
        Verdict.LINEARIZABLE if linearizable_by_brute_force(ops) else Verdict.NOT_LINEARIZABLE
    )
    assert verdict_of(ops) is expected
