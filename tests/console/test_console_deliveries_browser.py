"""Webhook deliveries in the console, in a real headless Chromium.

A payment's event goes to two real receivers, one of which fails until its delivery gives
up. The operator sees the failure counted on the dashboard, finds it on the failed
deliveries page, opens its operation, reads both deliveries, redelivers the event through
the confirmation page, and sees the delivery succeed. Screenshots at laptop and phone
widths (see `conftest.py`).
"""

from __future__ import annotations

from pathlib import Path

import httpx
from selenium.webdriver.common.by import By

from tests.console.conftest import Browser
from tests.console.test_console_browser import _shows
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.webhooks import create_endpoint


def test_an_operator_finds_a_failed_delivery_and_redelivers_it(
    browser: Browser,
    spawn: Spawner,
    tmp_path: Path,
    api: Process,
    client: httpx.Client,
    admin_client: httpx.Client,
    admin: AdminHandle,
) -> None:
    good = spawn.receiver(tmp_path / "good.jsonl")
    bad = spawn.receiver(tmp_path / "bad.jsonl")
    bad.mode("fail")
    create_endpoint(client, good.url)
    create_endpoint(client, bad.url)
    spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_MAX_AGE_S="1")
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    operation_id = paid.json()["operation_id"]

    def gave_up() -> bool:
        events = admin_client.get(f"/admin/operations/{operation_id}").json()["events"]
        statuses = sorted(d["status"] for e in events for d in e["deliveries"])
        return statuses == ["failed", "succeeded"]

    wait_until(gave_up, timeout=60, message="the failing delivery to give up")
    driver = browser.driver

    driver.get(f"{api.admin_url}/console/login")
    driver.find_element(By.ID, "token").send_keys(admin.token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.current_url.endswith("/console"), message="the dashboard")
    assert int(driver.find_element(By.ID, "failed-deliveries-count").text) >= 1
    browser.shot("11-dashboard-failed-deliveries")
    browser.phone_shot("12-dashboard-phone")

    driver.find_element(By.ID, "failed-deliveries").click()
    _shows(browser, By.TAG_NAME, "h1", "Failed webhook deliveries")
    row = driver.find_element(
        By.CSS_SELECTOR, f"#failed a[href^='/console/operations/{operation_id}']"
    )
    assert bad.url in driver.find_element(By.ID, "failed").text
    browser.shot("13-failed-deliveries")
    browser.phone_shot("14-failed-deliveries-phone")

    row.click()
    _shows(browser, By.ID, "deliveries", "payment.succeeded")
    section = driver.find_element(By.ID, "deliveries").text
    assert good.url in section
    assert bad.url in section
    assert "succeeded" in section
    assert "failed" in section
    assert "HTTP 500" in section
    assert "HTTP 200" in section
    driver.execute_script("document.getElementById('deliveries').scrollIntoView()")
    browser.shot("15-operation-deliveries")
    browser.phone_shot("16-operation-deliveries-phone", at="deliveries")

    driver.find_element(By.CSS_SELECTOR, "button[data-redeliver]").click()
    _shows(browser, By.TAG_NAME, "h1", "Redeliver")
    browser.shot("17-confirm-redeliver")
    attempts_before = len(bad.records())
    bad.mode("ok")
    driver.find_element(By.ID, "confirm").click()
    wait_until(lambda: "done=redelivered" in driver.current_url, message="the redelivery")
    assert "Redelivery queued." in driver.page_source

    wait_until(lambda: len(bad.answered()) == 1, timeout=60, message="the receiver to get it")
    assert len(bad.records()) == attempts_before + 1

    def shows_succeeded() -> bool:
        driver.refresh()
        text: str = driver.find_element(By.ID, "deliveries").text
        return "failed" not in text and "pending" not in text

    wait_until(shows_succeeded, timeout=60, message="both deliveries shown succeeded")
    browser.shot("18-operation-redelivered")
