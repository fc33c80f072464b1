"""A support request in a real headless Chromium, by keyboard: "customer says they were
charged twice, order 1042".

The operator tabs past the skip link to the search box in the header, types the order's
reference, gets both payments, opens one and reads its refund and its timeline; lists the
tenant's payments through the filter form; reads the dashboard's charts. The pages are
checked at a narrow window (400 px) too: nothing sticks out sideways. Screenshots of each
page are kept (see `conftest.py`).
"""

from __future__ import annotations

import uuid

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.console.conftest import LAPTOP, Browser
from tests.console.test_console_browser import _shows
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_account, new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.factories.tenants import TenantHandle

NARROW = (400, 900)


def _narrow(browser: Browser, name: str) -> None:
    """A screenshot at 400 px wide, checking nothing sticks out sideways."""
    browser.driver.set_window_size(*NARROW)
    try:
        width = browser.driver.execute_script("return document.documentElement.scrollWidth")
        browser.shot(name)
        assert width <= NARROW[0], f"{name}: the page is {width} px wide at {NARROW[0]} px"
    finally:
        browser.driver.set_window_size(*LAPTOP)


def _active_id(browser: Browser) -> str:
    return str(browser.driver.execute_script("return document.activeElement.id || ''"))


def test_an_operator_finds_a_double_charge_by_its_order_with_the_keyboard(
    browser: Browser,
    api: Process,
    client: httpx.Client,
    tenant: TenantHandle,
    admin: AdminHandle,
) -> None:
    order = f"order-1042-{uuid.uuid4().hex[:6]}"
    body = payment_body(merchant_reference=order, account_id=new_account(), amount="42.00")
    first = post_payment(client, body, key=new_key()).json()
    second = post_payment(client, body, key=new_key()).json()
    refund = post_refund(client, second["payment_id"], refund_body(amount="42.00"), key=new_key())
    assert refund.status_code == 201, refund.text
    driver = browser.driver

    driver.get(f"{api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")

    # Keyboard: the skip link comes first, then the brand, then the search box.
    body_element = driver.find_element(By.TAG_NAME, "body")
    body_element.send_keys(Keys.TAB)
    skip = driver.switch_to.active_element
    assert skip.text == "Skip to content"
    assert skip.get_attribute("href").endswith("#main")
    skip.send_keys(Keys.TAB)
    driver.switch_to.active_element.send_keys(Keys.TAB)
    assert _active_id(browser) == "q"
    label = driver.find_element(By.CSS_SELECTOR, "label[for=q]")
    assert label.get_attribute("textContent") == "Search by id or key"
    driver.switch_to.active_element.send_keys(order, Keys.ENTER)

    _shows(browser, By.ID, "search-count", "2 records hold")
    rows = driver.find_elements(By.CSS_SELECTOR, "#hits tr[data-kind=payment]")
    assert len(rows) == 2
    assert second["payment_id"] in rows[0].text
    assert first["payment_id"] in rows[1].text
    assert "42.00 EUR" in rows[0].text
    browser.shot("31-search-two-payments")
    _narrow(browser, "32-search-narrow")

    rows[0].find_element(By.TAG_NAME, "a").click()
    _shows(browser, By.ID, "payment-status", "REFUNDED")
    assert refund.json()["refund_id"] in driver.find_element(By.ID, "refunds").text
    timeline = driver.find_element(By.ID, "timeline").text
    assert "refund.succeeded" in timeline
    assert "payment.succeeded" in timeline
    browser.shot("33-payment")
    _narrow(browser, "34-payment-narrow")

    driver.get(f"{api.admin_url}/console/payments")
    # The filter form in reading order, by keyboard.
    driver.find_element(By.ID, "f-tenant").click()
    focused: list[str] = []
    for _ in range(3):
        focused.append(_active_id(browser))
        driver.switch_to.active_element.send_keys(Keys.TAB)
    assert focused == ["f-tenant", "f-status", "f-from"]
    driver.find_element(By.ID, "f-tenant").send_keys(str(tenant.id))
    Select(driver.find_element(By.ID, "f-status")).select_by_visible_text("SUCCEEDED")
    driver.find_element(By.ID, "f-currency").send_keys("EUR")
    driver.find_element(By.ID, "f-min").send_keys("40", Keys.ENTER)
    wait_until(lambda: "status=SUCCEEDED" in driver.current_url, message="the filtered list")
    listed = driver.find_elements(By.CSS_SELECTOR, "#list tbody tr")
    assert [r.get_attribute("data-id") for r in listed] == [first["payment_id"]]
    browser.shot("35-payments-filtered")
    _narrow(browser, "36-payments-narrow")

    driver.get(f"{api.admin_url}/console/refunds?tenant={tenant.id}")
    listed = driver.find_elements(By.CSS_SELECTOR, "#list tbody tr")
    assert [r.get_attribute("data-id") for r in listed] == [refund.json()["refund_id"]]
    browser.shot("39-refunds")
    _narrow(browser, "40-refunds-narrow")
    driver.get(f"{api.admin_url}/console/operations?tenant={tenant.id}")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#list tbody tr")) == 3
    browser.shot("41-operations")
    _narrow(browser, "42-operations-narrow")

    driver.get(f"{api.admin_url}/console?window=day")
    for chart in ("chart-payments", "chart-backlog", "chart-webhooks"):
        svg = driver.find_element(By.ID, f"{chart}-svg")
        assert svg.get_attribute("role") == "img"
        assert svg.size["width"] > 200
    assert (
        int(driver.find_element(By.CSS_SELECTOR, "#chart-payments [data-total=succeeded]").text)
        >= 2
    )
    driver.execute_script("document.getElementById('activity').scrollIntoView()")
    browser.shot("37-dashboard-charts")
    _narrow(browser, "38-dashboard-charts-narrow")
