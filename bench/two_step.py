"""The two-step payments' requests, as `bench.compare` measures them beside a one-step one.

`authorize`: `POST /payments` with `"capture": "manual"`, a new key each, the body otherwise
the one-step payment's (`bench.scenarios.payment_body`), so that the two differ by the
capture mode only. `capture`: `POST /payments/{id}/captures` with `{}` (all that is
capturable: a whole capture), a new key each, of an authorization made just before the
measured run (`make_authorizations`, outside its window: its CPU is not the capture's).

A capture run is bounded by its authorizations as well as by time: `pool_size` makes enough
for the run's seconds at the rate captures were last answered, with a margin.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence

from bench.loadgen import Request, Response, Target, run_load
from bench.scenarios import payment_body, post_payment

# Captures a second assumed before any was measured; and the share made beyond the estimate.
GUESS_PER_S = 600.0
MARGIN = 1.25


def authorization_body(index: int, prefix: str) -> bytes:
    """`payment_body(index, prefix)`, authorize only: `"capture": "manual"` added."""
    body = json.loads(payment_body(index, prefix))
    body["capture"] = "manual"
    return json.dumps(body, separators=(",", ":")).encode()


def authorizations(tag: str) -> Callable[[int], Request]:
    """Authorization `i` of the keys tagged `tag`: always the same key and body for `i`."""
    return lambda i: post_payment(f"{tag}-{i}", authorization_body(i, tag))


def post_capture(payment_id: str, key: str) -> Request:
    """A whole capture of payment `payment_id` (an empty body: all that is capturable)."""
    return Request(
        "POST",
        f"/payments/{payment_id}/captures",
        b"{}",
        {"content-type": "application/json", "idempotency-key": key},
    )


def captures(payment_ids: Sequence[str], tag: str) -> Callable[[int], Request]:
    """Capture `i`: of the `i`th authorization, under a key of its own."""
    return lambda i: post_capture(payment_ids[i], f"{tag}-{i}")


def pool_size(seconds: float, per_s: float | None) -> int:
    """How many authorizations a capture run of `seconds` needs: its captures at `per_s` (the
    rate last measured; `GUESS_PER_S` before any), and `MARGIN` more."""
    return max(100, math.ceil(seconds * (per_s or GUESS_PER_S) * MARGIN))


def make_authorizations(target: Target, count: int, tag: str, *, concurrency: int) -> list[str]:
    """Make `count` authorizations through `target`'s API; the ids of those it authorized."""
    made: list[str] = []

    def keep(_index: int, _request: Request, response: Response) -> None:
        if response.status == 201:
            payment = json.loads(response.body)
            if payment["status"] == "AUTHORIZED":
                made.append(payment["payment_id"])

    asyncio.run(
        run_load(
            target,
            authorizations(tag),
            total=count,
            concurrency=concurrency,
            duration_s=max(300.0, count / 10),
            on_response=keep,
        )
    )
    return made
