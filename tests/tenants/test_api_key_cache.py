"""The API key cache on its own: how long answers live, what it writes, what it bounds."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.tenants.cache import ApiKeyCache
from app.tenants.repository import KeyOwner

START = datetime(2026, 1, 1, tzinfo=UTC)


class World:
    """Keys in force, a clock under the test's control, and what the cache asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.keys: dict[str, KeyOwner] = {}
        self.lookups: list[str] = []
        self.uses: list[tuple[uuid.UUID, datetime]] = []

    def add(self, api_key: str, last_used_at: datetime | None = None) -> KeyOwner:
        owner = KeyOwner(tenant_id=uuid.uuid4(), key_id=uuid.uuid4(), last_used_at=last_used_at)
        self.keys[api_key] = owner
        return owner

    async def lookup(self, api_key: str) -> KeyOwner | None:
        self.lookups.append(api_key)
        return self.keys.get(api_key)

    async def record_use(self, key_id: uuid.UUID, at: datetime) -> None:
        self.uses.append((key_id, at))

    def wall(self) -> datetime:
        return START + timedelta(seconds=self.now)

    def cache(self, **options: float) -> ApiKeyCache:
        return ApiKeyCache(
            lookup=self.lookup,
            record_use=self.record_use,
            clock=lambda: self.now,
            wall_clock=self.wall,
            **options,  # type: ignore[arg-type]
        )


def auth(cache: ApiKeyCache, api_key: str) -> KeyOwner | None:
    return asyncio.run(cache.authenticate(api_key))


def test_a_known_key_is_looked_up_once_per_ttl() -> None:
    world = World()
    owner = world.add("sk_a")
    cache = world.cache(ttl_s=4.0)

    assert auth(cache, "sk_a") == owner
    world.now = 3.9
    assert auth(cache, "sk_a") == owner
    assert world.lookups == ["sk_a"]
    world.now = 4.0
    auth(cache, "sk_a")
    assert world.lookups == ["sk_a", "sk_a"]


def test_a_revoked_key_stops_working_once_its_entry_expires() -> None:
    world = World()
    world.add("sk_a")
    cache = world.cache(ttl_s=4.0)
    assert auth(cache, "sk_a") is not None

    del world.keys["sk_a"]  # revoked
    world.now = 4.0

    assert auth(cache, "sk_a") is None


def test_unknown_keys_are_remembered_briefly() -> None:
    world = World()
    cache = world.cache(negative_ttl_s=2.0)

    for _ in range(100):
        assert auth(cache, "sk_bogus") is None
    assert world.lookups == ["sk_bogus"]
    world.now = 2.0
    auth(cache, "sk_bogus")
    assert world.lookups == ["sk_bogus", "sk_bogus"]


def test_last_use_is_written_at_most_once_per_interval() -> None:
    world = World()
    owner = world.add("sk_a")
    cache = world.cache(ttl_s=4.0, use_interval_s=60.0)

    for second in range(0, 130):
        world.now = float(second)
        auth(cache, "sk_a")

    assert world.uses == [
        (owner.key_id, START),
        (owner.key_id, START + timedelta(seconds=60)),
        (owner.key_id, START + timedelta(seconds=120)),
    ]


def test_a_recent_use_written_elsewhere_is_not_written_again() -> None:
    world = World()
    world.now = 100.0
    owner = world.add("sk_a", last_used_at=world.wall() - timedelta(seconds=10))
    cache = world.cache(use_interval_s=60.0)

    auth(cache, "sk_a")
    assert world.uses == []
    world.now = 150.0
    auth(cache, "sk_a")
    assert world.uses == [(owner.key_id, world.wall())]


def test_the_table_is_bounded() -> None:
    world = World()
    cache = world.cache(max_entries=10, negative_ttl_s=60.0)

    for n in range(50):
        auth(cache, f"sk_bogus_{n}")
    auth(cache, "sk_bogus_49")  # still remembered: the newest stay
    auth(cache, "sk_bogus_0")  # forgotten: the oldest went first

    assert world.lookups.count("sk_bogus_49") == 1
    assert world.lookups.count("sk_bogus_0") == 2


def test_unknown_keys_never_push_out_valid_ones() -> None:
    world = World()
    owner = world.add("sk_a")
    cache = world.cache(max_entries=10, negative_ttl_s=60.0)

    assert auth(cache, "sk_a") == owner
    for n in range(500):
        auth(cache, f"sk_bogus_{n}")
    assert auth(cache, "sk_a") == owner

    assert world.lookups.count("sk_a") == 1
    # The unknown ones are remembered in a table a tenth the size: the newest only.
    auth(cache, "sk_bogus_499")
    auth(cache, "sk_bogus_489")
    assert world.lookups.count("sk_bogus_499") == 1
    assert world.lookups.count("sk_bogus_489") == 2


class Gate:
    """Counts what the cache charges each caller, refusing past `allowed`."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.taken: list[str] = []

    def take(self, caller: str) -> None:
        if len(self.taken) >= self.allowed:
            raise PermissionError(caller)
        self.taken.append(caller)

    def give_back(self, caller: str) -> None:
        self.taken.remove(caller)


def test_every_key_not_known_valid_is_charged_to_its_caller_first() -> None:
    world = World()
    owner = world.add("sk_a")
    cache = world.cache(negative_ttl_s=60.0)
    gate = Gate(allowed=2)

    def auth_from(api_key: str, caller: str) -> KeyOwner | None:
        return asyncio.run(cache.authenticate(api_key, caller=caller, gate=gate))

    # Looked up and found: given back. Remembered: not charged at all.
    assert auth_from("sk_a", "1.2.3.4") == owner
    assert auth_from("sk_a", "1.2.3.4") == owner
    assert gate.taken == []
    # Unknown, then remembered as unknown: charged both times.
    assert auth_from("sk_x", "1.2.3.4") is None
    assert auth_from("sk_x", "1.2.3.4") is None
    assert gate.taken == ["1.2.3.4", "1.2.3.4"]
    # Refused by the gate: no lookup.
    with pytest.raises(PermissionError):
        auth_from("sk_y", "1.2.3.4")
    assert world.lookups == ["sk_a", "sk_x"]
    # A valid key is never the gate's to refuse once remembered.
    assert auth_from("sk_a", "1.2.3.4") == owner


def test_a_failing_use_write_does_not_fail_authentication() -> None:
    world = World()
    owner = world.add("sk_a")

    async def broken(key_id: uuid.UUID, at: datetime) -> None:
        raise RuntimeError("database away")

    cache = ApiKeyCache(lookup=world.lookup, record_use=broken, clock=lambda: world.now)

    assert auth(cache, "sk_a") == owner
