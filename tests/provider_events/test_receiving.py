"""`POST /provider-events/{provider}` against the running API: a signed event is kept once
and acknowledged; every refusal is its documented 4xx, with nothing kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.provider_events.conftest import SECRET
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.provider_events import (
    deliver,
    event,
    inbox_size,
    kept,
    new_secret,
    raw,
    signature,
)


def _url(api: Process) -> str:
    assert api.url is not None
    return api.url


def test_a_signed_event_is_kept_once_and_acknowledged(
    receiving_api: Process, db: psycopg.Connection[DictRow]
) -> None:
    sent = event()
    body = raw(sent)

    first = deliver(_url(receiving_api), "primary", body, signed_with=[SECRET])
    again = deliver(_url(receiving_api), "primary", body, signed_with=[SECRET])

    assert (first.status_code, first.json()) == (200, {"received": True})
    assert (again.status_code, again.json()) == (200, {"received": True, "duplicate": True})
    [row] = kept(db, "primary", sent["id"])
    assert row["type"] == "charge.succeeded"
    assert row["provider_key"] == sent["data"]["object"]["idempotency_key"]
    assert row["body"] == sent
    assert (row["state"], row["attempts"], row["reason"]) == ("received", 0, None)
    assert row["next_attempt_at"] is not None
    assert (row["applied_at"], row["operation_id"]) == (None, None)


def test_a_redelivery_with_another_body_keeps_the_first(
    receiving_api: Process, db: psycopg.Connection[DictRow]
) -> None:
    first = event()
    other = {**first, "data": {"object": {"idempotency_key": "payment-other", "marker": "m0x7"}}}

    assert deliver(_url(receiving_api), "primary", raw(first), signed_with=[SECRET]).json() == {
        "received": True
    }
    answer = deliver(_url(receiving_api), "primary", raw(other), signed_with=[SECRET])

    assert (answer.status_code, answer.json()) == (200, {"received": True, "duplicate": True})
    [row] = kept(db, "primary", first["id"])
    assert row["body"] == first

    def warned() -> bool:
        return any(
            entry.get("event_id") == first["id"] and entry["level"] == "warning"
            for entry in _log_entries(receiving_api)
        )

    wait_until(warned, timeout=10, message="the warning of a redelivery with another body")
    assert "m0x7" not in receiving_api.log()
    assert "payment-other" not in receiving_api.log()


def _log_entries(api: Process) -> list[dict[str, object]]:
    return [json.loads(line) for line in api.log().splitlines() if line.startswith("{")]


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    # The body sent and its headers (besides Content-Type), from the event's raw body.
    body: Callable[[bytes], bytes | list[bytes]]
    headers: Callable[[bytes], list[tuple[str, str]]]


def _same(body: bytes) -> bytes:
    return body


def _signed(secrets: list[str], shift_s: int = 0) -> Callable[[bytes], list[tuple[str, str]]]:
    def headers(body: bytes) -> list[tuple[str, str]]:
        timestamp = int(time.time()) + shift_s
        return [("Provider-Signature", signature(secrets, body, timestamp=timestamp))]

    return headers


def _header(value: str) -> Callable[[bytes], list[tuple[str, str]]]:
    return lambda body: [("Provider-Signature", value)]


def _replaced(text: bytes) -> Callable[[bytes], bytes]:
    return lambda body: text


NOW_T = f"t={int(time.time())}"
A_DIGEST = "ab" * 32
INVALID_SIGNATURE = "PROVIDER_EVENT_SIGNATURE_INVALID"

REFUSALS = {
    "forged": Refusal(400, INVALID_SIGNATURE, _same, _signed([new_secret()])),
    "missing-header": Refusal(400, INVALID_SIGNATURE, _same, lambda body: []),
    "malformed-garbage": Refusal(400, INVALID_SIGNATURE, _same, _header("garbage")),
    "malformed-no-timestamp": Refusal(400, INVALID_SIGNATURE, _same, _header(f"v1={A_DIGEST}")),
    "malformed-no-v1": Refusal(400, INVALID_SIGNATURE, _same, _header(NOW_T)),
    "malformed-digest": Refusal(400, INVALID_SIGNATURE, _same, _header(f"{NOW_T},v1=zz")),
    "malformed-timestamp": Refusal(400, INVALID_SIGNATURE, _same, _header(f"t=soon,v1={A_DIGEST}")),
    "header-twice": Refusal(
        400,
        INVALID_SIGNATURE,
        _same,
        lambda body: _signed([SECRET])(body) + _signed([SECRET])(body),
    ),
    # A minute past the 300 s tolerance either way (its edges: test_signature.py), so that
    # the time the request takes cannot bring it back within.
    "stale": Refusal(400, "PROVIDER_EVENT_STALE", _same, _signed([SECRET], -360)),
    "from-the-future": Refusal(400, "PROVIDER_EVENT_STALE", _same, _signed([SECRET], 360)),
    "not-json": Refusal(400, "PROVIDER_EVENT_INVALID", _replaced(b"not json"), _signed([SECRET])),
    "not-an-object": Refusal(400, "PROVIDER_EVENT_INVALID", _replaced(b"[1]"), _signed([SECRET])),
    "not-an-event": Refusal(
        400, "PROVIDER_EVENT_INVALID", _replaced(b'{"type": "charge.succeeded"}'), _signed([SECRET])
    ),
    "nul-escape": Refusal(
        400,
        "PROVIDER_EVENT_INVALID",
        lambda body: body.replace(b'"EUR"', b'"EUR\\u0000"'),
        _signed([SECRET]),
    ),
    "lone-surrogate": Refusal(
        400,
        "PROVIDER_EVENT_INVALID",
        lambda body: body.replace(b'"EUR"', b'"EUR\\ud800"'),
        _signed([SECRET]),
    ),
    "over-the-cap": Refusal(
        413,
        "PAYLOAD_TOO_LARGE",
        lambda body: body[:-1] + b', "pad": "' + b"x" * 65536 + b'"}',
        _signed([SECRET]),
    ),
    "over-the-cap-undeclared": Refusal(
        413,
        "PAYLOAD_TOO_LARGE",
        # Sent chunked, without Content-Length: counted as it arrives.
        lambda body: [body[:-1], b', "pad": "', b"x" * 65536, b'"}'],
        _signed([SECRET]),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_event_is_answered_4xx_and_not_kept(
    receiving_api: Process, db: psycopg.Connection[DictRow], case: str
) -> None:
    refusal = REFUSALS[case]
    sent = event()
    body = refusal.body(raw(sent))
    signed_over = body if isinstance(body, bytes) else b"".join(body)
    headers = [("Content-Type", "application/json"), *refusal.headers(signed_over)]
    before = inbox_size(db)

    answer = httpx.post(
        f"{_url(receiving_api)}/provider-events/primary",
        content=body if isinstance(body, bytes) else iter(body),
        headers=headers,
        timeout=30,
    )

    assert answer.status_code == refusal.status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == refusal.code
    assert kept(db, "primary", sent["id"]) == []
    assert inbox_size(db) == before


def test_a_provider_not_configured_is_404_one_configured_is_not(
    receiving_api: Process, db: psycopg.Connection[DictRow]
) -> None:
    sent = event()
    body = raw(sent)

    unknown = deliver(_url(receiving_api), "nobody", body, signed_with=[SECRET])
    known = deliver(_url(receiving_api), "primary", body, signed_with=[SECRET])

    assert (unknown.status_code, unknown.json()["code"]) == (404, "NOT_FOUND")
    assert kept(db, "nobody", sent["id"]) == []
    assert known.status_code == 200
    assert len(kept(db, "primary", sent["id"])) == 1


def test_a_provider_without_secrets_refuses_every_event(
    receiving_api: Process, db: psycopg.Connection[DictRow]
) -> None:
    sent = event()

    answer = deliver(_url(receiving_api), "unsigned", raw(sent), signed_with=[SECRET])

    assert (answer.status_code, answer.json()["code"]) == (400, INVALID_SIGNATURE)
    assert kept(db, "unsigned", sent["id"]) == []

    def warned() -> bool:
        return any(
            entry.get("provider") == "unsigned" and entry["level"] == "warning"
            for entry in _log_entries(receiving_api)
        )

    wait_until(warned, timeout=10, message="the warning that a provider has no secret")


def test_events_are_received_on_the_tenants_listener_only(
    receiving_api: Process, db: psycopg.Connection[DictRow]
) -> None:
    assert receiving_api.admin_url is not None
    sent = event()

    operators = deliver(receiving_api.admin_url, "primary", raw(sent), signed_with=[SECRET])
    tenants = deliver(_url(receiving_api), "primary", raw(sent), signed_with=[SECRET])

    assert operators.status_code == 404
    assert tenants.status_code == 200
    assert len(kept(db, "primary", sent["id"])) == 1


def _sample(text: str, name: str, **labels: str) -> float:
    """One sample's value in a `/metrics` page (0 when absent)."""
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        metric, _, rest = series.partition("{")
        if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            return float(value)
    return 0.0


