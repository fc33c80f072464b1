"""Routing: which providers a payment's attempts go to, and which declines go elsewhere; the
settings that name providers and routes, refused at start when they cannot be right."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter

import pytest

from app.provider.keys import attempt_key, derive_provider_key, split_attempt_key
from app.provider.registry import DEFAULT_NAME
from app.provider.routing import DEFAULT_RETRY_ELSEWHERE, RoutingSpec, RoutingTable
from app.settings import Settings, SettingsError
from tests.test_settings import set_only

TENANT, OTHER = uuid.uuid4(), uuid.uuid4()
PROVIDERS = json.dumps(
    [
        {"name": "alpha", "url": "http://127.0.0.1:8100"},
        {"name": "beta", "url": "http://127.0.0.1:8101", "timeout_s": 2},
        {"name": "gamma", "url": "http://127.0.0.1:8102"},
    ]
)


def _table(**spec: object) -> RoutingTable:
    return RoutingTable(("alpha", "beta", "gamma"), RoutingSpec.model_validate(spec))


def test_no_route_is_every_provider_in_the_configured_order() -> None:
    assert _table().route(TENANT, "EUR", 1000) == ("alpha", "beta", "gamma")


def test_the_first_matching_route_wins_with_its_filters() -> None:
    table = _table(
        routes=[
            {"tenants": [str(TENANT)], "currencies": ["usd"], "providers": ["gamma"]},
            {"currencies": ["EUR"], "min_amount_minor": 100_000, "providers": ["beta", "alpha"]},
            {"currencies": ["EUR"], "providers": ["alpha"]},
        ]
    )
    assert table.route(TENANT, "USD", 1) == ("gamma",)
    assert table.route(OTHER, "USD", 1) == ("alpha", "beta", "gamma")
    assert table.route(OTHER, "EUR", 100_000) == ("beta", "alpha")
    assert table.route(OTHER, "EUR", 99_999) == ("alpha",)


def test_an_amount_range_is_inclusive_at_both_ends() -> None:
    table = _table(routes=[{"min_amount_minor": 10, "max_amount_minor": 20, "providers": ["beta"]}])
    assert [table.route(TENANT, "EUR", a)[0] for a in (9, 10, 20, 21)] == [
        "alpha",
        "beta",
        "beta",
        "alpha",
    ]


def test_weights_draw_the_first_provider_and_the_rest_follow_in_order() -> None:
    table = _table(
        routes=[
            {
                "providers": ["alpha", "beta", "gamma"],
                "weights": {"alpha": 3, "beta": 1, "gamma": 0},
            }
        ]
    )
    rng = random.Random(7)
    routes = [table.route(TENANT, "EUR", 1, rng=rng) for _ in range(4000)]
    firsts = Counter(route[0] for route in routes)
    assert firsts["gamma"] == 0
    assert 0.70 < firsts["alpha"] / 4000 < 0.80
    assert set(routes) == {("alpha", "beta", "gamma"), ("beta", "alpha", "gamma")}


def test_only_the_listed_declines_are_retried_elsewhere() -> None:
    table = _table()
    assert table.retries_elsewhere("processor_declined")
    assert set(DEFAULT_RETRY_ELSEWHERE) >= {"processor_declined", "issuer_unavailable"}
    for final in ("card_declined", "insufficient_funds", None):
        assert not table.retries_elsewhere(final)
    narrowed = _table(retry_elsewhere=["try_again_later"])
    assert not narrowed.retries_elsewhere("processor_declined")
    assert narrowed.retries_elsewhere("try_again_later")


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"providers": ["alpha", "alpha"]}, "names a provider twice"),
        ({"providers": []}, "at least 1"),
        ({"providers": ["alpha"], "weights": {"beta": 1}}, "weights must name exactly"),
        ({"providers": ["alpha"], "weights": {"alpha": 0}}, "one of them > 0"),
        ({"providers": ["alpha"], "min_amount_minor": 5, "max_amount_minor": 4}, "exceeds"),
        ({"providers": ["alpha"], "currencies": ["EURO"]}, "ISO 4217"),
        ({"providers": ["alpha"], "colour": "red"}, "Extra inputs"),
    ],
)
def test_a_route_that_cannot_be_right_is_refused(route: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _table(routes=[route])


def test_without_providers_there_is_one_named_primary(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, PAYMENTS_PROVIDER_URL="http://127.0.0.1:9999/")
    (spec,) = Settings.from_env().provider_specs()
    assert (spec.name, spec.url, spec.timeout_s) == (DEFAULT_NAME, "http://127.0.0.1:9999", 5.0)
    assert Settings.from_env().routing_table().route(TENANT, "EUR", 1) == (DEFAULT_NAME,)


def test_each_provider_keeps_its_own_timeout_or_takes_the_services(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_only(monkeypatch, PAYMENTS_PROVIDERS=PROVIDERS, PAYMENTS_BREAKER_FAILURES="7")
    specs = Settings.from_env().provider_specs()
    assert [(s.name, s.timeout_s, s.breaker_failures) for s in specs] == [
        ("alpha", 5.0, 7),
        ("beta", 2.0, 7),
        ("gamma", 5.0, 7),
    ]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PAYMENTS_PROVIDERS": "[{"}, "PAYMENTS_PROVIDERS"),
        ({"PAYMENTS_PROVIDERS": "[]"}, "at least one provider"),
        (
            {
                "PAYMENTS_PROVIDERS": '[{"name": "a", "url": "http://x"}, {"name": "a", "url": "http://y"}]'
            },
            "distinct",
        ),
        (
            {"PAYMENTS_PROVIDERS": '[{"name": "Alpha", "url": "http://x"}]'},
            r"PAYMENTS_PROVIDERS\[0\]\.name",
        ),
        (
            {"PAYMENTS_PROVIDERS": '[{"name": "a", "url": "ftp://x"}]'},
            r"PAYMENTS_PROVIDERS\[0\]\.url",
        ),
        (
            {"PAYMENTS_PROVIDERS": '[{"name": "a", "url": "http://x", "timeout_s": 40}]'},
            "PAYMENTS_LEASE_S must exceed provider 'a'",
        ),
        (
            {
                "PAYMENTS_PROVIDERS": PROVIDERS,
                "PAYMENTS_ROUTING": '{"routes": [{"providers": ["delta"]}]}',
            },
            "unknown providers",
        ),
        ({"PAYMENTS_ROUTING": '{"routes": [{"providers": ["alpha"]}]}'}, "unknown providers"),
    ],
)
def test_provider_settings_that_cannot_be_right_stop_the_process(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    set_only(monkeypatch, **variables)
    with pytest.raises(SettingsError, match=message):
        Settings.from_env()


def test_a_later_attempts_key_names_its_payment_and_attempt() -> None:
    payment = uuid.uuid4()
    stored = derive_provider_key(payment)
    assert attempt_key(stored, 0) == stored
    assert attempt_key(stored, 2) == f"{stored}:2"
    assert split_attempt_key(f"{stored}:2") == (stored, 2)
    for other in (stored, f"{stored}:0", f"{stored}:02", f"{stored}:x", "payment-x:1",
                  f"refund-{payment}:1", f"{stored}:1:1"):  # fmt: skip
        assert split_attempt_key(other) is None, other
