"""A route of three providers: every attempt a failover starts is an only send of its own.

The send after a failover goes under the new attempt's own key, which nothing was ever sent
under; its refusal therefore proves that attempt took no effect too, and the payment moves on
to the route's next provider, however it got to this attempt (its first send refused, or a
lost decline found by a lookup). With two providers there is no next one to move to, so only
a third shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import payment_for, transitions


@pytest.fixture(scope="module")
def third(module_spawn: Spawner, work_dir: Path) -> Process:
    return module_spawn.provider(work_dir / "third-three-providers.sqlite3")


@pytest.fixture
def third_faults(third: Process) -> Iterator[FaultInjector]:
    assert third.url is not None
    injector = FaultInjector(third.url)
    injector.clear()
    yield injector
    injector.clear()


@pytest.fixture
def three(
    module_spawn: Spawner,
    provider: Process,
    secondary: Process,
    third: Process,
    tenant: TenantHandle,
) -> Iterator[httpx.Client]:
    names = {"primary": provider, "secondary": secondary, "third": third}
    providers = [{"name": name, "url": process.url} for name, process in names.items()]
    api = module_spawn.api(PAYMENTS_PROVIDERS=json.dumps(providers))
    with api_client(api, tenant) as http:
        yield http


def _charged_once_at_third(
    db: psycopg.Connection[DictRow],
    operation_id: str,
    injectors: tuple[FaultInjector, FaultInjector, FaultInjector],
) -> None:
    payment = payment_for(db, operation_id)
    assert (payment["status"], payment["attempt"]) == ("SUCCEEDED", 2), payment
    key = str(payment["provider_key"])
    held = [
        [c["status"] for c in faults.charges(idempotency_key=attempt_key)]
        for faults, attempt_key in zip(injectors, (key, f"{key}:1", f"{key}:2"), strict=True)
    ]
    assert held[2] == ["succeeded"], held
    assert "succeeded" not in held[0] + held[1], held


def test_refused_at_the_first_two_providers_is_charged_at_the_third(
    three: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    third_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    second_faults.add("unavailable", account_id=body["account_id"])

    created = post_payment(three, body, key=new_key())

    assert created.status_code == 201, created.text
    operation_id = created.json()["operation_id"]
    _charged_once_at_third(db, operation_id, (faults, second_faults, third_faults))
    triggers = [t["trigger"] for t in transitions(db, operation_id)]
    assert triggers == ["claim", "send", "failover", "failover", "complete"]


def test_a_lost_decline_failed_over_and_refused_next_moves_on_to_the_third(
    three: httpx.Client,
    faults: FaultInjector,
    second_faults: FaultInjector,
    third_faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    key, body = new_key(), payment_body()
    faults.add("decline", account_id=body["account_id"], decline_code="try_again_later")
    faults.add("drop_after_commit", account_id=body["account_id"])
    second_faults.add("unavailable", account_id=body["account_id"])
    accepted = post_payment(three, body, key=key)
    assert accepted.status_code == 202, accepted.text

    # The retry's lookup finds the decline and fails over; the secondary refuses that
    # attempt's only send, so it moves on again.
    retried = post_payment(three, body, key=key)

    assert retried.status_code == 201, retried.text
    operation_id = accepted.json()["operation_id"]
    _charged_once_at_third(db, operation_id, (faults, second_faults, third_faults))