def test_every_outcome_is_counted_by_provider(receiving_api: Process) -> None:
    assert receiving_api.admin_url is not None
    metrics = f"{receiving_api.admin_url}/metrics"
    url = _url(receiving_api)
    before = httpx.get(metrics, timeout=10).text
    sent = raw(event())
    stale = signature([SECRET], sent, timestamp=int(time.time()) - 3600)

    deliver(url, "primary", sent, signed_with=[SECRET])
    deliver(url, "primary", sent, signed_with=[SECRET])
    deliver(url, "primary", raw(event()), signed_with=[new_secret()])
    deliver(url, "primary", sent, headers=[("Provider-Signature", stale)])
    deliver(url, "primary", b"[]", signed_with=[SECRET])
    deliver(url, "primary", b"x" * 70_000, signed_with=[SECRET])
    deliver(url, "unsigned", sent, signed_with=[SECRET])
    deliver(url, "nobody", sent, signed_with=[SECRET])
    after = httpx.get(metrics, timeout=10).text

    def grew(provider: str, outcome: str) -> float:
        name = "payments_provider_events_received_total"
        labels = {"provider": provider, "outcome": outcome}
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    outcomes = ("stored", "duplicate", "signature_invalid", "stale", "invalid", "too_large")
    assert [grew("primary", outcome) for outcome in outcomes] == [1, 1, 1, 1, 1, 1]
    assert grew("unsigned", "signature_invalid") == 1
    # A name no provider has is not counted: it would make a series of any path.
    assert "nobody" not in after
