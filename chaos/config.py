"""The sizes, timings and settings of one chaos run; `short()` for the test suite."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ChaosConfig:
    """Every bound of a run: faults last `duration_s`, convergence at most `converge_s`."""

    duration_s: float = 300.0
    converge_s: float = 120.0
    clients: int = 4
    tasks_per_client: int = 4
    max_requests_per_client: int = 20_000
    seed: int = 1
    # Process faults: the pause between two of them, and how long a SIGSTOP lasts.
    process_fault_gap_s: float = 0.5
    api_pause_s: float = 3.0
    # A paused worker sleeps past its lease, so another owner takes over and the paused one
    # must be fenced out when it wakes.
    worker_pause_extra_s: float = 1.5
    # How long to wait for a fault's window (requests in flight, a rule used up).
    window_wait_s: float = 8.0
    # Service settings: short timeouts so that recovery happens within the run.
    provider_timeout_s: float = 2.0
    lease_s: float = 5.0
    reconcile_interval_s: float = 0.5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 2.0
    client_timeout_s: float = 6.0
    # Failpoints widen the windows between claim, provider call and record.
    api_failpoints: str = "after_claim=0.02,before_record=0.02"
    worker_failpoints: str = "after_claim=0.5,before_record=0.5,webhook_before_record=0.2"
    # The long provider outage: for `outage_s` seconds (0: none) from `outage_at_s` into the
    # fault phase (None: in its middle), every charge hangs for `outage_hang_s`, past the
    # provider timeout. The breaker settings are given to every API and worker process, so
    # that the breaker opens and closes again within the run.
    outage_s: float = 25.0
    outage_at_s: float | None = None
    outage_hang_s: float = 3.0
    breaker_failures: int = 5
    breaker_cooldown_s: float = 5.0
    # How often each API's `/metrics` is read for its breaker state.
    breaker_sample_s: float = 0.25
    # How many API and worker processes share the database (at least 2 each: a fault takes
    # one down while the others serve).
    apis: int = 2
    workers: int = 2
    # Each process's PostgreSQL pool (None: the service's default): more processes on a
    # shared server need smaller pools to stay under its max_connections.
    db_pool_size: int | None = None
    # Database failover (`--failover`): the run's database is a primary with a synchronous
    # standby; `failover_at_s` into the fault phase the primary's machine dies (every
    # PostgreSQL process SIGKILLed) and `failover_gap_s` later the standby is promoted.
    failover: bool = False
    failover_at_s: float | None = None
    failover_gap_s: float = 2.0
    # Payment providers (`--providers`): 1, the usual run; 2, a `primary` and a `secondary`
    # (`PAYMENTS_PROVIDERS`, every payment routed primary then secondary), the primary
    # refusing, hanging and declining about `primary_fault_share` of its charge calls instead
    # of the usual rotation of provider faults, the secondary answering every call
    # (chaos/providers.py).
    providers: int = 1
    primary_fault_share: float = 0.3
    # The settlement pass after the checks (chaos/settlement.py); a test may leave it out.
    settle: bool = True
    # Two-step payments (chaos/two_step.py): the share of intents that are manual payments,
    # each then captured, voided, raced or left to lapse (None: a third with one provider;
    # none with two, whose fault mix is measured on charge calls). Every API and worker gets
    # a capture window short enough that holds lapse within the run
    # (`PAYMENTS_CAPTURE_WINDOW_S`), and the workers an expiry pass every
    # `expire_interval_s` (`PAYMENTS_EXPIRE_INTERVAL_S`), so that lapsed holds expire at once.
    two_step_share: float | None = None
    capture_window_s: int = 45
    expire_interval_s: float = 1.0
    # Provider notifications (chaos/notifications.py): every provider notifies an API, signed
    # with a secret of the run; the notification faults (chaos/notify_faults.py) are armed
    # one rule at a time, with `notify_gap_s` (drawn between the two) without one between
    # rules. While they flow, recovery checks an unknown operation after at least
    # `notified_recheck_s` (PAYMENTS_NOTIFIED_RECHECK_S): polling is the safety net.
    notifications: bool = True
    notify_gap_s: tuple[float, float] = (0.5, 2.0)
    notified_recheck_s: float = 5.0

    @classmethod
    def short(cls, **overrides: Any) -> ChaosConfig:
        """The test-suite run: about a minute on a small machine."""
        base = cls(
            duration_s=40.0,
            converge_s=45.0,
            clients=3,
            tasks_per_client=3,
            max_requests_per_client=600,
            outage_s=7.0,
            breaker_failures=3,
            breaker_cooldown_s=2.0,
            capture_window_s=20,
            # Every notification fault within the short phase, around the outage's calm.
            notify_gap_s=(0.2, 0.8),
        )
        return replace(base, **overrides)

    @classmethod
    def long(cls, **overrides: Any) -> ChaosConfig:
        """The documented long run: five minutes of faults."""
        return replace(cls(), **overrides)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def manual_share(self) -> float:
        """The share of intents that are manual payments (see `two_step_share`)."""
        if self.two_step_share is not None:
            return self.two_step_share
        return 1 / 3 if self.providers == 1 else 0.0

    @property
    def worker_pause_s(self) -> float:
        return self.lease_s + self.worker_pause_extra_s

    @property
    def failover_start_s(self) -> float:
        """When the primary dies, in seconds into the fault phase (default: a third in)."""
        if self.failover_at_s is not None:
            return self.failover_at_s
        return self.duration_s / 3

    @property
    def outage_window(self) -> tuple[float, float] | None:
        """When the outage starts and ends, in seconds into the fault phase; None without
        one. It always ends before the phase does, so that traffic closes the breakers."""
        if self.outage_s <= 0:
            return None
        length = min(self.outage_s, self.duration_s / 2)
        start = (self.duration_s - length) / 2 if self.outage_at_s is None else self.outage_at_s
        start = max(0.0, min(start, self.duration_s - length - self.duration_s / 4))
        return start, start + length

    @property
    def outage_calm_s(self) -> float:
        """No provider rule for this long before and after the outage: long enough for an
        open breaker to probe and close, so that it is the outage that opens it, and its
        end that closes it (the rotation's faults would fail the probes)."""
        return self.breaker_cooldown_s + 1.0
