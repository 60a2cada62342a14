"""The cockpit: the live dashboard `python -m dht cluster` serves (SPEC.md rule 6.7 names
the command; dht/testbed/cockpit.py and dht/testbed/cockpit.html are the dashboard).

Real processes throughout: `cluster` subprocesses on free ports (with the Toxiproxy test
bed where the test needs links), and for the page, Debian's headless Chromium driven by
Selenium. Where Chromium is missing the browser tests fail with the command that
installs it (`make test` installs it as root); everything else runs without a browser.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dht.conformance.http_client import HOST, Response, free_port, request
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import consecutive_free_ports
from tests.cockpit.conftest import PAGE_DEADLINE

SCREENSHOT = Path(__file__).resolve().parents[2] / "artifacts" / "cockpit.png"
START_DEADLINE = 45.0  # Toxiproxy, three nodes, then the dashboard, on a 2-core machine
STOP_DEADLINE = 20.0
NO_VALUE = "\u2013"  # the en dash the page shows where it has no value
LINKS = [f"node{a}-to-node{b}" for a in (1, 2, 3) for b in (1, 2, 3) if a != b]


# -- a `python -m dht cluster` subprocess ---------------------------------------------------


@dataclass
class RunningCluster:
    process: subprocess.Popen[bytes]
    log_path: Path
    node_urls: list[str]
    dashboard: str  # http://127.0.0.1:PORT, no trailing slash

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def page(self) -> str:
        """The dashboard's URL as the command printed it, with its token."""
        match = re.search(r"dashboard: (http://\S+)", self.output())
        assert match, self.output()
        return match.group(1)

    @property
    def token(self) -> str:
        return self.page.partition("?token=")[2]

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.ask("GET", path, **kwargs)

    def ask(self, method: str, path: str, body: bytes | None = None, **kwargs: Any) -> Response:
        """A request to the dashboard with its token, as `curl -H 'Authorization:
        Bearer TOKEN'` sends it; X-Cockpit: 1 with a change, as the page sends it."""
        headers = {"Authorization": f"Bearer {self.token}"} | kwargs.pop("headers", {})
        if method != "GET":
            headers = {"X-Cockpit": "1"} | headers
        return request(method, self.dashboard + path, body, headers=headers, **kwargs)

    @property
    def toxiproxy_api(self) -> str:
        """Toxiproxy's own API, as the command printed it."""
        match = re.search(r"Toxiproxy API: (http://\S+)", self.output())
        assert match, self.output()
        return match.group(1)


def start_cluster(folder: Path, nodes: int, *flags: str) -> RunningCluster:
    """Starts `python -m dht cluster` on free ports and waits for its dashboard line."""
    folder.mkdir(parents=True, exist_ok=True)
    ports = consecutive_free_ports(nodes)
    dashboard_port = free_port()
    while dashboard_port in ports:
        dashboard_port = free_port()
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", str(nodes)]
    command += ["--base-port", str(ports[0]), "--data-dir", str(folder / "data")]
    command += ["--dashboard-port", str(dashboard_port), *flags]
    log_path = folder / "cluster.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    cluster = RunningCluster(
        process,
        log_path,
        [f"http://{HOST}:{port}" for port in ports],
        f"http://{HOST}:{dashboard_port}",
    )
    try:
        wait_for_output(cluster, "Ctrl-C stops every node.")
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def wait_for_output(cluster: RunningCluster, line: str) -> None:
    deadline = time.monotonic() + START_DEADLINE
    while line not in cluster.output():
        if cluster.process.poll() is not None:
            raise AssertionError(
                f"cluster exited with code {cluster.process.returncode}:\n{cluster.output()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {line!r} within {START_DEADLINE}s:\n{cluster.output()}")
        time.sleep(0.1)


def stop_cluster(cluster: RunningCluster) -> None:
    """SIGTERM, then SIGKILL if it lingers: never an orphan, whatever the test did."""
    if cluster.process.poll() is None:
        cluster.process.send_signal(signal.SIGTERM)
        try:
            cluster.process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            cluster.process.kill()
            cluster.process.wait()


