"""A two-step payment in a real headless Chromium: two captures and a void attempt.

The payment was authorized for 10.00, captured twice (3.00 and 2.00), and then a void was
sent whose answer was lost while every lookup failed: its operation needs attention. The
operator opens the payment's page (mode, captured and capturable amounts, the hold's
deadline, the captures and the void, the void marked), follows the void to its operation
(the provider holds it), resolves it as voided through the confirmation page, and goes back
to the payment: the rest released, the payment CAPTURED. Screenshots of each page are kept,
at a laptop's and a phone's width (see `conftest.py`), as `61-` to `69-`.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow
from selenium.webdriver.common.by import By

from tests.admin.two_step import flag_change
from tests.console.conftest import Browser
from tests.console.test_console_browser import _shows
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.authorizations import authorized, post_capture
from tests.support.factories.operators import AdminHandle


def _scroll_to(browser: Browser, element_id: str) -> None:
    browser.driver.execute_script(f"document.getElementById('{element_id}').scrollIntoView()")


def test_an_operator_reads_two_captures_and_settles_a_void_attempt(
    browser: Browser,
    api: Process,
    client: httpx.Client,
    admin: AdminHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    captures = [post_capture(client, pid, amount).json() for amount in ("3.00", "2.00")]
    assert [c["status"] for c in captures] == ["SUCCEEDED", "SUCCEEDED"]
    void = flag_change(client, faults, db, payment, void=True, made=True)
    faults.clear()
    driver = browser.driver

    driver.get(f"{api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")

    driver.get(f"{api.admin_url}/console/payments/{pid}")
    _shows(browser, By.ID, "payment-status", "PARTIALLY_CAPTURED")
    assert driver.find_element(By.ID, "payment-capture").text.startswith("manual")
    assert driver.find_element(By.ID, "payment-captured").text == "5.00 EUR"
    assert driver.find_element(By.ID, "payment-capturable").text == "5.00 EUR"
    assert "in 6 d 23 h" in driver.find_element(By.ID, "payment-capture-before").text
    rows = driver.find_elements(By.CSS_SELECTOR, "#modifications tbody tr")
    assert [(r.get_attribute("data-type"), r.get_attribute("data-status")) for r in rows] == [
        ("capture", "SUCCEEDED"),
        ("capture", "SUCCEEDED"),
        ("void", "PENDING"),
    ]
    assert "needs attention" in rows[2].text
    assert "needs attention" not in rows[0].text + rows[1].text
    assert "3.00 EUR" in rows[0].text
    assert "2.00 EUR" in rows[1].text
    assert "5.00 EUR to release" in rows[2].text
    timeline = driver.find_element(By.ID, "timeline").text
    assert timeline.count("payment.captured") == 2
    assert "payment.needs_attention" in timeline
    browser.shot("61-two-step-payment")
    _scroll_to(browser, "modifications")
    browser.shot("62-two-step-payment-captures")
    browser.phone_shot("63-two-step-payment-phone", at="modifications")

    rows[2].find_element(By.TAG_NAME, "a").click()
    _shows(browser, By.ID, "state", "needs attention")
    assert driver.current_url.endswith(f"/console/operations/{void.operation_id}")
    assert driver.find_element(By.ID, "subject-status").text == "PENDING"
    assert driver.find_element(By.ID, "subject-amount").text.startswith("5.00 EUR")
    provider = driver.find_element(By.ID, "provider").text
    assert provider.startswith("Void ")
    assert "succeeded, 5.00 EUR" in provider
    browser.shot("64-void-operation")
    browser.phone_shot("65-void-operation-phone", at="recheck")

    voided = driver.find_element(By.CSS_SELECTOR, "input[name=outcome][value=charged]")
    label = voided.find_element(By.XPATH, "..")
    assert label.text == "Voided"
    voided.click()
    driver.find_element(By.ID, "reason").send_keys("provider dashboard shows the void (ticket 51)")
    driver.find_element(By.ID, "resolve").click()
    _shows(browser, By.TAG_NAME, "h1", "Resolve as voided")
    browser.shot("66-confirm-void")
    driver.find_element(By.ID, "confirm").click()
    wait_until(lambda: "done=resolved" in driver.current_url, message="the resolution")
    _shows(browser, By.ID, "state", "COMPLETED")
    assert driver.find_element(By.ID, "subject-status").text == "SUCCEEDED"
    browser.shot("67-void-resolved")

    driver.find_element(By.ID, "payment-link").click()
    _shows(browser, By.ID, "payment-status", "CAPTURED")
    assert driver.find_element(By.ID, "payment-captured").text == "5.00 EUR"
    assert driver.find_element(By.ID, "payment-capturable").text == "0.00 EUR"
    rows = driver.find_elements(By.CSS_SELECTOR, "#modifications tbody tr")
    assert [r.get_attribute("data-status") for r in rows] == ["SUCCEEDED"] * 3
    assert "5.00 EUR released" in rows[2].text
    assert "payment.voided" in driver.find_element(By.ID, "timeline").text
    _scroll_to(browser, "modifications")
    browser.shot("68-two-step-payment-after")
    browser.phone_shot("69-two-step-payment-after-phone", at="modifications")
    assert len(faults.voids(charge_id=payment["provider_charge_id"])) == 1
