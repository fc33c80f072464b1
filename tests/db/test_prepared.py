"""Every statement the service sends is prepared on its connection at its first use.

psycopg's default waits for five uses per connection (and per parameter types), so a new
pool parsed and planned the service's CTE statements hundreds of times before preparing
them (`app/db/database.py`).
"""

from __future__ import annotations

import asyncio

from app.db.database import open_database
from app.settings import Settings


async def _prepared_after_one_use(url: str) -> list[str]:
    settings = Settings.model_validate({"DATABASE_URL": url, "db_pool_size": 1})
    async with (
        open_database(settings, application_name="prepared-test") as db,
        db.connection() as conn,
    ):
        await conn.execute("SELECT %s::int + 1 AS answer", (41,))
        cursor = await conn.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in await cursor.fetchall()]


def test_a_statement_is_prepared_at_its_first_use(database_url: str) -> None:
    statements = asyncio.run(_prepared_after_one_use(database_url))

    assert any("AS answer" in statement for statement in statements), statements