@contextlib.contextmanager
def running_cluster(folder: Path, nodes: int, *flags: str) -> Iterator[RunningCluster]:
    cluster = start_cluster(folder, nodes, *flags)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One 3-node cluster with the Toxiproxy test bed for the module: its start is the
    slow part. A test that faults a link heals it before it ends."""
    with running_cluster(tmp_path_factory.mktemp("chaos"), 3, "--chaos") as cluster:
        yield cluster


def toxiproxy_proxy(cluster: RunningCluster, link: str) -> dict[str, Any]:
    """A link as Toxiproxy's own API has it, not through the cockpit."""
    answer = request("GET", f"{cluster.toxiproxy_api}/proxies/{link}")
    assert answer.status == 200, answer
    proxy: dict[str, Any] = json.loads(answer.body)
    return proxy


# -- the HTTP side, no browser ----------------------------------------------------------------


@rule("6.7")
def test_cluster_serves_the_cockpit_as_a_reverse_proxy_to_its_nodes_and_toxiproxy(
    chaos_cluster: RunningCluster,
) -> None:
    cluster = chaos_cluster
    assert re.search(rf"dashboard: {cluster.dashboard}/\?token=[\w-]{{32}}\n", cluster.output())

    page = cluster.get("/")
    assert page.status == 200, page
    assert (page.header("Content-Type") or "").startswith("text/html")
    assert b"dht cockpit" in page.body and b"<script>" in page.body

    manifest = cluster.get("/cockpit.json")
    assert manifest.status == 200, manifest
    assert json.loads(manifest.body) == {
        "nodes": [{"name": f"node{i + 1}", "url": url} for i, url in enumerate(cluster.node_urls)],
        "toxiproxy": True,
        "processes": True,
        "probe": {"rate": 5.0, "window": 10.0},
    }

    for index, url in enumerate(cluster.node_urls):
        status = cluster.get(f"/nodes/{index}/v0/status")
        assert status.status == 200, status
        assert json.loads(status.body)["node"] == url
        assert re.fullmatch(r"upstream;dur=[0-9.]+", status.header("Server-Timing") or "")
    metrics = cluster.get("/nodes/1/metrics")
    assert metrics.status in (200, 400, 404), metrics  # 400/404 until a node has /metrics

    for path in ("/nodes/3/v0/status", "/nodes/-1/v0/status", "/nodes/x/metrics"):
        missing = cluster.get(path)
        assert missing.status == 404, (path, missing)
    assert b"nodes 0 to 2" in cluster.get("/nodes/3/v0/status").body
    # Only the two read-only paths of a node, and only GET.
    assert cluster.get("/nodes/0/v0/entity?id=k").status == 404
    assert cluster.ask("POST", "/nodes/0/v0/status", b"").status == 405

    proxies = cluster.get("/toxiproxy/proxies")
    assert proxies.status == 200, proxies
    listed = json.loads(proxies.body)
    assert sorted(listed) == sorted(LINKS)
    assert all(proxy["enabled"] for proxy in listed.values())
    assert cluster.get("/toxiproxy/proxies/no-such-link").status == 404
    # A change needs the page's header, so another web page cannot make one.
    refused = cluster.ask("POST", "/toxiproxy/reset", b"", headers={"X-Cockpit": "0"})
    assert refused.status == 403, refused
    assert b"X-Cockpit" in refused.body


@rule("6.7")
def test_without_chaos_the_cockpit_has_no_toxiproxy(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 1) as cluster:
        manifest = json.loads(cluster.get("/cockpit.json").body)
        assert manifest["toxiproxy"] is False
        assert [node["url"] for node in manifest["nodes"]] == cluster.node_urls
        missing = cluster.get("/toxiproxy/proxies")
        assert missing.status == 404, missing
        assert b"--chaos" in missing.body
        assert cluster.get("/nodes/0/v0/status").status == 200


@rule("6.7")
def test_the_cluster_runs_on_when_its_dashboard_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with running_cluster(tmp_path, 1, "--dashboard-port", str(port)) as cluster:
            output = cluster.output()
            assert "the dashboard exited with code 1" in output, output
            assert "dashboard: http" not in output
            assert "Traceback" not in output
            status = request("GET", cluster.node_urls[0] + "/v0/status")
            assert status.status == 200
            assert cluster.process.poll() is None


@dataclass
class RunningCockpit:
    dashboard: str  # http://127.0.0.1:PORT, no trailing slash
    page: str  # the URL it printed, with the token it made

    def get(self, path: str, **kwargs: Any) -> Response:
        bearer = {"Authorization": f"Bearer {self.page.partition('?token=')[2]}"}
        return request("GET", self.dashboard + path, headers=bearer, **kwargs)


