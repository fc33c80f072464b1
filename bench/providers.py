"""Several providers: what a second provider costs a payment, and what a failover costs.

Three rows, one after the other on the same database and tenant, each on an API warmed
the same way:

- `new payments, one provider`: the run's own API, routed to its one provider (`primary`);
  the baseline of the two below, measured beside them rather than taken from the run's
  first row, so that the machine's drift between scenarios falls on both;
- `new payments, two providers, primary answers`: an API with `PAYMENTS_PROVIDERS` naming
  the same provider and a second one; every payment is charged at the primary, so the row
  measures what routing and a second provider's client cost the single-provider path;
- `new payments, failover, primary refuses each`: the primary answers every charge `503`
  (documented "not processed"), so every payment fails over and is charged at the second
  provider: a refused send, the fenced failover write and a second send per payment.

Each new payment's ledger is checked afterwards: charged once, at the provider the row
says, never at both.
"""

from __future__ import annotations

import json

from bench.loadgen import Target
from bench.scenarios import Bench, log
from bench.system import start_api, start_provider
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process


def two_providers(bench: Bench) -> None:
    """The three rows above; a broken promise (a payment charged at both) fails the run."""
    assert bench.provider.url is not None
    second_dir = bench.log_dir / "second-provider"
    second_dir.mkdir(parents=True, exist_ok=True)
    second = start_provider(second_dir)
    assert second.url is not None
    providers = [
        {"name": "primary", "url": bench.provider.url},
        {"name": "secondary", "url": second.url},
    ]
    env = {**bench.env, "PAYMENTS_PROVIDERS": json.dumps(providers)}
    api = start_api(bench.log_dir, env, workers=bench.config.api_workers)
    processes: list[Process] = [second, api]
    try:
        assert api.url is not None
        routed = Target.from_url(api.url, headers=bench.auth)
        bench.warm_up(routed, bench.new_payment_maker("warm-two"))
        total = bench.config.new_payments
        bench.new_payments("new payments, one provider", "one", total=total)
        trees = bench.trees(second=second)
        trees["app"] = [api.pid]
        bench.load(
            "new payments, two providers, primary answers",
            bench.new_payment_maker("two"),
            total=total,
            target=routed,
            trees=trees,
        )
        faults = FaultInjector(bench.provider.url)
        faults.add("unavailable", times=10 * total)
        try:
            bench.load(
                "new payments, failover, primary refuses each",
                bench.new_payment_maker("failover"),
                total=total,
                target=routed,
                trees=trees,
            )
        finally:
            faults.clear()
        _check_ledgers(bench, FaultInjector(second.url))
    finally:
        for process in reversed(processes):
            process.stop()


def _check_ledgers(bench: Bench, second: FaultInjector) -> None:
    """Every payment of the three rows charged once, where its row says."""
    first = FaultInjector(bench.provider.url or "")
    at_first = _keys(first)
    at_second = _keys(second)
    both = sorted(
        key for key in at_second if key.endswith(":1") and key.removesuffix(":1") in at_first
    )
    if both:
        bench.violations.append(f"{len(both)} payments charged at both providers: {both[:5]}")
    log(f"two providers: {len(at_first)} charges at the primary, {len(at_second)} at the second")
    bench.extra["two_providers"] = {
        "charges_at_primary": len(at_first),
        "charges_at_secondary": len(at_second),
        "charged_at_both": len(both),
    }


def _keys(provider: FaultInjector) -> set[str]:
    """The keys of the succeeded charges at `provider` (each run starts its own providers,
    so a ledger holds only the run's)."""
    return {str(charge["idempotency_key"]) for charge in provider.charges(status="succeeded")}
