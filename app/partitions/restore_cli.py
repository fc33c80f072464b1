"""`payments partitions restore FILE`: an archived partition loaded back (`archive.py`)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psycopg

from app.db.database import conninfo
from app.partitions.archive import ArchiveError, restore
from app.settings import Settings


async def _restore(database_url: str, path: Path) -> tuple[str, int]:
    # A connection of its own, with DATABASE_URL's own options (a search path, say): the
    # restore is one transaction and bounded by no statement timeout.
    conn = await psycopg.AsyncConnection.connect(conninfo(database_url), autocommit=True)
    async with conn:
        return await restore(conn, path)


def restore_command(settings: Settings, path: Path) -> int:
    """Load the archive `path` back as its day's partition; print what was attached."""
    assert settings.database_url is not None
    try:
        partition, rows = asyncio.run(_restore(settings.database_url, path))
    except (ArchiveError, FileNotFoundError) as exc:
        print(f"payments: {exc}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        # The database refused it (the table is not partitioned there, say): nothing was
        # attached, the transaction rolled back.
        print(f"payments: the restore was refused, nothing attached: {exc}", file=sys.stderr)
        return 1
    print(f"{partition}: {rows} rows restored and attached (kept until an operator detaches it)")
    return 0
