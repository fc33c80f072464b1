"""A provider's books are read through the provider's client, the one every call to it goes
through: its secret key on every read, its calls observed as the others are, its failures
translated. Against the session's fake provider, which refuses a merchant call without a
merchant's key (fake_provider/merchants.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import pytest

from app.provider import ProviderClient, WireClient
from app.settlement.books import BooksUnavailable, ProviderBooks
from app.settlement.rows import RecordType
from tests.support.control.processes import Process
from tests.support.control.settlement import add_charge, at, own_day
from tests.support.control.system import PROVIDER_KEY

T = TypeVar("T")
Observed = list[tuple[str, str]]


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner() as runner:
        return runner.run(coro)


async def _read(url: str, api_key: str | None, read: str, observed: Observed) -> Any:
    wire = WireClient(url, api_key=api_key)
    client = ProviderClient(
        wire,
        deadline_s=2.0,
        name="primary",
        observer=lambda operation, outcome, _s: observed.append((operation, outcome)),
    )
    books = ProviderBooks(client, page_size=2)
    day = own_day()
    try:
        if read == "listing":
            return await books.created_on(RecordType.CHARGE, day)
        if read == "lookup":
            return await books.find(RecordType.CHARGE, "payment-no-such-key")
        return await books.report(day)
    finally:
        await wire.aclose()


@pytest.mark.parametrize("read", ["listing", "lookup", "report"])
def test_a_read_without_the_providers_key_is_refused_and_concludes_nothing(
    provider: Process, read: str
) -> None:
    assert provider.url is not None
    observed: Observed = []

    with pytest.raises(BooksUnavailable, match=r"refused the service's credentials \(401\)"):
        run(_read(provider.url, None, read, observed))

    assert observed == [(f"books_{read}", "failed")]


@pytest.mark.parametrize("read", ["listing", "lookup", "report"])
def test_a_read_with_the_providers_key_is_answered(provider: Process, read: str) -> None:
    assert provider.url is not None
    observed: Observed = []

    got = run(_read(provider.url, PROVIDER_KEY, read, observed))

    assert observed == [(f"books_{read}", "not_found" if read == "lookup" else "found")]
    if read == "listing":
        assert got == []
    elif read == "report":
        assert got.lag_days == 1


def test_a_day_is_listed_page_by_page_through_the_client(
    provider: Process, ledger: httpx.Client
) -> None:
    assert provider.url is not None
    day = own_day()
    made = [add_charge(ledger, f"payment-books-{day}-{n}", at(day, 60 * n)) for n in range(5)]
    observed: Observed = []

    async def listing() -> list[str]:
        wire = WireClient(provider.url or "", api_key=PROVIDER_KEY)
        client = ProviderClient(
            wire, observer=lambda operation, outcome, _s: observed.append((operation, outcome))
        )
        try:
            records = await ProviderBooks(client, page_size=2).created_on(RecordType.CHARGE, day)
            nothing = await ProviderBooks(client).created_on(
                RecordType.CHARGE, day + timedelta(days=1)
            )
        finally:
            await wire.aclose()
        assert nothing == []
        return [record.provider_id for record in records]

    assert run(listing()) == [charge["charge_id"] for charge in made]
    # Five records at two a page: three pages, then the next day's one.
    assert observed == [("books_listing", "found")] * 4
