"""The worker's one loop (`app/jobs/loop.py`) on jobs of the tests' own.

In memory: a pass drains what is due (topping its window up, one last look once idle), never
runs more than its window, claims nothing once stopping is set but lets what runs finish, goes
on past an item that raises, and with patience claims newly due items while a slow one runs.
On PostgreSQL: two loops claiming one table through the shared lease-and-fence rule
(`app/jobs/leases.py`) handle every item once, never one under another's live lease, and an
owner paused past its lease is fenced out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator

import psycopg
import pytest

from app.jobs.leases import new_owner
from app.jobs.loop import Pace, WorkLoop
from tests.support.control.waiting import wait_until

HOLD_S = 5.0


class Memory:
    """Items 0..due-1 are due; each takes `seconds[item]` (0 by default), and an item in
    `holds` runs until its event is set (or HOLD_S has passed: a test that fails shows it in
    what ran when, never hangs)."""

    name = "memory"

    def __init__(self, due: int, *, seconds: dict[int, float] | None = None):
        self.queue = list(range(due))
        self.seconds = seconds or {}
        self.claims: list[int] = []
        self.done: list[int] = []
        self.running = 0
        self.most_running = 0
        self.raises: set[int] = set()
        self.started = asyncio.Event()
        self.finished: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.holds: dict[int, asyncio.Event] = {}

    def add(self, *items: int) -> None:
        self.queue.extend(items)

    async def claim(self, limit: int) -> list[int]:
        self.claims.append(limit)
        taken, self.queue = self.queue[:limit], self.queue[limit:]
        return taken

    async def handle(self, item: int) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.started.set()
        try:
            await asyncio.sleep(self.seconds.get(item, 0))
            if item in self.holds:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.holds[item].wait(), HOLD_S)
            if item in self.raises:
                raise RuntimeError(f"item {item}")
            self.done.append(item)
            self.finished[item].set()
        finally:
            self.running -= 1


def test_a_pass_drains_what_is_due_within_its_window() -> None:
    job = Memory(50, seconds={i: 0.001 * (i % 7) for i in range(50)})
    loop = WorkLoop(job, Pace.windowed(8, 4), stopping=asyncio.Event())

    assert asyncio.run(loop.run()) == 50
    assert sorted(job.done) == list(range(50))
    assert job.most_running == 8
    # Never more than a batch, nor more than there is room for; the last claim finds nothing.
    assert all(1 <= limit <= 4 for limit in job.claims)
    assert job.claims[-1] == 4
    assert not job.queue


def test_a_short_claim_waits_for_what_runs_then_looks_once_more() -> None:
    job = Memory(3)

    async def scenario() -> int:
        job.holds[0] = release = asyncio.Event()
        loop = WorkLoop(job, Pace.windowed(8, 4), stopping=asyncio.Event())
        run = asyncio.create_task(loop.run())
        await job.started.wait()
        job.add(10, 11)  # due while item 0 runs: the last look finds them
        release.set()
        return await run

    assert asyncio.run(scenario()) == 5
    # 3 < 4 asked: no claim until the window is empty, then one that finds the newcomers,
    # and one that finds nothing.
    assert job.claims == [4, 4, 4]
    assert sorted(job.done) == [0, 1, 2, 10, 11]


def test_with_patience_newly_due_items_do_not_wait_for_a_slow_one() -> None:
    job = Memory(1)

    async def scenario() -> None:
        # Item 0 runs until item 1 has finished: without patience item 1 is claimed only
        # once item 0 gives up waiting (HOLD_S), and finishes after it.
        job.holds[0] = job.finished[1]
        loop = WorkLoop(
            job, Pace(window=4, batch=4, refill_at=1, patience_s=0.05), stopping=asyncio.Event()
        )
        run = asyncio.create_task(loop.run())
        await job.started.wait()
        job.add(1)
        await run

    asyncio.run(scenario())
    assert job.done == [1, 0]


def test_stopping_claims_nothing_new_and_lets_what_runs_finish() -> None:
    job = Memory(20)
    stopping = asyncio.Event()

    async def scenario() -> int:
        # The first four run until stopping is set: no slot frees before it.
        release = asyncio.Event()
        job.holds = dict.fromkeys(range(4), release)
        loop = WorkLoop(job, Pace.windowed(4, 4), stopping=stopping)
        run = asyncio.create_task(loop.run())
        await job.started.wait()
        stopping.set()
        release.set()
        total = await run
        await loop.wait_idle()
        return total

    assert asyncio.run(scenario()) == 4
    assert sorted(job.done) == [0, 1, 2, 3]
    assert job.claims == [4]
    assert len(job.queue) == 16


def test_an_item_that_raises_is_logged_and_the_pass_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = Memory(10)
    job.raises = {3, 7}
    loop = WorkLoop(job, Pace.windowed(4, 2), stopping=asyncio.Event())

    with caplog.at_level(logging.ERROR, logger="payments.worker"):
        assert asyncio.run(loop.run()) == 10
    assert sorted(job.done) == [0, 1, 2, 4, 5, 6, 8, 9]
    failed = [r for r in caplog.records if r.getMessage() == "memory: an item failed"]
    assert len(failed) == 2


def test_passes_run_one_at_a_time_and_the_hook_after_each() -> None:
    job = Memory(4, seconds=dict.fromkeys(range(4), 0.02))
    after: list[int] = []

    async def hook() -> None:
        after.append(len(job.done))

    async def scenario() -> list[int]:
        loop = WorkLoop(job, Pace.windowed(2, 2), stopping=asyncio.Event(), after_pass=hook)
        return list(await asyncio.gather(loop.run(), loop.run()))

    # The second pass starts once the first has drained everything: it finds nothing.
    assert asyncio.run(scenario()) == [4, 0]
    assert after == [4, 4]


# On PostgreSQL: the lease and the fence.

_CLAIM = f"""
    WITH picked AS (
        SELECT id FROM loop_items
        WHERE done_by IS NULL AND (lease_expires_at IS NULL OR lease_expires_at <= now())
        ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    )
    UPDATE loop_items SET {new_owner()}
    WHERE id IN (SELECT id FROM picked)
    RETURNING id, fence
