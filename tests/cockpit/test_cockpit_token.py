"""Who may act through the cockpit (SPEC.md rule 6.9), on a real `python -m dht cluster`:
its dashboard acts only for whoever holds the token of the URL `cluster` prints. Another
user of the machine who reaches the port, with the page's own X-Cockpit header, gets
403 and wipes nothing; the token never shows in the process list, and cluster.json,
readable by its owner only, keeps the URL."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from dht.conformance.http_client import entity_url, request
from dht.conformance.rules import rule
from tests.cockpit.test_dashboard import attribute, running_cluster, wait_until

KEYS = [f"token-{index:02d}" for index in range(5)]


@rule("6.9")
def test_an_action_without_the_cockpit_token_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 2, "--probe-rate", "0") as cluster:
        node1, node2 = cluster.node_urls
        for key in KEYS:  # on both replicas
            assert request("PUT", entity_url(node1, key, "2/2"), b"kept").status == 201
        dashboard = cluster.dashboard
        page_headers = {"X-Cockpit": "1"}  # what stops a web page, not a person
        for index in (0, 1):
            refused = request("POST", f"{dashboard}/processes/{index}/wipe", headers=page_headers)
            assert refused.status == 403, refused
            reason = refused.text
            assert reason.count("\n") == 1 and "open the URL with ?token=" in reason, reason
        for path in ("/toxiproxy/reset", "/experiment/start"):
            assert request("POST", dashboard + path, b"", headers=page_headers).status == 403
        wrong = {"Authorization": "Bearer " + "x" * len(cluster.token)}
        refused = request("POST", f"{dashboard}/processes/1/wipe", headers=page_headers | wrong)
        assert refused.status == 403, refused
        for key in KEYS:  # nothing was wiped: each node alone still has every write
            for url in (node1, node2):
                answer = request("GET", entity_url(url, key, "1/2"))
                assert (answer.status, answer.body) == (200, b"kept"), (url, key, answer)

        wiped = cluster.ask("POST", "/processes/1/wipe", timeout=60.0)  # with the token
        assert wiped.status == 200, wiped
        states = json.loads(cluster.get("/processes").body)["nodes"]
        assert [state["state"] for state in states] == ["running", "running"], states


@rule("6.9")
def test_reading_the_cockpit_without_its_token_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 1, "--probe-rate", "0") as cluster:
        for path in ("/", "/cockpit.json", "/processes", "/timeline", "/nodes/0/v0/status"):
            refused = request("GET", cluster.dashboard + path)
            assert refused.status == 403, (path, refused)
            assert cluster.get(path).status == 200, path

        # The printed URL: a cookie for the browser, then the bare URL.
        visit = request("GET", cluster.page)
        assert visit.status == 303 and visit.header("Location") == "/", visit
        cookie = (visit.header("Set-Cookie") or "").split(";")[0]
        assert cookie.endswith("=" + cluster.token), cookie
        page = request("GET", cluster.dashboard + "/", headers={"Cookie": cookie})
        assert page.status == 200 and b"dht cockpit" in page.body, page


@rule("6.9")
def test_the_printed_url_opens_the_page_in_one_click_and_leaves_the_address_bar(
    tmp_path: Path, browser: Any
) -> None:
    driver = browser
    with running_cluster(tmp_path, 1, "--probe-rate", "0") as cluster:
        driver.get(cluster.page)
        wait_until(
            driver,
            lambda d: attribute(d, '#nodes-body tr[data-node="node1"]', "data-state") == "up",
            "node1 up, through the cockpit's routes",
        )
        assert driver.current_url == cluster.dashboard + "/"
        assert driver.execute_script("return document.cookie") == ""  # HttpOnly
        assert driver.execute_script("return document.getElementById('error').hidden")


@rule("6.9")
def test_the_cockpit_token_is_kept_for_its_owner_and_out_of_the_process_list(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, 1, "--probe-rate", "0") as cluster:
        control = tmp_path / "data" / "cluster.json"
        assert json.loads(control.read_text())["cockpit"] == cluster.page
        assert stat.S_IMODE(control.stat().st_mode) == 0o600
        assert f"its token, for you only, is also in {control}" in cluster.output()
        shown = [
            pid
            for pid in os.listdir("/proc")
            if pid.isdigit() and cluster.token.encode() in _command_line(pid)
        ]
        assert not shown, "the cockpit's token is in the argv of processes " + ", ".join(shown)


def _command_line(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone, or not ours to read
        return b""
