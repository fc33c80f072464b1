"""Two providers: the session's fake provider as `primary`, and one of this folder's own as
`secondary`, with an API routed to both (every payment: primary, then secondary).

The session's provider keeps its name, `primary`, so that every process of the suite agrees
on what `primary` is: a worker of any test may claim any due operation, and must look it up
where it was sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.factories.tenants import TenantHandle, api_client


def providers_setting(primary_url: str, secondary_url: str) -> str:
    """PAYMENTS_PROVIDERS naming the two providers."""
    return json.dumps(
        [{"name": "primary", "url": primary_url}, {"name": "secondary", "url": secondary_url}]
    )


@pytest.fixture(scope="module")
def module_spawn(work_dir: Path, base_env: dict[str, str]) -> Iterator[Spawner]:
    spawner = Spawner(log_dir=work_dir / "logs", base_env=base_env)
    try:
        yield spawner
    finally:
        spawner.close()


@pytest.fixture(scope="module")
def secondary(module_spawn: Spawner, work_dir: Path, request: pytest.FixtureRequest) -> Process:
    return module_spawn.provider(work_dir / f"secondary-{request.module.__name__}.sqlite3")


@pytest.fixture(scope="module")
def two_providers(provider: Process, secondary: Process) -> dict[str, str]:
    """The settings of a process routed to both providers."""
    assert provider.url is not None
    assert secondary.url is not None
    return {"PAYMENTS_PROVIDERS": providers_setting(provider.url, secondary.url)}


@pytest.fixture(scope="module")
def routed_api(module_spawn: Spawner, two_providers: dict[str, str]) -> Process:
    return module_spawn.api(**two_providers)


@pytest.fixture
def routed(routed_api: Process, tenant: TenantHandle) -> Iterator[httpx.Client]:
    with api_client(routed_api, tenant) as http:
        yield http


@pytest.fixture
def second_faults(secondary: Process) -> Iterator[FaultInjector]:
    assert secondary.url is not None
    injector = FaultInjector(secondary.url)
    injector.clear()
    yield injector
    injector.clear()
