"""Both sides of one record type on one day, at every provider, paired for judging.

Each provider's listing of the day and our rows of the day, paired by the key each provider
holds a record under (`run.py`'s docstring, step 3): ours expected there, theirs, and the
strays (`strays.py`); a row of ours the listing lacks is looked up by its key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TypeVar

from app.db.database import Database
from app.settlement import repository
from app.settlement.books import BooksUnavailable, ProviderBooks, TheirRecord
from app.settlement.matching import OurRecord
from app.settlement.rows import RecordType
from app.settlement.strays import parse_key
from app.settlement.summary import Summary

T = TypeVar("T")

# Lookups by key under way at once, for the rows of ours the day's listing lacks.
LOOKUP_CONCURRENCY = 16


@dataclass
class Side:
    """One record type's pairs at one provider, as the run builds them."""

    record_type: RecordType
    provider: str
    # By the key this provider holds it under.
    theirs: dict[str, TheirRecord]
    # Ours expected here, by the key this provider holds it under (`OurRecord.key`).
    ours: dict[str, OurRecord]
    # Records of theirs under another key of ours: that record of ours, and the attempt the
    # key names.
    strays: dict[str, tuple[OurRecord, int]] = field(default_factory=dict)

    def owner(self, key: str) -> OurRecord | None:
        """Our record `key` is compared against here, if any."""
        stray = self.strays.get(key)
        return stray[0] if stray is not None else self.ours.get(key)


async def _lookup_missing(
    books: ProviderBooks, side: Side, keys: Sequence[str]
) -> dict[str, TheirRecord]:
    gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def find(key: str) -> tuple[str, TheirRecord | None]:
        async with gate:
            return key, await books.find(side.record_type, key)

    found = await asyncio.gather(*(find(key) for key in keys))
    return {key: record for key, record in found if record is not None}


async def read_sides(
    db: Database,
    books: Sequence[ProviderBooks],
    record_type: RecordType,
    day: date,
    summary: Summary,
) -> tuple[list[Side], int]:
    """Every provider's side of `record_type` on `day`, and how many records of ours were
    made that day."""
    listed = await all_of(named(one, books, one.created_on(record_type, day)) for one in books)
    theirs_by_side = [{record.provider_key: record for record in records} for records in listed]
    names = {one.name for one in books}
    async with db.connection() as conn:
        made = await repository.ours_created_on(conn, record_type, day)
        ours_by_key = {record.provider_key: record for record in made}
        sides = [
            Side(
                record_type,
                one.name,
                theirs,
                {record.key: record for record in made if record.provider == one.name},
            )
            for one, theirs in zip(books, theirs_by_side, strict=True)
        ]
        # Keys of ours the day's rows of ours do not explain: the rows they belong to.
        parsed: dict[tuple[int, str], tuple[str, int]] = {}
        for n, side in enumerate(sides):
            for key in side.theirs:
                if key not in side.ours and (found := parse_key(record_type, key)) is not None:
                    parsed[n, key] = found
        strangers = sorted({base for base, _ in parsed.values()} - set(ours_by_key))
        elsewhere = await repository.ours_by_key(conn, record_type, strangers)
    summary.unconfigured += sum(1 for record in made if record.provider not in names)
    for n, side in enumerate(sides):
        for key in [key for key in side.theirs if key not in side.ours]:
            if (n, key) not in parsed:
                del side.theirs[key]
                summary.foreign += 1
                continue
            base, attempt = parsed[n, key]
            ours = ours_by_key.get(base) or elsewhere.get(base)
            if ours is None:
                continue  # no row of ours at all: judged here
            if key == ours.key and side.provider == ours.provider:
                # Ours, made on another day: that day's run pairs it (its lookup finds this).
                del side.theirs[key]
                summary.other_days += 1
                continue
            side.strays[key] = (ours, attempt)

    async def look_up(one: ProviderBooks, side: Side) -> None:
        unlisted = [key for key in side.ours if key not in side.theirs]
        summary.looked_up += len(unlisted)
        side.theirs.update(await named(one, books, _lookup_missing(one, side, unlisted)))

    await all_of(look_up(one, side) for one, side in zip(books, sides, strict=True))
    return sides, len(made)


async def all_of(reads: Iterable[Awaitable[T]]) -> list[T]:
    """Each read's result, the providers' read at once; the first failure is raised once
    every read has ended (none is left running against a client about to close)."""
    done: list[T] = []
    for result in await asyncio.gather(*reads, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    return done


async def named(one: ProviderBooks, books: Sequence[ProviderBooks], read: Awaitable[T]) -> T:
    """`read`, its failure naming the provider when there are several."""
    try:
        return await read
    except BooksUnavailable as exc:
        if len(books) == 1:
            raise
        raise BooksUnavailable(f"provider {one.name}: {exc}") from exc
