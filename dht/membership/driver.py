"""The driver of a membership change: moves every node through the steps

    stable(old) -> joint(old, new) -> handoff(old, new) -> stable(new)

one step at a time, going on only when *every* node of old and new has taken the step
(`PUT /v0/admin/topology`, dht/membership/api.py), so no two nodes are ever more than
one step apart, and after the two handoff steps only when every node reports its handoff
done. Then it closes the change: the same stable step with no node draining, which lets
tombstone collection start again (SPEC 13.3) and shuts out the nodes that left. A node
that does not answer at all stops the change within `no_answer_deadline`
(10 s), where it is, saying which; one that answers but is busy (draining, handing off)
is waited for up to `step_deadline`. Run the same change again and it reads the step of
every node of old and new and resumes from the least advanced one
(`dht.model.topology.steps_to_resume`).

Nodes named `dead` (gone for good) are not asked anything: the change goes through with
the live nodes, which hand off what the dead ones held from their own copies (see
dht/membership/rebalance.py). Before the first step the driver says how much of the key
space has its only copies on the nodes removed, and refuses, unless `accept_loss`, when
some of it (for F of 2 or more) has no live copy at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from dht.limits import NO_ANSWER_DEADLINE
from dht.model.machine import SYSTEM
from dht.model.ring import Ring
from dht.model.topology import (
    HANDOFF,
    JOINT,
    STABLE,
    TopologyState,
    UnclearChange,
    data_at_risk,
    steps_to_resume,
)
from dht.transport.wire import TOPOLOGY_PATH, proving

POLL = 0.2


def _now() -> float:
    """The driver's deadlines and durations run on its event loop's clock, which a
    simulation's loop keeps in virtual time."""
    return asyncio.get_running_loop().time()


class ChangeFailed(Exception):
    """The change cannot go on; the message says where it stands and why."""


@dataclass
class ChangeReport:
    old: list[str]
    new: list[str]
    step_seconds: dict[str, float] = field(default_factory=dict)
    # Per node: records its handoffs sent (to every receiver) and deleted, both passes.
    sent: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    # Per node: records its last handoff kept, refused by their owners as too far ahead
    # of their clocks (SPEC 13.2); it offers them again until they are taken.
    kept: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(self.step_seconds.values())


async def change_membership(
    via: list[str],
    new: list[str],
    *,
    dead: list[str] | None = None,
    accept_loss: bool = False,
    secret: str | None = None,
    step_deadline: float = 120.0,
    no_answer_deadline: float = NO_ANSWER_DEADLINE,
    say: Callable[[str], None] = lambda line: None,
    session: aiohttp.ClientSession | None = None,
) -> ChangeReport:
    """Changes the membership of the cluster `via` belongs to (any of its nodes) to `new`.
    New nodes must be running already (started with `--join`); `dead` nodes of the old
    list are gone for good and are not asked anything.

    A change under way to a list that `new` only shortens by dead nodes (a node that was
    to stay, lost in the middle of it) is first finished without them, then followed by
    their removal. `session`: what the requests go through (the simulator's, which
    answers them in memory); a session of its own, proving `secret`, if None."""
    gone = sorted(set(dead or ()))
    if overlap := sorted(set(gone) & set(new)):
        raise ChangeFailed(
            f"{', '.join(overlap)} is named dead and in the new node list: a dead node "
            "can only leave"
        )
    deadlines = (step_deadline, no_answer_deadline)
    if session is not None:
        return await _change_via(session, via, new, gone, accept_loss, deadlines, say)
    timeout = aiohttp.ClientTimeout(total=10)
    middlewares = (proving(secret, SYSTEM),) if secret else ()
    async with aiohttp.ClientSession(timeout=timeout, middlewares=middlewares) as own:
        return await _change_via(own, via, new, gone, accept_loss, deadlines, say)


async def _change_via(
    session: aiohttp.ClientSession,
    via: list[str],
    new: list[str],
    gone: list[str],
    accept_loss: bool,
    deadlines: tuple[float, float],
    say: Callable[[str], None],
) -> ChangeReport:
    no_answer_deadline = deadlines[1]
    states = await _steps_of_every_node(session, via, new, gone, no_answer_deadline)
    going_to = _change_under_way(states.values())
    lost = set(going_to or ()) - set(new)
    # Every node in one list's stable step, some not closed (a close the driver did not
    # finish, SPEC 13.3): another change can start only once it is.
    unclosed = going_to is not None and all(
        state.next is None for state in states.values() if not state.joining_seed
    )
    replacing_lost = bool(lost) and set(new) < set(going_to or ()) and lost <= set(gone)
    if going_to and set(going_to) != set(new) and (unclosed or replacing_lost):
        say(
            f"finishing the change under way to {', '.join(going_to)}"
            + (f" without {', '.join(sorted(lost))} (dead)" if replacing_lost else "")
            + " first"
        )
        old, steps = _steps(states, list(going_to))
        finished = await _drive(
            session, old, list(going_to), gone, _left(states), steps, deadlines, say
        )
        gone = sorted(set(gone) & set(going_to))  # the others are out of the cluster now
        states = await _steps_of_every_node(session, via, new, gone, no_answer_deadline)
        report = await _change(session, states, new, gone, accept_loss, deadlines, say)
        report.old = finished.old
        for url, sent in finished.sent.items():
            report.sent[url] = report.sent.get(url, 0) + sent
        return report
    return await _change(session, states, new, gone, accept_loss, deadlines, say)


