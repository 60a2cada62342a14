"""The cockpit's faults: the process faults it asks of a running `python -m dht cluster`
(kill -9, pause, resume, restart, wipe; through the cluster's control server, with the
token of its `cluster.json`), and the fault timeline it keeps of them, of the link
faults it passes to Toxiproxy, and of the node exits the cluster reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp

from dht.testbed.cluster_control import CONTROL_FILE, TOKEN_HEADER
from dht.testbed.fault_timeline import FaultTimeline
from dht.testbed.node_faults import SKEW_SECONDS

log = logging.getLogger("dht.testbed.cockpit")

PROCESS_ACTIONS = ("kill", "pause", "resume", "restart", "wipe", "skew")
# kill, pause and resume take a moment; a restart or a wipe waits until the node serves.
ACTION_TIMEOUT = aiohttp.ClientTimeout(total=60.0)
STATES_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
WATCH_INTERVAL = 1.0


@dataclass(frozen=True)
class ControlAccess:
    """Where a running cluster's control server listens, and its token."""

    url: str
    token: str
    pid: int

    @classmethod
    def of_cluster(cls, data_dir: Path) -> ControlAccess:
        """From `<data_dir>/cluster.json`; ValueError with one line saying why not."""
        path = data_dir / CONTROL_FILE
        try:
            info = json.loads(path.read_text())
            port, token, pid = int(info["control_port"]), str(info["token"]), int(info["pid"])
            return cls(f"http://127.0.0.1:{port}", token, pid)
        except FileNotFoundError:
            raise ValueError(f"no cluster runs on {data_dir}: there is no {path}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read {path}: {exc}") from None


