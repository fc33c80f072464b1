"""One search of the protocol at the small bound, shared by the tests that read its graph."""

from __future__ import annotations

import pytest

from tests.model.protocol import Protocol
from tests.model.search import Report, explore
from tests.model.world import SMALL, World, initial_worlds


@pytest.fixture(scope="session")
def small_run() -> tuple[Report[World], Protocol]:
    protocol = Protocol(SMALL)
    return explore(protocol, initial_worlds(SMALL)), protocol
