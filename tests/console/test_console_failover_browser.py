"""Failovers in a real headless Chromium: where a payment went when its first provider did
not take it.

Through an API routed to two providers (`conftest.py`), the primary declines one payment
with a code retryable elsewhere and refuses another; both are charged at the secondary. The
operator reads the dashboard's payments by provider, failovers by cause and each provider's
breaker, then the declined one's page: its route, its two attempts with their keys, which
one holds the outcome, and the failover in its timeline; at a laptop's width and a
phone's. Screenshots of each page are kept (see `conftest.py`).
"""

from __future__ import annotations

import httpx
from selenium.webdriver.common.by import By

from tests.console.conftest import Browser, fail_over
from tests.console.test_console_browser import _shows
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle


def test_an_operator_sees_where_a_payment_failed_over(
    browser: Browser,
    routed_api: Process,
    routed: httpx.Client,
    faults: FaultInjector,
    admin: AdminHandle,
) -> None:
    declined = fail_over(routed, faults, "decline")
    fail_over(routed, faults, "unavailable")
    driver = browser.driver

    driver.get(f"{routed_api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")

    secondary = driver.find_element(
        By.CSS_SELECTOR, "#payments-by-provider tr[data-provider=secondary] [data-outcome=all]"
    )
    assert int(secondary.text) >= 2
    causes = {
        row.get_attribute("data-cause")
        for row in driver.find_elements(
            By.CSS_SELECTOR, "#failovers tr[data-from=primary][data-to=secondary]"
        )
    }
    assert causes >= {"declined", "not_processed"}
    assert driver.find_element(By.ID, "breaker-state-primary").text == "closed"
    assert driver.find_element(By.ID, "breaker-state-secondary").text == "closed"
    calls = driver.find_element(By.ID, "provider-calls").text
    assert "primary charge" in calls
    assert "secondary charge" in calls
    driver.execute_script("document.getElementById('providers').scrollIntoView()")
    browser.shot("51-dashboard-providers")
    browser.phone_shot("52-dashboard-providers-phone", at="providers")

    driver.get(f"{routed_api.admin_url}/console/payments/{declined['payment_id']}")
    _shows(browser, By.ID, "payment-route", "primary \u2192 secondary")
    rows = driver.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
    assert [r.get_attribute("data-standing") for r in rows] == ["failed_over", "holds_outcome"]
    assert f"payment-{declined['payment_id']}:1" in rows[1].text
    assert "declined processor_declined, retryable elsewhere" in rows[0].text
    failover = driver.find_element(By.CSS_SELECTOR, "#timeline li.failover")
    assert "failed over from primary (attempt 0) to secondary (attempt 1)" in failover.text
    browser.shot("53-payment-failed-over")
    browser.phone_shot("54-payment-failed-over-phone", at="attempts")

    driver.find_element(By.ID, "operation-link").click()
    _shows(browser, By.ID, "provider", "at secondary (attempt 1)")
    assert "failed over from primary" in driver.find_element(By.ID, "timeline").text
    browser.shot("55-operation-failed-over")
    browser.phone_shot("56-operation-failed-over-phone", at="timeline")
