"""What the settlement tests share: a client on the fake provider's ledger edits."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.control.processes import Process
from tests.support.control.system import PROVIDER_AUTH


@pytest.fixture
def ledger(provider: Process) -> Iterator[httpx.Client]:
    assert provider.url is not None
    with httpx.Client(base_url=provider.url, timeout=10, headers=PROVIDER_AUTH) as http:
        yield http
