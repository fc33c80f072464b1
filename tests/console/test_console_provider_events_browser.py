"""The providers' notifications in the console, in a real headless Chromium.

Events in every state are in the inbox, one applied to a real payment's operation. The
operator sees what is parked or rejected counted on the dashboard, opens the inbox from
the navigation, reads each event's state and reason, narrows the list to the parked
ones, opens an event's body, and follows the applied one to its operation. Screenshots
at laptop and phone widths (see `conftest.py`).
"""

from __future__ import annotations

import uuid

import httpx
import psycopg
from psycopg.rows import DictRow
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.admin.test_admin_provider_events import seed
from tests.console.conftest import Browser
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_key, payment_body, post_payment

Db = psycopg.Connection[DictRow]


def _at(browser: Browser, path: str) -> None:
    """Wait until the browser shows `path`, loaded: what is read next is the new page's,
    never a node of the one it left (which Chromium may still answer for meanwhile)."""
    driver = browser.driver

    def loaded() -> bool:
        try:
            state = driver.execute_script("return document.readyState")
            return bool(driver.current_url.endswith(path) and state == "complete")
        except WebDriverException:
            return False

    wait_until(loaded, message=f"{path} loaded")


def test_an_operator_reads_the_inbox_by_state_and_follows_an_event_to_its_operation(
    browser: Browser, api: Process, client: httpx.Client, admin: AdminHandle, db: Db
) -> None:
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    operation_id = paid.json()["operation_id"]
    provider = f"acquirer{uuid.uuid4().hex[:4]}"
    seed(db, provider, "received")
    applied = seed(
        db,
        provider,
        "applied",
        attempts=1,
        applied_at="now()",
        operation_id=uuid.UUID(operation_id),
        next_attempt_at=None,
    )
    parked = seed(db, provider, "parked", attempts=3, reason="no operation with this key yet")
    seed(
        db,
        provider,
        "rejected",
        attempts=1,
        type="dispute.created",
        reason="no operation kind makes a 'dispute'",
        next_attempt_at=None,
    )
    driver = browser.driver

    driver.get(f"{api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    _at(browser, "/console")
    assert int(driver.find_element(By.ID, "provider-events-count").text) >= 2
    browser.shot("71-dashboard-provider-events")

    driver.find_element(By.CSS_SELECTOR, "nav a[href='/console/provider-events']").click()
    _at(browser, "/console/provider-events")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Provider notifications"
    inbox = driver.find_element(By.ID, "inbox").text
    for words in ("parked", "rejected", "applied", "received", "no operation with this key yet"):
        assert words in inbox
    tiles = driver.find_elements(By.CSS_SELECTOR, ".tiles [data-inbox-count]")
    assert [t.get_attribute("data-inbox-count") for t in tiles][:2] == ["parked", "rejected"]
    browser.shot("72-provider-events")
    browser.phone_shot("73-provider-events-phone", at="inbox")

    Select(driver.find_element(By.ID, "state")).select_by_value("parked")
    driver.find_element(By.ID, "filter").click()
    _at(browser, "/console/provider-events?state=parked")
    assert driver.find_element(By.ID, "inbox-title").text == "parked events"
    states = {
        row.get_attribute("data-state")
        for row in driver.find_elements(By.CSS_SELECTOR, "#inbox tbody tr")
    }
    assert states == {"parked"}
    browser.shot("74-provider-events-parked")

    driver.find_element(By.CSS_SELECTOR, f"tr[data-event='{parked['id']}'] a").click()
    _at(browser, f"/console/provider-events/{parked['id']}")
    assert parked["body"]["id"] in driver.find_element(By.ID, "event-body").text
    browser.shot("75-provider-event")

    driver.get(f"{api.admin_url}/console/provider-events")
    _at(browser, "/console/provider-events")
    link = f"tr[data-event='{applied['id']}'] a.operation"
    driver.find_element(By.CSS_SELECTOR, link).click()
    _at(browser, f"/console/operations/{operation_id}")
    assert operation_id in driver.find_element(By.TAG_NAME, "main").text