class ProcessFaults:
    """Asks the cluster for process faults and keeps the timeline in step with them."""

    def __init__(
        self,
        control: ControlAccess,
        names: list[str],
        urls: tuple[str, ...],
        timeline: FaultTimeline,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.control = control
        self.names = names
        self.urls = urls
        self.timeline = timeline
        self._clock = clock
        # Actions under way per node: the watch leaves its timeline to them, so a kill
        # shows as "kill -9 node2", not as an exit seen a moment before.
        self._busy: dict[str, int] = {}

    async def states(self, session: aiohttp.ClientSession) -> list[dict[str, Any]]:
        """Each node's process state (running, paused, down, restarting), in the
        cockpit's order; raises aiohttp.ClientError or TimeoutError."""
        async with session.get(
            self.control.url + "/nodes",
            headers={TOKEN_HEADER: self.control.token},
            timeout=STATES_TIMEOUT,
        ) as response:
            response.raise_for_status()
            by_url = {node["url"]: node for node in (await response.json())["nodes"]}
        return [
            {"name": name, **by_url.get(url, {"url": url, "state": "not a member"})}
            for name, url in zip(self.names, self.urls, strict=True)
        ]

    async def act(self, session: aiohttp.ClientSession, action: str, index: int) -> tuple[int, str]:
        """Asks the cluster for `action` on node `index`: (200, what it said) once done,
        else (status, one line saying why), and notes it on the timeline."""
        name, url = self.names[index], self.urls[index]
        started = self._clock()
        self._busy[name] = self._busy.get(name, 0) + 1
        try:
            status, lines = await self._ask(session, action, url)
        finally:
            self._busy[name] -= 1
            if not self._busy[name]:
                del self._busy[name]
        if status == 200:
            self._note(action, name, self._clock() - started)
            log.info("%s %s: %s", action, name, " / ".join(lines))
            return 200, "\n".join(lines)
        log.warning("%s %s failed: %s", action, name, lines[-1] if lines else status)
        return status, lines[-1] if lines else f"the cluster answered {status}"

    async def _ask(
        self, session: aiohttp.ClientSession, action: str, url: str
    ) -> tuple[int, list[str]]:
        try:
            async with session.post(
                f"{self.control.url}/{action}",
                json={"url": url},
                headers={TOKEN_HEADER: self.control.token},
                timeout=ACTION_TIMEOUT,
            ) as response:
                text = await response.text()
                status = response.status
        except TimeoutError:
            return 504, [f"the cluster did not finish the {action} within 60 s"]
        except aiohttp.ClientError as exc:
            return 502, [f"the cluster's control server did not answer: {exc}"]
        lines = [line.removeprefix("error: ") for line in text.strip().splitlines()]
        if status == 200 and lines and lines[-1] == "ok":
            return 200, lines[:-1]
        return (status if status != 200 else 409), lines

    def _note(self, action: str, name: str, seconds: float) -> None:
        timeline = self.timeline
        if action == "kill":
            timeline.end(f"pause:{name}")
            timeline.begin(f"process:{name}", f"kill -9 {name}", "process")
        elif action == "pause":
            timeline.begin(f"pause:{name}", f"pause {name}", "process")
        elif action == "resume":
            timeline.end(f"pause:{name}")
        elif action == "skew":  # a restart, with the clock skewed or right again
            timeline.end(f"pause:{name}")
            timeline.end(f"process:{name}")
            if timeline.is_open(f"skew:{name}"):
                timeline.end(f"skew:{name}")
            else:
                timeline.begin(f"skew:{name}", f"clock of {name} {SKEW_SECONDS:+g} s", "process")
        else:  # restart or wipe: whatever kept the node down or stopped ends
            timeline.end(f"pause:{name}")
            timeline.end(f"process:{name}")
            label = f"restart {name}" if action == "restart" else f"wipe {name} and restart"
            timeline.instant(f"{action}:{name}", label, "process", seconds)

    async def watch(self, session: aiohttp.ClientSession) -> None:
        """Until cancelled, once a second: a node that exits with no kill from here (a
        crash, a kill from a terminal) begins a fault on the timeline, and its restart
        (from here or `cluster restart`) ends it; a pause from a terminal begins one,
        and whatever ends it (resume, kill, restart, from anywhere) ends it. A fault
        shorter than a second from a terminal (a wipe) may pass unseen."""
        while True:
            try:
                for node in await self.states(session):
                    name = node["name"]
                    if name in self._busy:
                        continue
                    key, paused, state = f"process:{name}", f"pause:{name}", node["state"]
                    if state == "paused":
                        self.timeline.begin(paused, f"pause {name}", "process")
                    else:
                        self.timeline.end(paused)
                    skew = node.get("clock_skew")
                    if isinstance(skew, (int, float)) and skew:
                        label = f"clock of {name} {skew:+g} s"
                        self.timeline.begin(f"skew:{name}", label, "process")
                    elif skew is not None:
                        self.timeline.end(f"skew:{name}")
                    if state == "down" and not self.timeline.is_open(key):
                        code = node.get("exit_code")
                        self.timeline.begin(key, f"{name} exited (code {code})", "process")
                    elif state in ("running", "paused") and self.timeline.is_open(key):
                        self.timeline.end(key)
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                pass  # the page shows the control server's trouble when it asks
            await asyncio.sleep(WATCH_INTERVAL)


def note_link_change(timeline: FaultTimeline, method: str, path: str, body: bytes) -> None:
    """Notes on the timeline a change the page made through Toxiproxy's API (`path` as
    the page sent it, after /toxiproxy): a link cut or healed, a toxic added or
    removed, or everything reset."""
    parts = [unquote(part) for part in path.split("?")[0].split("/") if part]
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    if method == "POST" and parts == ["reset"]:
        timeline.end_all("link:")
    elif method == "POST" and len(parts) == 2 and parts[0] == "proxies":
        link = parts[1]
        if payload.get("enabled") is False:
            timeline.begin(f"link:{link}:cut", f"cut {link}", "link")
        elif payload.get("enabled") is True:
            timeline.end(f"link:{link}:cut")
    elif method == "POST" and len(parts) == 3 and parts[0] == "proxies" and parts[2] == "toxics":
        link, name = parts[1], str(payload.get("name", "toxic"))
        attributes = payload.get("attributes")
        attributes = attributes if isinstance(attributes, dict) else {}
        if payload.get("type") == "latency":
            label = f"slow {link} by {attributes.get('latency', '?')} ms"
        else:
            label = f"{payload.get('type', 'toxic')} on {link}"
        timeline.begin(f"link:{link}:{name}", label, "link")
    elif method == "DELETE" and len(parts) == 4 and parts[0] == "proxies" and parts[2] == "toxics":
        timeline.end(f"link:{parts[1]}:{parts[3]}")
