"""The discrepancy queue in a real headless Chromium: an operator finds an amount
mismatch from the navigation, narrows the queue to its kind, reads both records side by
side with the differing field highlighted, and resolves it through the form, by keyboard.

Screenshots at laptop and phone widths (see `conftest.py`); the phone ones fail the test if
a page is wider than the screen.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import DictRow
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.console.conftest import Browser
from tests.console.test_console_browser import _shows
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.discrepancies import (
    OURS,
    RUN_ACTOR,
    THEIRS,
    changes,
    empty_queue,
    item_row,
    make_item,
)
from tests.support.factories.operators import AdminHandle

# A long value must wrap in its cell, never widen the page.
LONG_KEY_VALUE = "ch_" + "k" * 90


def test_an_operator_resolves_an_amount_mismatch_in_the_console(
    browser: Browser, api: Process, admin: AdminHandle, db: psycopg.Connection[DictRow]
) -> None:
    empty_queue(db)
    ours = {**OURS, "provider_id": LONG_KEY_VALUE}
    theirs = {**THEIRS, "id": LONG_KEY_VALUE, "amount_minor": 1250}
    item_id = make_item(
        db,
        ours=ours,
        theirs=theirs,
        detail="we recorded 10.00 EUR, the provider settled 12.50 EUR",
        seen_ago_s=7300,
        operation_id=uuid.uuid4(),
    )
    make_item(db, kind="missing", theirs=None, seen_ago_s=600)
    make_item(db, kind="expected", seen_ago_s=60)
    driver = browser.driver

    driver.get(f"{api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")
    driver.find_element(By.LINK_TEXT, "Discrepancies").click()

    _shows(browser, By.TAG_NAME, "h1", "Discrepancies")
    count = driver.find_element(By.CSS_SELECTOR, "[data-open-count=amount_mismatch]")
    assert count.text == "1"
    assert driver.find_element(By.ID, "open-total").text == "3"
    assert driver.find_element(By.ID, "oldest-open").text == "2 h 1 min"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#queue tbody tr")) == 3
    browser.shot("21-discrepancies-queue")
    browser.phone_shot("22-discrepancies-queue-phone")

    # Narrowed to one kind by keyboard: the select, Tab to its button, Enter.
    Select(driver.find_element(By.ID, "kind")).select_by_value("amount_mismatch")
    driver.find_element(By.ID, "kind").send_keys(Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("id") == "filter"
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait_until(lambda: "kind=amount_mismatch" in driver.current_url, message="the filter")
    rows = driver.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
    assert [row.get_attribute("data-item") for row in rows] == [str(item_id)]
    browser.shot("23-discrepancies-filtered")
    link = f"a[href='/console/discrepancies/{item_id}']"
    driver.find_element(By.CSS_SELECTOR, link).click()

    _shows(browser, By.ID, "state", "open")
    differs = driver.find_elements(By.CSS_SELECTOR, "#sides tr.differs")
    assert [row.get_attribute("data-field") for row in differs] == ["amount_minor"]
    cells = differs[0].find_elements(By.TAG_NAME, "td")
    assert [cell.text for cell in cells] == ["1000", "1250"]
    highlight = differs[0].value_of_css_property("background-color")
    plain = driver.find_element(By.CSS_SELECTOR, "#sides tr[data-field=currency]")
    assert highlight != plain.value_of_css_property("background-color")
    assert "12.50 EUR" in driver.find_element(By.ID, "detail").text
    assert RUN_ACTOR in driver.find_element(By.ID, "history").text
    browser.shot("24-discrepancies-item")
    browser.phone_shot("25-discrepancies-item-phone", at="sides")
    browser.phone_shot("26-discrepancies-forms-phone", at="act")

    # A blank reason is refused by the browser: the form is not sent.
    driver.find_element(By.ID, "resolve").click()
    assert driver.current_url.endswith(f"/console/discrepancies/{item_id}")
    assert item_row(db, item_id)["state"] == "open"

    reason = "ticket 812: provider refunded the 2.50 EUR overcharge"
    field = driver.find_element(By.ID, "resolve-reason")
    field.send_keys(reason)
    # Tab to the form's button and press it, as a keyboard user does.
    field.send_keys(Keys.TAB)
    focused = driver.switch_to.active_element
    assert focused.get_attribute("id") == "resolve"
    focused.send_keys(Keys.ENTER)

    wait_until(lambda: "done=resolved" in driver.current_url, message="the resolution")
    _shows(browser, By.ID, "state", "resolved")
    assert f"operator:{admin.name}" in driver.find_element(By.ID, "closed-by").text
    history = driver.find_element(By.ID, "history").text
    assert reason in history
    assert f"operator:{admin.name}" in history
    assert not driver.find_elements(By.ID, "resolve-reason")
    browser.shot("27-discrepancies-resolved")
    browser.phone_shot("28-discrepancies-resolved-phone")
    assert [(c["to_state"], c["actor"], c["reason"]) for c in changes(db, item_id)][-1] == (
        "resolved",
        f"operator:{admin.name}",
        reason,
    )

    driver.find_element(By.LINK_TEXT, "Discrepancies").click()
    _shows(browser, By.TAG_NAME, "h1", "Discrepancies")
    count = driver.find_element(By.CSS_SELECTOR, "[data-open-count=amount_mismatch]")
    assert count.text == "0"
    assert driver.find_element(By.ID, "open-total").text == "2"
    browser.shot("29-discrepancies-queue-after")
