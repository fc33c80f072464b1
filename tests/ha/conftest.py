"""The high-availability tests run only when asked for: `python3 tasks.py test-ha`.

They start their own clusters (Patroni, etcd, PgBouncer; docs/testing.md) and take minutes,
so the default suite lists them as skipped unless the run selects the `ha` marker
(`-m ha`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.db.migrate import upgrade_head
from tests.support.control.patroni import PatroniCluster, patroni_cluster

REASON = "a high-availability test: run with `python3 tasks.py test-ha` (pytest -m ha)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "ha" in (config.option.markexpr or ""):
        return
    for item in items:
        if item.get_closest_marker("ha") is not None:
            item.add_marker(pytest.mark.skip(reason=REASON))


@pytest.fixture
def cluster(capsys: pytest.CaptureFixture[str]) -> Iterator[PatroniCluster]:
    """A Patroni cluster (`tests/support/control/patroni.py`) with the schema migrated. A
    start that did not form is told on the terminal, captured or not, so a run that needed a
    second start says so."""

    def report(account: str) -> None:
        with capsys.disabled():
            print(f"\n{account}")

    with patroni_cluster(report=report) as servers:
        upgrade_head(servers.url)
        yield servers
