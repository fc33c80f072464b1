"""Archives of retired partitions, and loading one back.

With PAYMENTS_PARTITION_ARCHIVE_DIR set, a partition past its retention is written there
before it is dropped, as two files named after it:

- `<partition>.csv.gz`: every row, gzip CSV with a header line naming the columns, read by
  one client-side `COPY (SELECT * FROM <partition>) TO STDOUT` (never row by row);
- `<partition>.json`: what loading it back needs: the partitioned table and its column, the
  partition's bound (`FOR VALUES FROM (...) TO (...)`, as PostgreSQL printed it), the
  columns, the row count and the data file's SHA-256.

Both are written under a temporary name, flushed to disk and renamed; the description
last, so a description on disk always names a whole data file. The partition is dropped
only after both are in place (`retention.py`).

`payments partitions restore FILE` (either file) loads one back in one transaction: a new
table of the partition's name shaped as the partitioned table is now (`LIKE`), the rows
copied in by the header's columns (a column added since takes its default), the count and
checksum checked, then attached as that day's partition under its old bound and marked
restored, which keeps it from the retention pass (`holds.py`) until an operator detaches it.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg import sql

from app.db.database import Connection
from app.partitions.holds import RESTORED_MARK
from app.partitions.layout import PartitionedTable, by_name

FORMAT = "payments-partition-archive/1"
_CHUNK = 1 << 20
# A bound as PostgreSQL prints a range partition's of one column: what restore reattaches.
_BOUND = re.compile(r"FOR VALUES FROM \((MINVALUE|'[^']*')\) TO \((MAXVALUE|'[^']*')\)")


class ArchiveError(Exception):
    """An archive that cannot be loaded back as it is: the message says why."""


@dataclass(frozen=True)
class Archived:
    """One partition written to the archive folder."""

    data: Path
    description: Path
    rows: int


def _paths(folder: Path, partition: str) -> tuple[Path, Path]:
    return folder / f"{partition}.csv.gz", folder / f"{partition}.json"


class _Sink:
    """A gzip file being written, flushed to disk when closed."""

    def __init__(self, path: Path) -> None:
        self._raw = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._gzip = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0)

    def write(self, block: bytes) -> None:
        self._gzip.write(block)

    def close(self) -> None:
        self._gzip.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stored:
        while block := stored.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _sync_write(path: Path, payload: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as out:
        out.write(payload)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


async def _copy_out(
    conn: Connection, copy_sql: sql.Composed, temporary: Path, schema: str, partition: str
) -> tuple[str, int]:
    """The partition's rows into `temporary` (gzip CSV): its checksum, and the rows."""
    # The compression and the disk in a thread, a MiB at a time: the worker's other jobs
    # share the event loop.
    sink = await asyncio.to_thread(_Sink, temporary)
    try:
        pending = bytearray()
        async with conn.cursor().copy(copy_sql) as copy:
            async for chunk in copy:
                pending += chunk
                if len(pending) >= _CHUNK:
                    await asyncio.to_thread(sink.write, bytes(pending))
                    pending.clear()
        await asyncio.to_thread(sink.write, bytes(pending))
    finally:
        await asyncio.to_thread(sink.close)
    checksum = await asyncio.to_thread(_sha256, temporary)
    count_sql = sql.SQL("SELECT count(*) FROM {source}").format(
        source=sql.Identifier(schema, partition)
    )
    counted = await (await conn.execute(count_sql)).fetchone()
    return checksum, int(counted[0]) if counted else 0


async def write_archive(
    conn: Connection,
    table: PartitionedTable,
    *,
    schema: str,
    partition: str,
    bound: str,
    folder: Path,
) -> Archived:
    """Write `partition` (attached or not) to `folder`: its rows and its description."""
    data, description = _paths(folder, partition)
    columns_sql = """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
        WHERE a.attrelid = to_regclass(%(name)s) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
    """
    qualified = f"{schema}.{partition}"
    columns = await (await conn.execute(columns_sql, {"name": qualified})).fetchall()
    if not columns:
        raise ArchiveError(f"no table {qualified}")
    temporary = data.with_name(data.name + ".tmp")
    copy_sql = sql.SQL(
        "COPY (SELECT * FROM {source}) TO STDOUT WITH (FORMAT csv, HEADER true)"
    ).format(source=sql.Identifier(schema, partition))
    # A day's rows take as long as they take to read, whatever the pool's statement timeout
    # (set back as the connection returns to the pool).
    await conn.execute("SET statement_timeout = 0")
    try:
        checksum, counted = await _copy_out(conn, copy_sql, temporary, schema, partition)
    finally:
        await conn.execute("RESET statement_timeout")
    os.replace(temporary, data)
    rows = counted
    meta: dict[str, Any] = {
        "format": FORMAT,
        "table": table.table,
        "column": table.column,
        "partition": partition,
        "bound": bound,
        "columns": [{"name": name, "type": kind} for name, kind in columns],
        "rows": rows,
        "data": data.name,
        "sha256": checksum,
        "archived_at": datetime.now(UTC).isoformat(),
    }
    payload = json.dumps(meta, indent=2).encode() + b"\n"
    await asyncio.to_thread(_sync_write, description, payload)
    return Archived(data=data, description=description, rows=rows)


