"""`X-Request-Id`: on every response, in every problem body, in the request's log lines."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle


def new_request_id() -> str:
    return f"req-{uuid.uuid4()}"


def request_lines(api: Process, request_id: str) -> list[dict[str, object]]:
    """The API's `request` log lines for `request_id` (its own, written after the answer)."""
    found = []
    for line in api.log().splitlines():
        if request_id in line and '"msg": "request"' in line:
            found.append(json.loads(line))
    return found


def test_a_success_echoes_the_callers_id_and_logs_it(client: httpx.Client, api: Process) -> None:
    request_id = new_request_id()
    response = post_payment(client, key=new_key(), headers={"X-Request-Id": request_id})

    assert response.status_code == 201, response.text
    assert response.headers["x-request-id"] == request_id
    wait_until(lambda: bool(request_lines(api, request_id)), message="the request's log line")
    [line] = request_lines(api, request_id)
    assert line["request_id"] == request_id
    assert (line["route"], line["status"]) == ("/payments", 201)


def test_a_problem_carries_the_id_in_its_body(client: httpx.Client) -> None:
    request_id = new_request_id()
    response = post_payment(
        client, payment_body(amount=10), key=new_key(), headers={"X-Request-Id": request_id}
    )

    assert response.status_code == 422, response.text
    assert response.headers["x-request-id"] == request_id
    assert response.json()["request_id"] == request_id


def test_not_found_carries_the_id(client: httpx.Client) -> None:
    request_id = new_request_id()
    for path in (f"/payments/{uuid.uuid4()}", "/no/such/route"):
        response = client.get(path, headers={"X-Request-Id": request_id})

        assert response.status_code == 404, response.text
        assert response.headers["x-request-id"] == request_id
        assert response.json()["request_id"] == request_id


def test_unauthenticated_carries_the_id(api: Process) -> None:
    request_id = new_request_id()
    response = httpx.get(
        f"{api.url}/payments/{uuid.uuid4()}",
        headers={"X-Request-Id": request_id, "Authorization": "Bearer sk_nope"},
    )

    assert response.status_code == 401, response.text
    assert response.headers["x-request-id"] == request_id
    assert response.json()["request_id"] == request_id


def test_without_an_id_one_is_made(api: Process, tenant: TenantHandle) -> None:
    first = httpx.get(f"{api.url}/healthz")
    second = httpx.get(f"{api.url}/healthz")

    assert first.headers["x-request-id"]
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"has spaces", id="spaces"),
        pytest.param(b"x" * 129, id="too-long"),
        pytest.param(b"caf\xe9", id="not-ascii"),
        pytest.param(b"tab\there", id="control"),
    ],
)
def test_a_bad_id_is_replaced(client: httpx.Client, bad: bytes) -> None:
    response = client.get(f"/payments/{uuid.uuid4()}", headers=[(b"X-Request-Id", bad)])

    assert response.status_code == 404, response.text
    made = response.headers["x-request-id"]
    assert made.encode() != bad
    assert 1 <= len(made) <= 128
    assert response.json()["request_id"] == made


def test_the_longest_sane_id_is_kept(client: httpx.Client) -> None:
    request_id = "~" * 128
    response = client.get("/healthz", headers={"X-Request-Id": request_id})

    assert response.headers["x-request-id"] == request_id
