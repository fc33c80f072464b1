"""`python -m bench.compare ... --profile`: each scenario once more, under the profiler.

After the measured rounds, each scenario runs again against an API of the first revision
served by `bench/profile_api.py` (the revision's own app in one uvicorn process, sampled
every millisecond by pyinstrument), one process per scenario so that each profile holds
one scenario alone: a warm-up first, then `seconds` of load between the profiler's start
and stop. A capture's authorizations are made before the profiler starts. Each scenario's
call tree, flat list and time by library go to `<output>/<scenario>/` (profile_api's
three files); the profiler slows the process, so only the shares matter.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.loadgen import Request, Target, run_load
from bench.two_step import make_authorizations, pool_size
from tests.support.control.processes import free_port, start_process

WARM_UP = 300
PROFILED = [sys.executable, "-m", "bench.profile_api"]
# (scenario, authorizations to capture) -> the scenario's requests.
Maker = Callable[[str, Sequence[str]], Callable[[int], Request]]


def profile_scenarios(
    tree: Path,
    env: dict[str, str],
    api_key: str,
    scenarios: Sequence[str],
    make: Maker,
    *,
    output: Path,
    log_dir: Path,
    seconds: float,
    concurrency: int,
    capture_per_s: float | None = None,
    warm_up: int = WARM_UP,
) -> dict[str, dict[str, Any]]:
    """Profile each of `scenarios` against `tree`'s app (environment `env`, a tenant's
    `api_key`) after `warm_up` requests; each one's summary (profile_api's, with the
    requests answered meanwhile)."""
    summaries: dict[str, dict[str, Any]] = {}
    for scenario in scenarios:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = start_process(
            f"profiled-api-{scenario}",
            [*PROFILED, "--port", str(port), "--output", str(output / scenario)],
            env=env,
            log_dir=log_dir,
            ready_url=f"{url}/healthz",
            url=url,
            timeout=60,
            cwd=tree,
        )
        try:
            run = Profiled(
                url,
                Target.from_url(url, headers={"authorization": f"Bearer {api_key}"}),
                scenario,
                make,
                seconds=seconds,
                concurrency=concurrency,
            )
            summaries[scenario] = run.profile(capture_per_s, warm_up)
        finally:
            process.stop()
        print(f"profile: {scenario}: {summaries[scenario]['requests']} requests", flush=True)
    return summaries


@dataclass(frozen=True)
class Profiled:
    """One scenario against one profiled API at `url`."""

    url: str
    target: Target
    scenario: str
    make: Maker
    seconds: float
    concurrency: int

    def authorized(self, count: int, tag: str) -> list[str]:
        """`count` authorizations made for a capture run; none for another scenario."""
        if self.scenario != "capture":
            return []
        return make_authorizations(self.target, count, tag, concurrency=self.concurrency)

    def load(self, pool: list[str], total: int) -> int:
        """Up to `total` requests (a capture run: one per authorization); how many answered."""
        measured = asyncio.run(
            run_load(
                self.target,
                self.make(self.scenario, pool),
                total=len(pool) if self.scenario == "capture" else total,
                concurrency=self.concurrency,
                duration_s=self.seconds,
            )
        )
        return measured.answered

    def profile(self, capture_per_s: float | None, warm_up: int) -> dict[str, Any]:
        """`warm_up` requests, then `seconds` of the scenario profiled; profile_api's summary."""
        self.load(self.authorized(warm_up, f"profile-warm-{self.scenario}"), warm_up)
        pool = self.authorized(pool_size(self.seconds, capture_per_s), f"profile-{self.scenario}")
        httpx.post(f"{self.url}/_bench/profile/start", timeout=30).raise_for_status()
        answered = self.load(pool, 10**9)
        summary: dict[str, Any] = httpx.post(f"{self.url}/_bench/profile/stop", timeout=120).json()
        summary["requests"] = answered
        return summary
