"""Keeping the garbage collector's full passes off the request path.

A started process holds about 150,000 long-lived objects (the app, its routes and models,
the libraries' modules), and CPython's oldest-generation collection walks all of them:
measured under load in the API, each such pass stopped the event loop for up to 90 ms,
every request in flight with it, and was most of the p99 of new payments. Once start-up is
done, `freeze_startup()` moves every object tracked so far to the permanent generation
(`gc.freeze`), which no collection walks; later passes walk only what the process made
since. It does not collect first: a full pass at that point finds under a hundred
unreachable objects (kept for good by the freeze, a few kilobytes) and would add 100 ms of
CPU to every start.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """After start-up: exempt everything alive now from every later collection."""
    gc.freeze()
