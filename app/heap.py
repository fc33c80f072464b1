"""Keeping the garbage collector's full passes off the request path.

A started process holds about 150,000 long-lived objects (the app, its routes and models,
the libraries' modules), and CPython's oldest-generation collection walks all of them:
measured under load in the API, each such pass stopped the event loop for up to 90 ms,
every request in flight with it, and was most of the p99 of new payments. Once start-up is
done, `settle()` collects what start-up left behind and moves everything that survived to
the permanent generation (`gc.freeze`), which no collection walks; later passes walk only
what the process made since. Nothing is kept alive that was not already.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """After start-up: collect once, then exempt the survivors from every later pass."""
    gc.collect()
    gc.freeze()