def _change_under_way(states: Collection[TopologyState]) -> tuple[str, ...] | None:
    """The node list a change the nodes are in goes to (None: they are stable, and the
    last change is closed). A change every node went through is under way until it is
    closed (SPEC 13.3): a node of its new list lost before then is named dead by
    finishing it without that node, then removing it."""
    for state in states:
        if state.next is not None and not state.joining_seed:
            return state.next
    for state in states:
        if state.next is None and not state.closed:
            return state.current
    return None


def _steps(
    states: dict[str, TopologyState], new: list[str]
) -> tuple[tuple[str, ...], list[TopologyState]]:
    try:
        old, steps = steps_to_resume(list(states.values()), new)
    except UnclearChange as exc:
        raise ChangeFailed(str(exc)) from None
    if not steps:
        raise ChangeFailed("the new node list is the current one: nothing to change")
    return old, steps


async def _change(
    session: aiohttp.ClientSession,
    states: dict[str, TopologyState],
    new: list[str],
    gone: list[str],
    accept_loss: bool,
    deadlines: tuple[float, float],
    say: Callable[[str], None],
) -> ChangeReport:
    old, steps = _steps(states, new)
    if unknown := sorted(set(gone) - set(old)):
        raise ChangeFailed(
            f"{', '.join(unknown)} is named dead but is no node of the cluster: {', '.join(old)}"
        )
    # From the stable step on, every node's handoff step was complete: nothing is at risk.
    if (gone or accept_loss) and steps[0].phase != STABLE:
        vnodes = await _vnodes(session, sorted(states))
        _check_risk(old, new, gone, vnodes, accept_loss, say)
    before = steps[-1].epoch - 3  # the epoch of stable(old)
    if any(state.epoch > before for state in states.values()):
        say(f"resuming at step {steps[0].phase} (epoch {steps[0].epoch})")
    return await _drive(session, old, new, gone, _left(states), steps, deadlines, say)


def _left(states: dict[str, TopologyState]) -> set[str]:
    """Every node some node knows left the cluster in an earlier change."""
    return {url for state in states.values() for url in state.left}


async def _drive(
    session: aiohttp.ClientSession,
    old: tuple[str, ...],
    new: list[str],
    gone: list[str],
    left: set[str],
    steps: list[TopologyState],
    deadlines: tuple[float, float],
    say: Callable[[str], None],
) -> ChangeReport:
    """Takes `steps` on every node of the change but the dead ones, waiting for each
    handoff, then closes the change. `left`: the nodes earlier changes removed, which
    the joint step tells a node that joins."""
    step_deadline, no_answer_deadline = deadlines
    dead = tuple(url for url in gone if url in old or url in new)
    # Who left in earlier changes, for a node that joins: it refuses them too (SPEC 13.9).
    steps = [
        step if step.next is None else replace(step, dead=dead, left=tuple(left - step.members))
        for step in steps
    ]
    nodes = sorted((set(old) | set(new)) - set(gone))
    report = ChangeReport(list(old), new)
    for step in steps:
        began = _now()
        say(f"step {step.phase} (epoch {step.epoch}) on {len(nodes)} nodes")
        await _take_everywhere(session, nodes, step, step_deadline, no_answer_deadline)
        if step.phase != JOINT:
            say("  handing off" if step.phase == HANDOFF else "  cleaning up")
            handoffs = await _wait_for_handoffs(
                session, nodes, step, step_deadline, no_answer_deadline, say
            )
            for url, handoff in handoffs.items():
                sent = sum(target["records_sent"] for target in handoff["targets"].values())
                report.sent[url] = report.sent.get(url, 0) + sent
                report.deleted[url] = report.deleted.get(url, 0) + handoff["deleted"]
                report.kept.pop(url, None)
                if kept := handoff.get("kept", 0):
                    report.kept[url] = kept
                    say(
                        f"  {url} kept {kept} record{'' if kept == 1 else 's'} that the "
                        "new owners refused as too far ahead of their clocks (see its log)"
                    )
        report.step_seconds[step.phase] = _now() - began
    closing = replace(steps[-1], draining=())
    await _take_everywhere(session, nodes, closing, step_deadline, no_answer_deadline)
    say("  closed: tombstone collection starts again, and the nodes that left are shut out")
    return report


