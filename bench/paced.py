"""Requests sent at a steady rate, whatever the answers' pace (an open loop).

Request `i` is due at `start + i / rate`; it goes on the first free connection of a pool.
Its latency runs from when it was due, not from when a connection took it: a server that
falls behind is charged the wait its lateness caused (no coordinated omission). When every
connection is busy the sender waits for one, and that wait is in the latencies too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.loadgen import Connection, HttpError, OnResponse, Request, Target
from bench.stats import Measurement


async def run_paced(
    target: Target,
    make: Callable[[int], Request],
    *,
    rate: float,
    total: int,
    connections: int,
    on_response: OnResponse | None = None,
) -> Measurement:
    """Send `make(0..total-1)` at `rate` a second on up to `connections` connections.

    `make(i)` is called when request `i` is sent (a signature made then is fresh).
    `elapsed_s` runs from the first request's due time to the last answer.
    """
    result = Measurement()
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    opened = [target.connection() for _ in range(connections)]
    await asyncio.gather(*(c.connect() for c in opened))
    for connection in opened:
        pool.put_nowait(connection)
    start = time.perf_counter()
    last_done = start

    async def one(connection: Connection, index: int, due: float) -> None:
        nonlocal last_done
        request = make(index)
        try:
            response = await connection.request(request)
        except HttpError as exc:
            result.errors[str(exc)[:80]] += 1
            return
        finally:
            pool.put_nowait(connection)
        last_done = time.perf_counter()
        result.latencies_s.append(last_done - due)
        result.statuses[response.status] += 1
        if on_response is not None:
            on_response(index, request, response)

    tasks: list[asyncio.Task[None]] = []
    try:
        for index in range(total):
            due = start + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            connection = await pool.get()
            tasks.append(asyncio.create_task(one(connection, index, due)))
        await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(c.close() for c in opened))
    result.elapsed_s = last_done - start
    return result
