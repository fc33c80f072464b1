"""Which tenant an API key speaks for, remembered briefly in each process.

Every request names its key, and asking the database each time costs a round trip. Answers
are kept for `ttl_s` (4 s), so a revoked key stops working on every process within 5 s.
Entries are keyed by the key's hash, never the key, and the table is bounded
(`max_entries`, `PAYMENTS_API_KEY_CACHE_SIZE`): when full, the oldest entries go first.

Unknown keys are remembered apart, for `negative_ttl_s`, in a table of their own a tenth
that size: a flood of made-up tokens can only push out other made-up tokens, never a key in
force. What bounds the lookups such a flood costs is the limit on requests without a valid
key (`unauthenticated.py`): a lookup is asked of `gate` first, and told when the key was
found after all.

A key's last use is written at most once per `use_interval_s` per key and process, not on
every request.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from app.clock import utcnow
from app.tenants.keys import hash_api_key
from app.tenants.repository import KeyOwner

logger = logging.getLogger("payments.tenants")

Lookup = Callable[[str], Awaitable[KeyOwner | None]]
RecordUse = Callable[[uuid.UUID, datetime], Awaitable[None]]


class LookupGate(Protocol):
    """What a key that is not known to be valid costs its caller (`unauthenticated.py`)."""

    def take(self, caller: str, /) -> None:
        """Count it against `caller`; raises to refuse it."""

    def give_back(self, caller: str, /) -> None:
        """It was a valid key after all."""


@dataclass(frozen=True)
class _Entry:
    owner: KeyOwner
    expires_at: float


class ApiKeyCache:
    """Authenticates API keys through `lookup`, remembering answers for a few seconds."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        record_use: RecordUse,
        ttl_s: float = 4.0,
        negative_ttl_s: float = 2.0,
        use_interval_s: float = 60.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._lookup = lookup
        self._record_use = record_use
        self._ttl_s = ttl_s
        self._negative_ttl_s = negative_ttl_s
        self._use_interval_s = use_interval_s
        self._max_entries = max_entries
        self._max_unknown = max(1, max_entries // 10)
        self._clock = clock
        self._wall_clock = wall_clock
        self._entries: dict[str, _Entry] = {}
        # Unknown keys' hashes, and until when (monotonic) they are known to be unknown.
        self._unknown: dict[str, float] = {}
        # When (monotonic) each key's last use was last written, by this process or, as far
        # as a lookup told us, by another.
        self._use_written: dict[uuid.UUID, float] = {}

    async def authenticate(
        self, api_key: str, *, caller: str = "", gate: LookupGate | None = None
    ) -> KeyOwner | None:
        """Who `api_key` speaks for, or None when it is not a key in force.

        A key not remembered as valid (unknown, or not remembered at all) is first counted
        by `gate` against `caller`, which may refuse it by raising; a key then found is
        given back."""
        now = self._clock()
        key_hash = hash_api_key(api_key)
        entry = self._entries.get(key_hash)
        if entry is not None and entry.expires_at > now:
            owner = entry.owner
        else:
            if gate is not None:
                gate.take(caller)
            found = await self._look_up(api_key, key_hash, now)
            if found is None:
                return None
            if gate is not None:
                gate.give_back(caller)
            owner = found
        await self._note_use(owner.key_id, now)
        return owner

    async def _look_up(self, api_key: str, key_hash: str, now: float) -> KeyOwner | None:
        """The key's owner from the database, unless it is remembered as unknown."""
        unknown_until = self._unknown.get(key_hash)
        if unknown_until is not None and unknown_until > now:
            return None
        owner = await self._lookup(api_key)
        if owner is None:
            self._remember_unknown(key_hash, now + self._negative_ttl_s)
            return None
        self._remember(key_hash, _Entry(owner, now + self._ttl_s))
        if owner.last_used_at is not None:
            age = (self._wall_clock() - owner.last_used_at).total_seconds()
            written = self._use_written.get(owner.key_id)
            if written is None or now - age > written:
                self._use_written[owner.key_id] = now - max(0.0, age)
        return owner

    def _remember(self, key_hash: str, entry: _Entry) -> None:
        self._unknown.pop(key_hash, None)
        self._entries.pop(key_hash, None)
        while len(self._entries) >= self._max_entries:
            # Oldest first: dicts keep insertion order, and a refreshed entry is re-inserted.
            del self._entries[next(iter(self._entries))]
        self._entries[key_hash] = entry
        if len(self._use_written) > self._max_entries:
            self._use_written.clear()

    def _remember_unknown(self, key_hash: str, until: float) -> None:
        self._entries.pop(key_hash, None)
        self._unknown.pop(key_hash, None)
        while len(self._unknown) >= self._max_unknown:
            del self._unknown[next(iter(self._unknown))]
        self._unknown[key_hash] = until

    async def _note_use(self, key_id: uuid.UUID, now: float) -> None:
        written = self._use_written.get(key_id)
        if written is not None and now - written < self._use_interval_s:
            return
        self._use_written[key_id] = now
        try:
            await self._record_use(key_id, self._wall_clock())
        except Exception:
            # Bookkeeping only: the request itself is authenticated either way.
            logger.warning("could not record an API key's last use", exc_info=True)
