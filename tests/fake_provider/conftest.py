"""Fixtures: one fake provider process for the session, no fault rules left between tests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fake_provider.provider import Provider, start_provider


@pytest.fixture(scope="session")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """A fake provider shared by the session; tests tell their charges apart by key."""
    base = tmp_path_factory.mktemp("fake-provider")
    running = start_provider(base / "ledger.sqlite3", base / "logs")
    yield running
    running.process.stop()


@pytest.fixture(autouse=True)
def _no_fault_rules(provider: Provider) -> None:
    """Every test starts with no fault rules, whatever the one before it armed."""
    with provider.client() as client:
        assert client.delete("/_faults").status_code == 204


@pytest.fixture
def client(provider: Provider) -> Iterator[httpx.Client]:
    """A client for the shared provider."""
    with provider.client() as http:
        yield http
