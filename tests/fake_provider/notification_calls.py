"""The calls tests make to the fake provider's notifications admin API (`/_notifications`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.fake_provider.event_receiver import SECRET, Arrival, EventReceiver
from tests.support.control.waiting import wait_until


def set_endpoint(client: httpx.Client, url: str, secret: str = SECRET) -> dict[str, Any]:
    """`PUT /_notifications`: the development merchant's events go to `url`."""
    response = client.put("/_notifications", json={"url": url, "secret": secret})
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


@contextmanager
def notifying(client: httpx.Client, receiver: EventReceiver) -> Iterator[EventReceiver]:
    """The development merchant's events go to `receiver` until the block ends; then none are
    made, and those still to send are given up."""
    set_endpoint(client, receiver.url)
    try:
        yield receiver
    finally:
        assert client.delete("/_notifications").status_code == 204


def endpoint(client: httpx.Client) -> dict[str, Any]:
    """`GET /_notifications`: the development merchant's endpoint and its counters."""
    response = client.get("/_notifications")
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


def events(client: httpx.Client, *, charge_id: str | None = None) -> list[dict[str, Any]]:
    """`GET /_notifications/events`: every event made (of the charge `charge_id`, if given)."""
    response = client.get("/_notifications/events")
    assert response.status_code == 200, response.text
    made: list[dict[str, Any]] = response.json()["events"]
    return [event for event in made if charge_id is None or event["charge_id"] == charge_id]


def settled(client: httpx.Client, charge_id: str) -> list[dict[str, Any]]:
    """The charge's events once no copy of them is still to send (the receiver has a request
    a moment before the provider records its answer)."""

    def done() -> bool:
        made = events(client, charge_id=charge_id)
        return all(d["state"] not in ("pending", "held") for e in made for d in e["deliveries"])

    wait_until(done, message=f"the events of {charge_id} sent")
    return events(client, charge_id=charge_id)


def of_charge(arrivals: list[Arrival], charge_id: str) -> list[Arrival]:
    """The requests whose event tells of a record of the charge `charge_id`."""
    return [a for a in arrivals if a.event["data"]["object"]["charge_id"] == charge_id]
