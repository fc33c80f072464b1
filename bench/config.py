"""The sizes and bounds of a bench run: `quick()` (a minute or two) and `full()`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# The groups `--only` can pick, in the order a run takes them.
SCENARIO_GROUPS = (
    "baselines",
    "provider",
    "payments",
    "providers",
    "replays",
    "hotkey",
    "duplicates",
    "lookups",
    "reconcile",
    "pgbench",
    "mixed",
    "preloaded",
)


@dataclass(frozen=True)
class BenchConfig:
    """Sizes and bounds of one run; every load is bounded by a count and a duration."""

    mode: str
    api_workers: int
    concurrency: int
    max_scenario_s: float
    warmup: int
    baseline_requests: int
    provider_requests: int
    new_payments: int
    serial_payments: int
    replays: int
    duplicate_groups: int
    duplicate_group_size: int
    lookups: int
    backlog: int
    pgbench_s: int
    preload_rows: int
    profile: bool
    profile_requests: int
    durable: bool
    # Scenario groups to run (`SCENARIO_GROUPS`); empty means all of them.
    only: tuple[str, ...] = ()
    # Also run a one-worker reconcile under the profiler (`bench/profile_worker.py`).
    profile_worker: bool = False

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        values: dict[str, Any] = {
            "mode": "quick",
            "api_workers": 1,
            "concurrency": 16,
            "max_scenario_s": 6.0,
            "warmup": 100,
            "baseline_requests": 1000,
            "provider_requests": 1000,
            "new_payments": 400,
            "serial_payments": 60,
            "replays": 600,
            "duplicate_groups": 60,
            "duplicate_group_size": 4,
            "lookups": 600,
            "backlog": 100,
            "pgbench_s": 3,
            "preload_rows": 50_000,
            "profile": False,
            "profile_requests": 600,
            "durable": True,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def full(cls, **overrides: Any) -> BenchConfig:
        values = asdict(cls.quick())
        values.update(
            {
                "mode": "full",
                "max_scenario_s": 60.0,
                "warmup": 200,
                "baseline_requests": 10_000,
                "provider_requests": 10_000,
                "new_payments": 5000,
                "serial_payments": 300,
                "replays": 10_000,
                "duplicate_groups": 1000,
                "lookups": 10_000,
                "backlog": 1000,
                "pgbench_s": 20,
                "preload_rows": 1_000_000,
                "profile_requests": 3000,
            }
        )
        values.update(overrides)
        return cls(**values)
