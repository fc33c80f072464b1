"""A real headless Chromium for the console's browser tests, and where screenshots go; and
an API routed to two providers, for the pages that show failovers.

Debian's `chromium` and `chromium-driver` packages are used as installed (no browser is
downloaded). Without them the browser tests are skipped, and pytest's summary (`-ra`) says
so and why. Every page a test visits is saved as a PNG in the test's tmp dir and copied to
`artifacts/console/` at the repository root, to look at after a run.

The routed API is `tests/support/fixtures/providers.py`'s: the session's provider as
`primary`, one of the module's own as `secondary`, every payment routed primary then
secondary; `fail_over` makes a payment that went to the secondary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.control.faults import FaultInjector
from tests.support.factories.payments import new_key, payment_body, post_payment

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "console"


def _browser() -> tuple[str, str] | None:
    binary = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if binary is None or driver is None:
        return None
    if not (Path(binary).is_file() and Path(driver).is_file()):
        return None
    return binary, driver


PHONE = (375, 812)
LAPTOP = (1280, 1000)


class Browser:
    """A Selenium-driven Chromium that saves a screenshot of each page it is asked to."""

    def __init__(self, driver: Any, out: Path) -> None:
        self.driver = driver
        self.out = out

    def shot(self, name: str) -> Path:
        path = self.out / f"{name}.png"
        self.driver.save_screenshot(str(path))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOTS / path.name)
        return path

    def phone_shot(self, name: str, *, at: str | None = None) -> Path:
        """A screenshot at a phone's width (scrolled to the element with id `at`), checking
        that nothing sticks out sideways; then back to the laptop's size."""
        self.driver.set_window_size(*PHONE)
        try:
            if at is not None:
                self.driver.execute_script(f"document.getElementById('{at}').scrollIntoView()")
            path = self.shot(name)
            width = self.driver.execute_script("return document.documentElement.scrollWidth")
            assert width <= PHONE[0], f"{name}: the page is {width} px wide at {PHONE[0]} px"
        finally:
            self.driver.set_window_size(*LAPTOP)
        return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    found = _browser()
    if found is None:
        pytest.skip(
            "browser tests need chromium and chromedriver (apt-get install chromium "
            "chromium-driver); not found on PATH (or at $CHROMIUM, $CHROMEDRIVER)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = found[0]
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=found[1]), options=options)
    driver.implicitly_wait(5)
    try:
        yield Browser(driver, tmp_path)
    finally:
        driver.quit()


def fail_over(routed: httpx.Client, faults: FaultInjector, fault: str) -> dict[str, Any]:
    """A payment the primary does not take (`decline`: declined processor_declined, which
    is retryable elsewhere; `unavailable`: refused, not processed), charged at the
    secondary; its answer."""
    body = payment_body()
    if fault == "decline":
        faults.add(fault, account_id=body["account_id"], decline_code="processor_declined")
    else:
        faults.add(fault, account_id=body["account_id"])
    created = post_payment(routed, body, key=new_key())
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    assert answer["status"] == "SUCCEEDED"
    return answer
