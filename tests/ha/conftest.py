"""The high-availability tests run only when asked for: `python3 tasks.py test-ha`.

They start their own clusters (Patroni, etcd, PgBouncer; docs/testing.md) and take minutes,
so the default suite lists them as skipped unless the run selects the `ha` marker
(`-m ha`).
"""

from __future__ import annotations

import pytest

REASON = "a high-availability test: run with `python3 tasks.py test-ha` (pytest -m ha)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "ha" in (config.option.markexpr or ""):
        return
    for item in items:
        if item.get_closest_marker("ha") is not None:
            item.add_marker(pytest.mark.skip(reason=REASON))
