"""`app.gc_tuning.freeze_startup`: what exists after start-up is left out of later collections."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app import gc_tuning


class _StartupObject:
    pass


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_freeze_startup_moves_what_is_alive_out_of_the_collected_generations() -> None:
    made_at_startup = _StartupObject()
    assert any(o is made_at_startup for o in gc.get_objects())

    gc_tuning.freeze_startup()

    assert gc.get_freeze_count() > 0
    assert not any(o is made_at_startup for o in gc.get_objects())
    made_later = _StartupObject()
    assert any(o is made_later for o in gc.get_objects())