async def _steps_of_every_node(
    session: aiohttp.ClientSession,
    via: list[str],
    new: list[str],
    dead: list[str],
    deadline: float,
) -> dict[str, TopologyState]:
    """The step of every node of the change, by URL: the `via` nodes (at least one must
    answer), the nodes of `new`, and every node any of them lists (the old nodes), but
    the dead ones, each asked again until it answers, up to `deadline`. Every node, not
    only the one asked: a change stopped between two nodes' steps resumes from the least
    advanced one."""
    states: dict[str, TopologyState] = {}
    errors: dict[str, str] = {}
    for url in via:
        if url not in dead:
            await _read_step(session, url, states, errors)
    if not states:
        raise ChangeFailed("no node answered: " + "; ".join(errors.values()))
    until = _now() + deadline
    while True:
        # The nodes draining too: a change over but not closed waits for their handoffs.
        wanted = set(new).union(
            *(state.members | set(state.draining or ()) for state in states.values())
        ) - set(dead)
        missing = sorted(wanted - states.keys())
        if not missing:
            return states
        for url in missing:
            await _read_step(session, url, states, errors)
        silent = [url for url in missing if url not in states]
        if silent:
            if _now() > until:
                unclosed = any(not state.closed for state in states.values())
                raise ChangeFailed(
                    f"{', '.join(silent)} did not answer within {deadline:.0f} s ("
                    + "; ".join(errors[url] for url in silent)
                    + "): "
                    + (
                        "the last change is not closed, and no tombstone is collected until it is. "
                        if unclosed
                        else "no step was taken, the cluster serves on as it was. "
                    )
                    + _dead_hint(silent, new)
                )
            await asyncio.sleep(POLL)


async def _vnodes(session: aiohttp.ClientSession, nodes: list[str]) -> int:
    """The virtual nodes per node the cluster places keys with, from a node's status."""
    for url in nodes:
        try:
            return int((await _get_json(session, url + "/v0/status"))["vnodes"])
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError, TypeError):
            continue
    raise ChangeFailed("no node said how many virtual nodes it places keys with")


def _dead_hint(silent: list[str], new: list[str]) -> str:
    """What to do about nodes that do not answer: wait for them, or, if they are gone
    for good, name them dead (and leave out of the new list those that were to stay)."""
    leaving = [url for url in silent if url not in new]
    staying = [url for url in silent if url in new]
    hint = "Run the same change again once they answer"
    if leaving:
        hint += f"; if {', '.join(leaving)} is gone for good, --dead {','.join(leaving)} removes it"
    if staying:
        hint += (
            f"; {', '.join(staying)} is in the new list: leave it out of --to (and name it "
            "in --dead) if it is gone for good"
        )
    return hint


def _check_risk(
    old: tuple[str, ...],
    new: list[str],
    dead: list[str],
    vnodes: int,
    accept_loss: bool,
    say: Callable[[str], None],
) -> None:
    """Says, per majority `A/F`, how much of the key space has writes that may have been
    acknowledged by removed nodes alone, and by dead ones alone; refuses, unless
    `accept_loss`, when writes acknowledged by two or more replicas may have no live
    copy (a write acknowledged by one replica, on a dead node, is gone whatever one
    does)."""
    leaving = sorted(set(old) - set(new))
    if not leaving:
        return
    # Majority writes (A > F/2: the default, and every A/F the quorum contract of rule
    # 3.5 covers) and 1/1; a minority write is at risk wherever one of its replicas is.
    risks = [
        risk
        for risk in data_at_risk(Ring(old, vnodes), leaving, dead)
        if 2 * risk.acks > risk.copies
    ]
    for risk in risks:
        say(
            f"writes at {risk.acks}/{risk.copies}: {risk.removed:.1%} of the key space may "
            "have had them taken by removed nodes only"
            + (f", {risk.lost:.1%} by dead nodes only (no live copy)" if risk.lost else "")
        )
    unsafe = [risk for risk in risks if risk.lost and risk.acks >= 2]  # 1/1: gone anyway
    if unsafe and not accept_loss:
        worst = max(unsafe, key=lambda risk: risk.lost)
        raise ChangeFailed(
            f"writes at {worst.acks}/{worst.copies} may have no live copy left "
            f"({worst.lost:.1%} of the key space): they would be lost. Bring a dead "
            "node back if you can; --accept-loss goes on without them"
        )


async def _read_step(
    session: aiohttp.ClientSession,
    url: str,
    states: dict[str, TopologyState],
    errors: dict[str, str],
) -> None:
    try:
        states[url] = TopologyState.from_json(await _get_json(session, url + TOPOLOGY_PATH))
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        errors[url] = f"{url}: {str(exc) or type(exc).__name__}"


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        if response.status != 200:
            raise ValueError(f"{response.status} {await response.text()}".strip())
        return await response.json()