"""
# Fenced, as every owner's write: only the owner of the current fence finishes an item.
_FINISH = """
    UPDATE loop_items SET done_by = %(owner)s, done_count = done_count + 1,
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = %(id)s AND fence = %(fence)s RETURNING id
"""


@pytest.fixture
def items_table(database_url: str) -> Iterator[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE loop_items (id int PRIMARY KEY, fence bigint NOT NULL DEFAULT 0,"
            " lease_owner text, lease_expires_at timestamptz, updated_at timestamptz,"
            " done_by text, done_count int NOT NULL DEFAULT 0)"
        )
        try:
            yield database_url
        finally:
            conn.execute("DROP TABLE loop_items")


class Leased:
    """Claims rows of loop_items as `owner`; checks while handling that it alone holds one."""

    name = "leased"

    def __init__(
        self,
        url: str,
        owner: str,
        *,
        lease_s: float = 30,
        pause_s: float = 0.0,
        hold: asyncio.Event | None = None,
    ):
        self.url = url
        self.owner = owner
        self.lease_s = lease_s
        self.pause_s = pause_s
        # When given: each item is held (after its claim, before its finish) until it is set.
        self.hold = hold
        self.claimed = asyncio.Event()
        self.finished: list[int] = []
        self.fenced_out: list[int] = []
        self.overlaps: list[int] = []

    async def claim(self, limit: int) -> list[tuple[int, int]]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            params = {"owner": self.owner, "lease_s": self.lease_s, "limit": limit}
            rows = await (await conn.execute(_CLAIM, params)).fetchall()
        if rows:
            self.claimed.set()
        return [(row[0], row[1]) for row in rows]

    async def handle(self, item: tuple[int, int]) -> None:
        item_id, fence = item
        await asyncio.sleep(self.pause_s)
        if self.hold is not None:
            await self.hold.wait()
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            holder = await (
                await conn.execute("SELECT lease_owner FROM loop_items WHERE id = %s", (item_id,))
            ).fetchone()
            if holder is not None and holder[0] not in (None, self.owner):
                self.overlaps.append(item_id)
            params = {"owner": self.owner, "id": item_id, "fence": fence}
            row = await (await conn.execute(_FINISH, params)).fetchone()
        (self.finished if row is not None else self.fenced_out).append(item_id)


async def _lease_run_out(url: str, item_id: int) -> None:
    """Return once the item's lease has run out by the database's clock."""

    def run_out() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT lease_expires_at <= now() FROM loop_items WHERE id = %s", (item_id,)
            ).fetchone()
        return row is not None and bool(row[0])

    await asyncio.to_thread(wait_until, run_out, timeout=10, message="the lease to run out")


def _run(*loops: WorkLoop[tuple[int, int]]) -> list[int]:
    async def together() -> list[int]:
        return list(await asyncio.gather(*(loop.run() for loop in loops)))

    return asyncio.run(together())


def test_two_loops_share_a_table_each_item_handled_once_under_its_lease(
    items_table: str,
) -> None:
    with psycopg.connect(items_table, autocommit=True) as conn:
        conn.execute("INSERT INTO loop_items (id) SELECT generate_series(1, 200)")
        # One row another owner holds a live lease on: neither loop may take it.
        conn.execute(
            "UPDATE loop_items SET lease_owner = 'elsewhere', fence = 1,"
            " lease_expires_at = now() + interval '1 minute' WHERE id = 200"
        )
    jobs = [Leased(items_table, f"worker:{n}", pause_s=0.002) for n in range(2)]
    stopping = asyncio.Event()
    totals = _run(*(WorkLoop(job, Pace.windowed(8, 4), stopping=stopping) for job in jobs))

    assert sum(totals) == 199
    assert sorted(jobs[0].finished + jobs[1].finished) == list(range(1, 200))
    assert not any(job.overlaps or job.fenced_out for job in jobs)
    with psycopg.connect(items_table, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT done_count, count(*) FROM loop_items GROUP BY done_count ORDER BY 1"
        ).fetchall()
        held = conn.execute("SELECT lease_owner, fence FROM loop_items WHERE id = 200").fetchone()
    assert counts == [(0, 1), (1, 199)]
    assert held == ("elsewhere", 1)


def test_an_owner_paused_past_its_lease_is_fenced_out(items_table: str) -> None:
    with psycopg.connect(items_table, autocommit=True) as conn:
        conn.execute("INSERT INTO loop_items (id) VALUES (1)")

    async def scenario() -> tuple[Leased, Leased]:
        # The slow owner is held after its claim until the fast one has finished the item.
        resume = asyncio.Event()
        slow = Leased(items_table, "worker:slow", lease_s=0.2, hold=resume)
        fast = Leased(items_table, "worker:fast")
        stopping = asyncio.Event()
        first = asyncio.create_task(WorkLoop(slow, Pace.windowed(1, 1), stopping=stopping).run())
        await slow.claimed.wait()
        await _lease_run_out(items_table, 1)
        await WorkLoop(fast, Pace.windowed(1, 1), stopping=stopping).run()
        resume.set()
        await first
        return slow, fast

    slow, fast = asyncio.run(scenario())

    assert (fast.finished, slow.fenced_out, slow.finished) == ([1], [1], [])
