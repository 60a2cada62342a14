"""What became of each write (dht/history/classification.py), on hand-made histories: each
acknowledged write is stable, lost, stale, undone or never read, as Jepsen's set checker
says it, and a write without an answer or with a 5xx is indeterminate, never
acknowledged."""

from __future__ import annotations

import pytest

from dht.history.classification import COUNTED, Fate, classify
from dht.history.operation import Kind, Op


def put(key: str, value: bytes, invoked: float, completed: float | None, status: int | None) -> Op:
    return Op(Kind.PUT, key, value, invoked, completed, status, node="node1")


def delete(key: str, invoked: float, completed: float | None, status: int | None) -> Op:
    return Op(Kind.DELETE, key, None, invoked, completed, status, node="node2")


def get(key: str, value: bytes | None, invoked: float, completed: float) -> Op:
    status = 404 if value is None else 200
    return Op(Kind.GET, key, value, invoked, completed, status, node="node2")


def fates(ops: list[Op], final: dict[str, bytes | None]) -> list[Fate]:
    return [fate for _, fate in classify(ops, final).fates]


def test_a_put_a_read_saw_is_stable() -> None:
    assert fates([put("a", b"a1", 0.0, 0.1, 201), get("a", b"a1", 0.2, 0.3)], {"a": b"a1"}) == [
        Fate.STABLE
    ]


def test_a_put_only_the_final_read_saw_is_stable() -> None:
    assert fates([put("a", b"a1", 0.0, 0.1, 201)], {"a": b"a1"}) == [Fate.STABLE]


def test_a_put_overwritten_before_any_read_was_never_read() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, 0.3, 201)]
    assert fates(history, {"a": b"a2"}) == [Fate.NEVER_READ, Fate.STABLE]


def test_a_put_missing_from_the_final_state_is_lost() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, 0.3, 201)]
    result = classify(history, {"a": b"a1"})
    assert [fate for _, fate in result.fates] == [Fate.STABLE, Fate.LOST]
    assert result.counts()["lost"] == 1 and not result.ok


def test_a_put_a_later_quorum_read_missed_is_stale() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 201),
        get("a", b"a1", 0.5, 0.6),
    ]
    result = classify(history, {"a": b"a2"})
    assert [fate for _, fate in result.fates] == [Fate.STABLE, Fate.STALE]
    assert result.counts()["stale"] == 1
    (example,) = result.examples()["stale"]
    assert "'a'" in example and "b'a1'" in example and "through node2" in example, example
    assert "b'a2'" in example and "through node1" in example, example


def test_a_read_concurrent_with_a_put_may_miss_it_and_the_put_is_not_stale() -> None:
    history = [put("a", b"a1", 0.0, 0.5, 201), get("a", None, 0.2, 0.3)]
    assert fates(history, {"a": b"a1"}) == [Fate.STABLE]


def test_a_delete_whose_value_came_back_is_undone() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), delete("a", 0.2, 0.3, 202)]
    result = classify(history, {"a": b"a1"})
    assert [fate for _, fate in result.fates] == [Fate.STABLE, Fate.UNDONE]
    assert result.counts()["undone"] == 1 and not result.ok


def test_a_delete_a_read_saw_absent_is_stable() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), delete("a", 0.2, 0.3, 202), get("a", None, 0.4, 0.5)]
    assert fates(history, {"a": None}) == [Fate.NEVER_READ, Fate.STABLE]


def test_a_delete_overwritten_before_any_read_was_never_read() -> None:
    history = [
        delete("a", 0.0, 0.1, 202),
        put("a", b"a1", 0.2, 0.3, 201),
        get("a", b"a1", 0.4, 0.5),
    ]
    assert fates(history, {"a": b"a1"}) == [Fate.NEVER_READ, Fate.STABLE]


@pytest.mark.parametrize("status", [None, 500, 503, 504])
def test_a_write_without_an_answer_or_with_a_5xx_is_indeterminate_never_acknowledged(
    status: int | None,
) -> None:
    completed = None if status is None else 0.1
    history = [put("a", b"a1", 0.0, completed, status), delete("a", 0.2, completed, status)]
    result = classify(history, {"a": b"a1"})
    assert result.fates == ()
    assert result.indeterminate == tuple(history)
    assert result.ok


def test_a_refused_write_is_neither_acknowledged_nor_indeterminate() -> None:
    result = classify([put("a", b"a1", 0.0, 0.1, 400)], {"a": None})
    assert result.fates == () and result.indeterminate == ()


def test_a_value_never_written_is_invented() -> None:
    result = classify([put("a", b"a1", 0.0, 0.1, 201), get("a", b"zz", 0.2, 0.3)], {"a": b"a1"})
    assert result.counts()["invented"] == 1


def test_the_counts_come_in_order_and_the_failure_names_examples() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 201),
        put("b", b"b1", 0.0, 0.1, 201),
        delete("b", 0.2, 0.3, 202),
        put("c", b"c1", 0.0, None, None),
    ]
    result = classify(history, {"a": b"a1", "b": b"b1", "c": None})
    assert tuple(result.counts()) == COUNTED
    assert result.line() == (
        "stable=2 lost=1 stale=0 never read=0 undone=1 invented=0 indeterminate=1"
    )
    message = result.failure()
    assert message.startswith("history judged: stable=2 lost=1"), message
    assert "lost: 'a': acknowledged PUT b'a2' [0.200, 0.300] through node1 lost" in message
    assert "undone: 'b': final read saw b'b1' resurrected after the acknowledged DELETE" in message


def test_a_clean_history_has_no_failure() -> None:
    assert classify([put("a", b"a1", 0.0, 0.1, 201)], {"a": b"a1"}).failure() == ""


def test_examples_are_limited_to_the_first_few() -> None:
    history = [put("a", f"a{i}".encode(), i, i + 0.1, 201) for i in range(10)]
    result = classify(history, {"a": b"a9"})
    assert result.counts()["never read"] == 9
    assert len(result.examples(limit=3)["never read"]) == 3
