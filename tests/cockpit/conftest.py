"""The browser the cockpit's page tests share: Debian's headless Chromium, driven by
Selenium, one per test module."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PAGE_DEADLINE = 15.0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(
            "headless Chromium is not installed: apt-get install chromium chromium-driver "
            "(make test does it as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="cockpit-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        # This machine has no network: every flag that would make Chromium reach out
        # (updates, sync, QUIC probes, first-run pages) is off.
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1300,1100",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            driver.set_page_load_timeout(PAGE_DEADLINE)
            yield driver
        finally:
            driver.quit()