@contextlib.contextmanager
def running_cockpit(folder: Path, *nodes: str) -> Iterator[RunningCockpit]:
    """`python -m dht cockpit --node ...` on a free port; yields its URL and the URL
    with the token it printed. Stopped with SIGTERM at the end, which it must take with
    exit code 0."""
    port = free_port()
    command = [sys.executable, "-m", "dht", "cockpit", "--port", str(port)]
    for url in nodes:
        command += ["--node", url]
    log_path = folder / f"cockpit-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        refused = wait_for_answer(f"http://{HOST}:{port}/cockpit.json", process)
        assert refused.status == 403, refused  # no token, no answer
        match = re.search(rf"dashboard on (http://{HOST}:{port}/\?token=\S+)", log_path.read_text())
        assert match, log_path.read_text()
        yield RunningCockpit(f"http://{HOST}:{port}", match.group(1))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, log_path.read_text()


@rule("6.7")
def test_the_cockpit_command_answers_502_for_a_node_that_does_not_answer(
    tmp_path: Path,
) -> None:
    refused = f"http://{HOST}:{free_port()}"
    with socket.socket() as hung_socket:  # accepts connections, never answers
        hung_socket.bind((HOST, 0))
        hung_socket.listen()
        hung = f"http://{HOST}:{hung_socket.getsockname()[1]}"
        with running_cockpit(tmp_path, refused, hung) as cockpit:
            manifest = json.loads(cockpit.get("/cockpit.json").body)
            assert manifest["nodes"] == [
                {"name": "node1", "url": refused},
                {"name": "node2", "url": hung},
            ]
            answer = cockpit.get("/nodes/0/v0/status")
            assert answer.status == 502, answer
            reason = answer.text.strip()
            assert "\n" not in reason, reason
            assert reason.startswith(f"node1 ({refused}) refused the connection"), reason

            answer = cockpit.get("/nodes/1/metrics")
            assert answer.status == 502, answer
            assert answer.text.strip() == f"node2 ({hung}) did not answer within 1 s"
            assert 0.9 < answer.seconds < 3.0, answer


