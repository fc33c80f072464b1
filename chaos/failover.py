"""The database fault of `--failover`: the primary's machine dies, the standby is promoted.

At `failover_start_s` into the fault phase every process of the primary PostgreSQL is
SIGKILLed; `failover_gap_s` later the synchronous standby is promoted and its own
`synchronous_standby_names` cleared, as a failover manager would. The APIs and workers are
not told: they reach the database through the multi-host URL and must find the new primary
on their own (tests/support/control/replication.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.support.control.replication import ReplicatedPostgres


class Failover(threading.Thread):
    """Kills the primary at `at` (wall clock) and promotes the standby `gap_s` later."""

    def __init__(self, pair: ReplicatedPostgres, *, at: float, gap_s: float):
        super().__init__(name="failover", daemon=True)
        self.pair = pair
        self.at = at
        self.gap_s = gap_s
        self.killed_at: float | None = None
        self.promoted_at: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            time.sleep(max(0.0, self.at - time.time()))
            self.pair.kill_primary()
            self.killed_at = time.time()
            time.sleep(self.gap_s)
            self.pair.promote_standby()
            self.promoted_at = time.time()
        except Exception as exc:  # reported as a harness failure, never swallowed
            self.error = f"{type(exc).__name__}: {exc}"

    def as_dict(self) -> dict[str, Any]:
        return {"killed_at": self.killed_at, "promoted_at": self.promoted_at, "error": self.error}
