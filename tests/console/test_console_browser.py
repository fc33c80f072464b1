"""The web console in a real headless Chromium: an operator resolves a flagged payment.

Log in with an admin token, see the flagged operation in the needs-attention queue, open
it, resolve it through the confirmation page, and see the dashboard change. A screenshot
of every page is saved (see `conftest.py`).
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By

from tests.console.conftest import Browser
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.payments import post_payment


def _text_of(browser: Browser, by: str, selector: str) -> str:
    """The element's text, read again if a navigation replaced the page meanwhile."""
    try:
        text: str = browser.driver.find_element(by, selector).text
        return text
    except (StaleElementReferenceException, NoSuchElementException):
        return ""
    except WebDriverException as exc:
        # Chromium's own word for an element of the page being left, under load.
        if "does not belong to the document" in str(exc):
            return ""
        raise


def _shows(browser: Browser, by: str, selector: str, text: str) -> None:
    wait_until(
        lambda: text in _text_of(browser, by, selector),
        message=f"{text!r} in {selector}",
    )


def _count(browser: Browser) -> int:
    return int(browser.driver.find_element(By.ID, "needs-attention-count").text)


def test_an_operator_resolves_a_flagged_payment_in_the_console(
    browser: Browser,
    api: Process,
    client: httpx.Client,
    admin: AdminHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    driver = browser.driver

    driver.get(f"{api.admin_url}/console")
    assert driver.current_url.endswith("/console/login")
    browser.shot("01-login")
    browser.phone_shot("01-login-phone")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")
    cookie = driver.get_cookie("payments_console")
    assert cookie is not None
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")

    before = _count(browser)
    assert before >= 1
    link = driver.find_element(
        By.CSS_SELECTOR, f"a[href='/console/operations/{flagged.operation_id}']"
    )
    browser.shot("02-dashboard")
    browser.phone_shot("02-dashboard-phone")
    link.click()

    _shows(browser, By.ID, "state", "needs attention")
    assert "succeeded" in driver.find_element(By.ID, "provider").text
    timeline = driver.find_element(By.ID, "timeline").text
    assert "UNKNOWN_REQUIRES_RECOVERY" in timeline
    browser.shot("03-operation")
    browser.phone_shot("03-operation-phone", at="recheck")

    driver.find_element(By.CSS_SELECTOR, "input[name=outcome][value=charged]").click()
    reason = "provider support confirmed the charge (ticket 99)"
    driver.find_element(By.ID, "reason").send_keys(reason)
    driver.find_element(By.ID, "resolve").click()
    _shows(browser, By.TAG_NAME, "h1", "Resolve as")
    browser.shot("04-confirm")
    browser.phone_shot("04-confirm-phone")
    driver.find_element(By.ID, "confirm").click()

    wait_until(lambda: "done=resolved" in driver.current_url, message="the resolution")
    _shows(browser, By.ID, "state", "COMPLETED")
    assert driver.find_element(By.ID, "payment-status").text == "SUCCEEDED"
    assert reason in driver.find_element(By.ID, "timeline").text
    assert f"operator:{admin.name}" in driver.find_element(By.ID, "timeline").text
    browser.shot("05-resolved")
    browser.phone_shot("06-resolved-phone")

    driver.get(f"{api.admin_url}/console")
    _shows(browser, By.TAG_NAME, "h1", "Dashboard")
    assert _count(browser) == before - 1
    assert not driver.find_elements(
        By.CSS_SELECTOR, f"a[href='/console/operations/{flagged.operation_id}']"
    )
    browser.shot("07-dashboard-after")
    browser.phone_shot("07-dashboard-after-phone")

    replay = post_payment(client, flagged.body, key=flagged.key)
    assert (replay.status_code, replay.headers["idempotent-replayed"]) == (201, "true")

    driver.find_element(By.CSS_SELECTOR, "form[action='/console/logout'] button").click()
    wait_until(lambda: driver.current_url.endswith("/console/login"), message="logged out")
    driver.get(f"{api.admin_url}/console")
    assert driver.current_url.endswith("/console/login")