@rule("6.7")
@pytest.mark.parametrize(
    "args",
    [
        ["--port", "1"],  # no --node
        ["--node", "localhost:8080"],
        ["--node", "http://a:1", "--toxiproxy", "nowhere"],
        ["--node", "http://a:1", "--node", "http://a:1"],
        ["--port", "70000", "--node", "http://a:1"],
    ],
)
def test_the_cockpit_command_refuses_bad_flags_in_one_line(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dht", "cockpit", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.match(r"python -m dht( cockpit)?: error: ", last), result.stderr


def wait_for_answer(url: str, process: subprocess.Popen[bytes]) -> Response:
    deadline = time.monotonic() + START_DEADLINE
    while True:
        assert process.poll() is None, f"the cockpit exited with code {process.returncode}"
        try:
            return request("GET", url, timeout=1.0)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# -- the page, in headless Chromium ------------------------------------------------------------


def wait_until(driver: Any, condition: Any, what: str, deadline: float = PAGE_DEADLINE) -> Any:
    """Polls `condition(driver)` until it is truthy; fails naming `what` and the page's
    error line otherwise."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, deadline, poll_frequency=0.1).until(condition)
    except TimeoutException:
        error = driver.execute_script("return document.getElementById('error').innerText")
        raise AssertionError(
            f"page: {what} not within {deadline}s; error line: {error!r}"
        ) from None


def attribute(driver: Any, selector: str, name: str) -> str | None:
    value: str | None = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e && e.getAttribute(arguments[1])",
        selector,
        name,
    )
    return value


def text_of(driver: Any, selector: str) -> str:
    text: str = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
        selector,
    )
    return text.strip()


def click(driver: Any, selector: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def save_screenshot(driver: Any, path: Path = SCREENSHOT) -> None:
    """The whole page, at a width where its two middle tables sit side by side."""
    path.parent.mkdir(exist_ok=True)
    chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
    height = driver.execute_script(
        "return Math.ceil(document.querySelector('main').getBoundingClientRect().bottom)"
    )
    driver.set_window_size(1300, height + chrome)
    driver.save_screenshot(str(path))


class Traffic:
    """PUTs and GETs to the nodes (127.0.0.1 only) from a thread, until stopped."""

    def __init__(self, urls: list[str], limit: int = 2000) -> None:
        self.urls, self.limit, self.sent = urls, limit, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < self.limit:
            url = self.urls[self.sent % len(self.urls)]
            key = f"cockpit-{self.sent // 2 % 100}"
            try:
                if self.sent % 2 == 0:
                    request("PUT", f"{url}/v0/entity?id={key}", b"v" * 100, timeout=5.0)
                else:
                    request("GET", f"{url}/v0/entity?id={key}", timeout=5.0)
            except OSError:
                pass
            self.sent += 1
            time.sleep(0.005)  # a few hundred a second: visible, and light on 2 cores


@rule("6.7")
def test_the_page_shows_the_cluster_and_cuts_slows_and_heals_links(
    chaos_cluster: RunningCluster, browser: Any
) -> None:
    cluster, driver = chaos_cluster, browser
    driver.get(cluster.page)
    for name in ("node1", "node2", "node3"):
        wait_until(
            driver,
            lambda d, name=name: (
                attribute(d, f'#nodes-body tr[data-node="{name}"]', "data-state") == "up"
            ),
            f"{name} up",
        )
    assert len(driver.execute_script("return document.querySelectorAll('#nodes-body tr')")) == 3
    wait_until(
        driver,
        lambda d: all(
            attribute(d, f'[data-peer="{link}"]', "data-breaker") == "closed" for link in LINKS
        ),
        "every breaker closed",
    )
    wait_until(
        driver,
        lambda d: all(
            attribute(d, f'[data-link="{link}"]', "data-state") == "enabled" for link in LINKS
        ),
        "every link enabled",
    )
    share = text_of(driver, '#ring-body tr[data-ring="node1"] [data-share="node2"]')
    assert share == "?" or re.fullmatch(r"\d+\.\d%", share), share

    click(driver, '[data-action="cut"][data-link="node1-to-node2"]')
    wait_until(
        driver,
        lambda d: attribute(d, '[data-link="node1-to-node2"]', "data-state") == "cut",
        "node1-to-node2 cut",
    )
    assert toxiproxy_proxy(cluster, "node1-to-node2")["enabled"] is False
    assert toxiproxy_proxy(cluster, "node2-to-node1")["enabled"] is True  # one way only
    timeline = json.loads(cluster.get("/timeline").body)["faults"]
    assert (timeline[0]["label"], timeline[0]["ongoing"]) == ("cut node1-to-node2", True)

    click(driver, '[data-action="slow"][data-link="node2-to-node3"]')
    wait_until(
        driver,
        lambda d: "latency 500ms" in text_of(d, '[data-link="node2-to-node3"] .toxics'),
        "node2-to-node3 slowed",
    )
    (toxic,) = toxiproxy_proxy(cluster, "node2-to-node3")["toxics"]
    assert (toxic["type"], toxic["stream"], toxic["attributes"]["latency"]) == (
        "latency",
        "downstream",
        500,
    )

    with Traffic(cluster.node_urls) as traffic:
        wait_until(driver, lambda d: traffic.sent >= 300, "300 requests sent")
        metrics = cluster.get("/nodes/0/metrics").status
        if metrics == 200:
            wait_until(
                driver,
                lambda d: all(
                    re.fullmatch(
                        r"[0-9.]+", text_of(d, f'tr[data-node="{name}"] [data-field="rate"]')
                    )
                    and float(text_of(d, f'tr[data-node="{name}"] [data-field="rate"]')) > 0
                    and text_of(d, f'tr[data-node="{name}"] [data-field="p99"]').endswith("s")
                    for name in ("node1", "node2", "node3")
                ),
                "non-zero request rates and a p99 on every node",
            )
        else:  # the nodes have no /metrics: the page says so and goes on
            assert text_of(driver, 'tr[data-node="node1"] [data-field="rate"]') == "no metrics"
        # node1 cannot reach node2: its breaker opens and it keeps hints for node2.
        wait_until(
            driver,
            lambda d: attribute(d, '[data-peer="node1-to-node2"]', "data-breaker") == "open",
            "node1's breaker for node2 open",
        )
        save_screenshot(driver)

    click(driver, '[data-action="heal-all"]')
    wait_until(
        driver,
        lambda d: all(
            attribute(d, f'[data-link="{link}"]', "data-state") == "enabled"
            and not attribute(d, f'[data-link="{link}"]', "data-toxics")
            for link in LINKS
        ),
        "every link enabled again, without toxics",
        deadline=40.0,  # Toxiproxy's reset can take 25 s to remove a latency toxic
    )
    for link in LINKS:
        proxy = toxiproxy_proxy(cluster, link)
        assert proxy["enabled"] is True and proxy["toxics"] == [], proxy
    assert driver.execute_script("return document.getElementById('error').hidden")


@rule("6.7")
def test_the_page_isolates_a_node_and_shows_api_errors(
    chaos_cluster: RunningCluster, browser: Any
) -> None:
    cluster, driver = chaos_cluster, browser
    driver.get(cluster.page)
    wait_until(
        driver,
        lambda d: attribute(d, '[data-link="node3-to-node1"]', "data-state") == "enabled",
        "the links",
    )
    deleted = toxiproxy_proxy(cluster, "node2-to-node1")
    restore_links(cluster, deleted)  # whatever an earlier test left
    try:
        click(driver, '[data-action="isolate"][data-node="node3"]')
        isolated = ["node1-to-node3", "node2-to-node3", "node3-to-node1", "node3-to-node2"]
        wait_until(
            driver,
            lambda d: all(
                attribute(d, f'[data-link="{link}"]', "data-state") == "cut" for link in isolated
            ),
            "node3 isolated",
        )
        assert attribute(driver, '[data-link="node1-to-node2"]', "data-state") == "enabled"
        assert all(toxiproxy_proxy(cluster, link)["enabled"] is False for link in isolated)

        # A link deleted behind the page's back: the page shows it missing, and a click
        # made before that refresh (its button still enabled) gets Toxiproxy's 404 on the
        # visible error line.
        gone = request("DELETE", f"{cluster.toxiproxy_api}/proxies/node2-to-node1")
        assert gone.status == 204, gone
        wait_until(
            driver,
            lambda d: attribute(d, '[data-link="node2-to-node1"]', "data-state") == "missing",
            "the deleted link shown as missing",
        )
        cut = '[data-action="cut"][data-link="node2-to-node1"]'
        driver.execute_script("document.querySelector(arguments[0]).disabled = false", cut)
        click(driver, cut)
        wait_until(
            driver,
            lambda d: "404" in text_of(d, "#error") and "node2-to-node1" in text_of(d, "#error"),
            "Toxiproxy's 404 on the error line",
        )
        assert driver.execute_script("return !document.getElementById('error').hidden")
    finally:
        restore_links(cluster, deleted)
    wait_until(
        driver,
        lambda d: all(
            attribute(d, f'[data-link="{link}"]', "data-state") == "enabled" for link in LINKS
        ),
        "every link enabled again",
    )


def restore_links(cluster: RunningCluster, deleted: dict[str, Any]) -> None:
    """Recreates a deleted link where its node dials it, and heals every link, through
    Toxiproxy's own API, so the module's cluster is whole for the next test."""
    api = cluster.toxiproxy_api
    if request("GET", f"{api}/proxies/{deleted['name']}").status == 404:
        body = {key: deleted[key] for key in ("name", "listen", "upstream")}
        created = request("POST", f"{api}/proxies", json.dumps(body).encode())
        assert created.status == 201, created
    healed = request("POST", f"{api}/reset", b"", timeout=40.0)
    assert healed.status == 204, healed


@rule("6.7")
def test_the_page_shows_a_node_down_and_one_without_metrics_and_goes_on(
    tmp_path: Path, browser: Any
) -> None:
    driver = browser
    with running_cluster(tmp_path / "cluster", 1, "--no-metrics") as cluster:
        down = f"http://{HOST}:{free_port()}"
        with running_cockpit(tmp_path, cluster.node_urls[0], down) as cockpit:
            driver.get(cockpit.page)
            wait_until(
                driver,
                lambda d: int(d.execute_script("return document.body.dataset.refreshes")) >= 3,
                "three refreshes",
            )
            node1, node2 = 'tr[data-node="node1"]', 'tr[data-node="node2"]'
            assert attribute(driver, "#nodes-body " + node1, "data-state") == "up"
            assert attribute(driver, "#nodes-body " + node2, "data-state") == "down"
            assert "refused the connection" in text_of(driver, f'{node2} [data-field="note"]')
            # node1 has no /metrics: its figures are the cockpit's probe load's, marked so.
            wait_until(
                driver,
                lambda d: attribute(d, "#nodes-body " + node1, "data-probe") == "yes",
                "node1's figures from the probe",
            )
            for field in ("rate", "errors", "p99"):
                assert text_of(driver, f'{node1} [data-field="{field}"]').endswith("ᵖ")
                assert text_of(driver, f'{node2} [data-field="{field}"]') == NO_VALUE
            assert not driver.execute_script("return document.getElementById('probe-note').hidden")
            share = '#ring-body tr[data-ring="node2"] [data-share="node1"]'
            assert text_of(driver, share) == NO_VALUE
            assert attribute(driver, '[data-peer="node2-to-node1"]', "data-breaker") == "unknown"
            assert driver.execute_script("return document.getElementById('links').hidden")
            assert driver.execute_script("return document.getElementById('error').hidden")
            assert "1 of 2" in text_of(driver, "#summary")


def scrape(requests: dict[tuple[str, str], int], buckets: dict[str, list[int]]) -> str:
    """A /metrics text: `requests` by (operation, status), cumulative `buckets` by
    operation at the bounds of BOUNDS; comments and escapes as prometheus_client writes."""
    lines = [
        "# HELP dht_client_requests_total Client requests answered",
        "# TYPE dht_client_requests_total counter",
    ]
    for (operation, status), count in requests.items():
        lines.append(
            f'dht_client_requests_total{{operation="{operation}",status="{status}"}} {count}.0'
        )
    lines.append("# TYPE dht_client_request_duration_seconds histogram")
    for operation, counts in buckets.items():
        for bound, count in zip(BOUNDS, counts, strict=True):
            lines.append(
                f'dht_client_request_duration_seconds_bucket{{le="{bound}",'
                f'operation="{operation}"}} {count}.0'
            )
        lines.append(
            f'dht_client_request_duration_seconds_count{{operation="{operation}"}} {counts[-1]}.0'
        )
    lines.append('dht_unrelated{path="a\\"b\\\\c"} NaN')
    lines.append("dht_in_flight_requests 3.0")
    return "\n".join(lines) + "\n"


BOUNDS = ["0.001", "0.005", "0.01", "+Inf"]


@rule("6.7")
def test_the_page_computes_rates_and_p99_as_prometheus_does(
    chaos_cluster: RunningCluster, browser: Any
) -> None:
    driver = browser
    driver.get(chaos_cluster.page)
    wait_until(driver, lambda d: d.execute_script("return Boolean(window.cockpit)"), "the page")
    before = scrape(
        {("get", "200"): 30, ("put", "201"): 10, ("put", "503"): 1},
        {"get": [10, 20, 30, 30], "put": [0, 5, 10, 11]},
    )
    # Two seconds later: 96 more answers, 4 more 5xx; of the 100 new requests 90 took at
    # most 1 ms, 8 up to 5 ms, 2 up to 10 ms. The 99th is the first of those last two:
    # half way into the (5 ms, 10 ms] bucket, 7.5 ms.
    after = scrape(
        {("get", "200"): 116, ("put", "201"): 20, ("put", "503"): 3, ("get", "500"): 2},
        {"get": [95, 111, 123, 123], "put": [5, 12, 17, 18]},
    )
    stats = driver.execute_script(
        "const c = window.cockpit;"
        "const [a, b] = [c.summarizeMetrics(arguments[0]), c.summarizeMetrics(arguments[1])];"
        "return {a, stats: c.windowStats(a, b, 2), same: c.windowStats(b, b, 1),"
        "        reset: c.windowStats(b, a, 1),"
        "        samples: c.parsePrometheus(arguments[0]).length,"
        "        tail: c.histogramQuantile(0.99, [{le: 0.001, count: 1}, {le: 0.01, count: 1},"
        "                                          {le: Infinity, count: 100}])};",
        before,
        after,
    )
    assert stats["a"]["total"] == 41 and stats["a"]["errors"] == 1 and stats["a"]["inFlight"] == 3
    assert stats["stats"]["rate"] == pytest.approx(100 / 2)
    assert stats["stats"]["errorRate"] == pytest.approx(4 / 2)
    assert stats["stats"]["p99"] == pytest.approx(0.0075)
    assert stats["same"] == {"rate": 0, "errorRate": 0, "p99": None}  # no traffic: no p99
    assert stats["reset"] is None  # a restarted node's counters went back
    assert stats["samples"] == 3 + 2 * 4 + 2 + 1  # the NaN sample is skipped
    assert stats["tail"] == pytest.approx(0.01)  # in +Inf: the highest finite bound