def read_description(path: Path) -> tuple[dict[str, Any], Path]:
    """The description of the archive `path` names (its data file or its description), and
    its data file; `ArchiveError` when either is missing or does not match."""
    name = path.name
    stem = name.removesuffix(".csv.gz").removesuffix(".json")
    description = path.with_name(f"{stem}.json")
    if not description.is_file():
        raise ArchiveError(f"no description {description} beside the archive")
    meta: dict[str, Any] = json.loads(description.read_text())
    if meta.get("format") != FORMAT:
        raise ArchiveError(f"{description}: not a {FORMAT} description")
    data = description.with_name(str(meta["data"]))
    if not data.is_file():
        raise ArchiveError(f"no data file {data} beside its description")
    if _sha256(data) != meta["sha256"]:
        raise ArchiveError(f"{data}: checksum differs from its description's")
    return meta, data


def _header(data: Path) -> list[str]:
    """The columns the data file's header line names."""
    with gzip.open(data, "rb") as source:
        header = source.readline().decode().rstrip("\r\n")
    return [column.strip('"') for column in header.split(",")]


async def restore(conn: Connection, path: Path) -> tuple[str, int]:
    """Load the archive `path` back and attach it as its day's partition, in one
    transaction; (the partition's name, its rows)."""
    meta, data = await asyncio.to_thread(read_description, path)
    table, partition, bound = str(meta["table"]), str(meta["partition"]), str(meta["bound"])
    try:
        entry = by_name(table)
    except KeyError:
        raise ArchiveError(f"{table} is not a partitioned table of the catalogue") from None
    if partition != entry.legacy and entry.day_of(partition) is None:
        raise ArchiveError(f"{partition} is not a partition name of {table}")
    if not _BOUND.fullmatch(bound):
        raise ArchiveError(f"{bound!r} is not a range partition's bound")
    async with conn.transaction():
        exists = await (await conn.execute("SELECT to_regclass(%s)", (partition,))).fetchone()
        if exists is not None and exists[0] is not None:
            raise ArchiveError(f"{partition} exists already: detach and drop it first")
        names = await asyncio.to_thread(_header, data)
        parent = sql.Identifier(table)
        child = sql.Identifier(partition)
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {child} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            ).format(child=child, parent=parent)
        )
        copy_sql = sql.SQL("COPY {child} ({columns}) FROM STDIN WITH (FORMAT csv, HEADER true)")
        columns = sql.SQL(", ").join(sql.Identifier(name) for name in names)
        source = await asyncio.to_thread(gzip.open, data, "rb")
        try:
            async with conn.cursor().copy(copy_sql.format(child=child, columns=columns)) as copy:
                while block := await asyncio.to_thread(source.read, _CHUNK):
                    await copy.write(block)
        finally:
            source.close()
        counted = await (
            await conn.execute(sql.SQL("SELECT count(*) FROM {child}").format(child=child))
        ).fetchone()
        rows = int(counted[0]) if counted else 0
        if rows != int(meta["rows"]):
            raise ArchiveError(f"{data}: {rows} rows loaded, its description says {meta['rows']}")
        await conn.execute(
            sql.SQL("ALTER TABLE {parent} ATTACH PARTITION {child} {bound}").format(
                parent=parent, child=child, bound=sql.SQL(bound)
            )
        )
        mark = f"{RESTORED_MARK} {data.name} at {datetime.now(UTC).isoformat()}"
        await conn.execute(
            sql.SQL("COMMENT ON TABLE {child} IS {mark}").format(
                child=child, mark=sql.Literal(mark)
            )
        )
    return partition, rows
