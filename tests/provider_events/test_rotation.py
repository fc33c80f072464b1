"""Rotating a provider's secret: while both are live an event signed with either is kept;
once the old one is removed, an event signed with it is refused."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

from tests.support.control.spawner import Spawner
from tests.support.factories.provider_events import (
    deliver,
    event,
    kept,
    new_secret,
    raw,
    secrets_setting,
)


def test_either_live_secret_is_accepted_and_a_removed_one_refused(
    spawn: Spawner, db: psycopg.Connection[DictRow]
) -> None:
    old, new = new_secret(), new_secret()
    rotating = spawn.api(**secrets_setting({"primary": [old, new]}))
    assert rotating.url is not None
    by_old, by_new, by_both = event(), event(), event()

    for sent, secrets in ((by_old, [old]), (by_new, [new]), (by_both, [old, new])):
        answer = deliver(rotating.url, "primary", raw(sent), signed_with=secrets)
        assert (answer.status_code, answer.json()) == (200, {"received": True})
        assert len(kept(db, "primary", sent["id"])) == 1
    rotating.stop()

    rotated = spawn.api(**secrets_setting({"primary": [new]}))
    assert rotated.url is not None
    late, current = event(), event()

    refused = deliver(rotated.url, "primary", raw(late), signed_with=[old])
    accepted = deliver(rotated.url, "primary", raw(current), signed_with=[new])

    assert (refused.status_code, refused.json()["code"]) == (
        400,
        "PROVIDER_EVENT_SIGNATURE_INVALID",
    )
    assert kept(db, "primary", late["id"]) == []
    assert accepted.status_code == 200
    assert len(kept(db, "primary", current["id"])) == 1