async def _take_everywhere(
    session: aiohttp.ClientSession,
    nodes: list[str],
    step: TopologyState,
    deadline: float,
    no_answer_deadline: float,
) -> None:
    body = step.to_json()
    waiting = {url: "not asked yet" for url in nodes}
    silent_since: dict[str, float] = {}
    until = _now() + deadline
    while waiting:
        for url in list(waiting):
            try:
                async with session.put(url + TOPOLOGY_PATH, json=body) as response:
                    silent_since.pop(url, None)
                    if response.status == 200:
                        del waiting[url]
                        continue
                    reason = (await response.text()).strip()
                    if response.status in (400, 403, 409):  # asking again changes nothing
                        raise ChangeFailed(f"{url} refused the step: {reason}")
                    waiting[url] = reason
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                waiting[url] = f"no answer ({str(exc) or type(exc).__name__})"
                silent_since.setdefault(url, _now())
        if waiting:
            _stop_if_silent(silent_since, waiting, no_answer_deadline, step, nodes)
            if _now() > until:
                raise ChangeFailed(
                    f"step {step.phase} (epoch {step.epoch}) not taken within {deadline:.0f} s "
                    "by "
                    + "; ".join(f"{url}: {why}" for url, why in waiting.items())
                    + ". Run the same change again to resume"
                )
            await asyncio.sleep(POLL)


def _stop_if_silent(
    silent_since: dict[str, float],
    why: dict[str, str],
    deadline: float,
    step: TopologyState,
    nodes: list[str],
) -> None:
    """Raises ChangeFailed once a node has not answered at all for `deadline`."""
    now = _now()
    silent = sorted(url for url, since in silent_since.items() if now - since > deadline)
    if silent:
        new = list(step.next or step.current)
        raise ChangeFailed(
            f"{', '.join(silent)} did not answer for {deadline:.0f} s ("
            + "; ".join(why[url] for url in silent)
            + f"): the change stopped at step {step.phase} (epoch {step.epoch}), which the "
            "nodes serve in"
            + (", not closed: no tombstone is collected until it is" if step.next is None else "")
            + ". "
            + _dead_hint(silent, new)
        )


async def _wait_for_handoffs(
    session: aiohttp.ClientSession,
    nodes: list[str],
    step: TopologyState,
    deadline: float,
    no_answer_deadline: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Until every node's handoff of `step` is done; returns each one's figures. The
    deadline counts from the last progress any node made, so a long handoff that moves
    is never cut short."""
    scanned: dict[str, int] = {}
    silent_since: dict[str, float] = {}
    silent_why: dict[str, str] = {}
    until = _now() + deadline
    last_said = _now()
    while True:
        pending = []
        done: dict[str, Any] = {}
        for url in nodes:
            try:
                handoff = (await _get_json(session, url + "/v0/status"))["membership"]["handoff"]
                silent_since.pop(url, None)
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                silent_why[url] = f"no answer ({str(exc) or type(exc).__name__})"
                pending.append(f"{url}: {silent_why[url]}")
                silent_since.setdefault(url, _now())
                continue
            if handoff["epoch"] == step.epoch and handoff["done"]:
                done[url] = handoff
                continue
            if scanned.get(url) != handoff["scanned"]:
                scanned[url] = handoff["scanned"]
                until = _now() + deadline
            pending.append(
                f"{url}: {handoff['state']}, {handoff['scanned']} scanned, "
                f"{handoff['remaining']} to go"
            )
        if not pending:
            return done
        _stop_if_silent(silent_since, silent_why, no_answer_deadline, step, nodes)
        if _now() > until:
            raise ChangeFailed(
                f"handoff of epoch {step.epoch} made no progress for {deadline:.0f} s: "
                + "; ".join(pending)
                + ". Run the same change again to resume"
            )
        if _now() - last_said > 5:
            say("  " + "; ".join(pending))
            last_said = _now()
        await asyncio.sleep(POLL)


def summary_lines(report: ChangeReport) -> list[str]:
    """What a finished change took: seconds per step, records sent and deleted per node."""
    steps = ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in report.step_seconds.items())
    lines = [
        f"membership changed from {len(report.old)} to {len(report.new)} nodes in "
        f"{report.seconds:.2f} s ({steps})"
    ]
    for url in sorted(report.sent):
        lines.append(
            f"  {url}: {report.sent[url]} records sent, {report.deleted.get(url, 0)} deleted"
        )
    for url, kept in sorted(report.kept.items()):
        lines.append(
            f"  {url} still holds {kept} records its owners refused as too far ahead of "
            "their clocks; it offers them again until they are taken (SPEC.md rule 13.2)"
        )
    return lines
