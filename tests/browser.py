"""A real browser for the console's end-to-end tests: Debian's headless Chromium, driven by
Selenium through chromedriver (`.ci/run` installs both), and what it showed, kept should the
test fail.

The `browser` fixture skips its test, saying why, when chromium or chromedriver is not
installed. A test that fails leaves, under `tests/e2e/artifacts/<test>/`, a screenshot of each
page it recorded and of the page it was on, and the browser's console log.

Selenium calls block: a test that also serves something on its own event loop (a receiver)
runs each browser step in a thread (`await asyncio.to_thread(step, browser)`), so that the
loop keeps answering while the browser waits.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chromium.webdriver import ChromiumDriver
from selenium.webdriver.remote.command import Command
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parent / "e2e" / "artifacts"
DESKTOP = (1280, 800)
PHONE = (390, 844)
WAIT_SECONDS = 20.0

T = TypeVar("T")

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test, where the fixture reads whether it failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


@dataclass
class Browser:
    """A signed-out console tab at `base`, and the screenshots recorded on the way."""

    driver: ChromiumDriver
    base: str = ""
    shots: list[tuple[str, bytes]] = field(default_factory=list)

    def open(self, route: str = "") -> None:
        """Load the console (a fresh page load: the session storage of the tab stays)."""
        self.driver.get(f"{self.base}/console/{route}")

    def wait(self, condition: Callable[[WebDriver], T | None], what: str) -> T:
        """`condition`'s first truthy answer, within WAIT_SECONDS (never a bare sleep). An
        element not there yet, or replaced while read (a page refreshing by itself), is
        looked for again."""
        waiting = WebDriverWait(
            self.driver,
            WAIT_SECONDS,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        )
        found = waiting.until(condition, f"waiting for {what}")
        assert found is not None  # `until` answers only a truthy value
        return found

    def shot(self, name: str) -> None:
        """Record the page as it looks now (saved only if the test fails)."""
        self.shots.append((name, self.driver.get_screenshot_as_png()))

    def viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        """An exact viewport (the window's size would include the browser's own frame)."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    def alert_text(self) -> str | None:
        """The text of an open alert (a script that ran), None when there is none."""
        try:
            return self.driver.switch_to.alert.text
        except NoAlertPresentException:
            return None

    def fits_its_width(self) -> bool:
        """No horizontal scrolling: the page is as wide as the viewport, not wider."""
        return bool(
            self.driver.execute_script(
                "const d = document.documentElement; return d.scrollWidth <= d.clientWidth;"
            )
        )

    def log(self) -> list[dict[str, Any]]:
        """The browser console's entries since the last call."""
        entries: list[dict[str, Any]] = self.driver.execute(Command.GET_LOG, {"type": "browser"})[
            "value"
        ]
        return entries

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for number, (name, png) in enumerate(self.shots, start=1):
            (folder / f"{number:02d}-{name}.png").write_bytes(png)
        try:
            (folder / "last-page.png").write_bytes(self.driver.get_screenshot_as_png())
            (folder / "console-log.json").write_text(json.dumps(self.log(), indent=2))
        except WebDriverException as exc:  # an alert open, or the browser gone
            (folder / "last-page.txt").write_text(f"no screenshot: {exc.msg}")


def start_chromium() -> ChromiumDriver:
    """Headless Chromium at the desktop size, with its console log readable."""
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver is the one given: Selenium Manager never downloads one.
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "the console's browser tests need chromium and chromedriver "
            "(Debian: apt-get install chromium chromium-driver; .ci/run installs them)"
        )
    driver = start_chromium()
    opened = Browser(driver)
    try:
        opened.viewport(*DESKTOP)
        yield opened
        reports = request.node.stash.get(_REPORTS, {})
        if any(report.failed for report in reports.values()):
            folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            opened.save(folder)
            print(f"\nbrowser screenshots of the failed test: {folder}")
    finally:
        driver.quit()
