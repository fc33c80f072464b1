"""An API receiving notifications: `primary` with a secret, `unsigned` with none (both at
the session's fake provider, which these tests never call)."""

from __future__ import annotations

import json

import pytest

from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.factories.provider_events import new_secret, secrets_setting

# Generated once per run: the tests sign with it, and look for it in the API's log.
SECRET = new_secret()


@pytest.fixture(scope="module")
def receiving_api(module_spawn: Spawner, provider: Process) -> Process:
    providers = [{"name": name, "url": provider.url} for name in ("primary", "unsigned")]
    return module_spawn.api(
        PAYMENTS_PROVIDERS=json.dumps(providers), **secrets_setting({"primary": [SECRET]})
    )
