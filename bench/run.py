"""One bench run: start the system, run every scenario in order, write the results.

The order matters: the lookups on a small table run before anything fills it, pgbench after
the HTTP scenarios, and the preload of a million rows last, so that the lookups and new
payments after it are the same scenarios on a big table. See bench/scenarios.py.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.config import SCENARIO_GROUPS, BenchConfig
from bench.machine import describe_machine, load_average
from bench.mixed import hot_key_replays, mixed_workload
from bench.providers import two_providers
from bench.report import Row, table, write_results
from bench.scenarios import Bench, log
from bench.system import RESULTS_DIR, bench_database
from tests.support.control.processes import REPO_ROOT

# How long the provider takes to answer a lookup in the second pair of reconcile scenarios:
# a provider's API across the internet answers in about this time.
SLOW_LOOKUP_S = 0.1


def run_bench(config: BenchConfig, work_dir: Path) -> tuple[list[Row], Path, Path, list[str]]:
    """Run every scenario; write the results; return the rows, the two result files and
    the broken promises the scenarios found (empty when none)."""
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    with bench_database(durable=config.durable) as database:
        bench = Bench(config, database, work_dir)
        try:
            version, pg_settings = bench.postgres_description()
            machine = describe_machine(
                REPO_ROOT, postgres_version=version, postgres_settings=pg_settings
            )
            log(f"machine: {machine}")
            bench.warm_up(bench.target, bench.new_payment_maker("warm"))
            wanted = set(config.only or SCENARIO_GROUPS)
            if "baselines" in wanted:
                bench.baseline_insert("lean")
                bench.baseline_insert("orm")
            if "provider" in wanted:
                bench.provider_direct()
            if "payments" in wanted:
                bench.new_payments("new payments", "new", total=config.new_payments)
                bench.new_payments(
                    "new payments, 1 connection",
                    "serial",
                    total=config.serial_payments,
                    concurrency=1,
                )
            if "providers" in wanted:
                two_providers(bench)
            if "replays" in wanted:
                bench.replays()
            if "hotkey" in wanted:
                hot_key_replays(bench)
            if "duplicates" in wanted:
                bench.duplicates()
            if "lookups" in wanted:
                bench.lookups("lookups, small table")
            if "reconcile" in wanted:
                bench.reconcile(1)
                bench.reconcile(2)
                bench.reconcile(1, lookup_delay_s=SLOW_LOOKUP_S)
                bench.reconcile(2, lookup_delay_s=SLOW_LOOKUP_S)
            if "pgbench" in wanted:
                bench.pgbench_baselines()
            if "mixed" in wanted:
                mixed_workload(bench)
            if "preloaded" in wanted:
                bench.preload()
                bench.lookups(f"lookups, +{config.preload_rows:,} rows")
                bench.new_payments(
                    f"new payments, +{config.preload_rows:,} rows", "big", total=config.new_payments
                )
            if config.profile:
                bench.profile(RESULTS_DIR / f"{stamp}-{config.mode}-profile")
            if config.profile_worker:
                bench.reconcile(1, profile=RESULTS_DIR / f"{stamp}-{config.mode}-worker-profile")
        finally:
            bench.close()
    bench.extra["load_average_at_end"] = load_average()
    bench.extra["wall_s"] = round(time.monotonic() - started, 1)
    json_path, md_path = write_results(
        RESULTS_DIR,
        stamp=stamp,
        mode=config.mode,
        config=asdict(config),
        machine=machine,
        rows=bench.rows,
        extra=bench.extra,
    )
    print(table(bench.rows))
    return bench.rows, json_path, md_path, bench.violations
