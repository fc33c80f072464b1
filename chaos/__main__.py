"""`python -m chaos [--short] [options]`: a chaos run; exit status 1 on any violation."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from app.db.migrate import upgrade_head
from chaos.config import ChaosConfig
from chaos.report import ChaosReport
from chaos.run import run_chaos
from tests.support.control.database import test_database
from tests.support.control.replication import replicated_postgres


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description="Payments under faults: clients with retries, two APIs, two workers, "
        "provider faults, SIGKILL and SIGSTOP of processes; then checks that every payment "
        "happened exactly once. Uses an embedded PostgreSQL, or a new database on the "
        "server at DATABASE_URL.",
    )
    parser.add_argument("--short", action="store_true", help="the test suite's short run")
    parser.add_argument("--duration", type=float, help="seconds of faults")
    parser.add_argument(
        "--outage", type=float, help="seconds of provider outage within the faults (0: none)"
    )
    parser.add_argument(
        "--outage-at", type=float, help="when the outage starts, in seconds (default: centred)"
    )
    parser.add_argument("--converge", type=float, help="seconds allowed to converge")
    parser.add_argument("--clients", type=int, help="client processes")
    parser.add_argument("--tasks", type=int, help="concurrent payments per client process")
    parser.add_argument("--max-requests", type=int, help="requests per client process")
    parser.add_argument("--seed", type=int, help="random seed of clients and schedule")
    parser.add_argument("--apis", type=int, help="API processes (at least 2)")
    parser.add_argument("--workers", type=int, help="worker processes (at least 2)")
    parser.add_argument(
        "--failover",
        action="store_true",
        help="run on a primary with a synchronous standby; kill the primary during the "
        "faults and promote the standby (always embedded servers)",
    )
    parser.add_argument(
        "--failover-at", type=float, help="when the primary dies, in seconds (default: a third in)"
    )
    parser.add_argument(
        "--providers",
        type=int,
        choices=(1, 2),
        help="payment providers: 2 for a primary that refuses, hangs and declines about 30%% "
        "of its charge calls and a secondary the payments fail over to (default 1)",
    )
    parser.add_argument(
        "--two-step",
        type=float,
        help="the share of intents that are manual payments, then captured, voided or left "
        "to lapse (default: 1/3 with one provider, 0 with two)",
    )
    parser.add_argument(
        "--capture-window",
        type=int,
        help="seconds a manual payment's hold stays open (default 45, short 20)",
    )
    parser.add_argument(
        "--no-notifications",
        action="store_true",
        help="the providers send no notifications (and no notification fault is armed)",
    )
    parser.add_argument(
        "--notified-recheck",
        type=float,
        help="PAYMENTS_NOTIFIED_RECHECK_S of the APIs and workers while the providers notify "
        "(default 5)",
    )
    parser.add_argument("--keep", action="store_true", help="keep logs and history")
    parser.add_argument(
        "--results",
        type=Path,
        help="also write the report (report.json, summary.txt, report.png) into this folder, "
        "e.g. chaos/results/NAME (ignored by git: `git add -f` the summary to keep it)",
    )
    return parser


def save_results(report: ChaosReport, work_dir: Path, folder: Path) -> None:
    """Copy what a run measured into `folder`: its JSON report, the summary table, the plot."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.txt").write_text(report.summary() + "\n")
    for name in ("report.json", "report.png"):
        if (work_dir / name).exists():
            shutil.copyfile(work_dir / name, folder / name)
    print(f"chaos: report, summary and plot written to {folder}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = {
        name: value
        for name, value in {
            "duration_s": args.duration,
            "converge_s": args.converge,
            "outage_s": args.outage,
            "outage_at_s": args.outage_at,
            "clients": args.clients,
            "tasks_per_client": args.tasks,
            "max_requests_per_client": args.max_requests,
            "seed": args.seed,
            "apis": args.apis,
            "workers": args.workers,
            "failover_at_s": args.failover_at,
            "providers": args.providers,
            "two_step_share": args.two_step,
            "capture_window_s": args.capture_window,
            "notified_recheck_s": args.notified_recheck,
        }.items()
        if value is not None
    }
    if args.failover:
        overrides["failover"] = True
    if args.no_notifications:
        overrides["notifications"] = False
    if (args.providers or 1) > 1 and args.outage is None:
        # The primary's fault mix is the two-provider run's provider fault: no outage unless
        # asked for (it would stop the mix while it lasts).
        overrides["outage_s"] = 0.0
    if args.two_step is not None and not 0 <= args.two_step <= 1:
        parser.error("--two-step must be between 0 and 1")
    if args.notified_recheck is not None and not 0 <= args.notified_recheck <= 86400:
        parser.error("--notified-recheck must be between 0 and 86400")
    if args.capture_window is not None and args.capture_window < 1:
        parser.error("--capture-window must be at least 1")
    if min(args.apis or 2, args.workers or 2) < 2:
        parser.error("--apis and --workers must be at least 2")
    config = ChaosConfig.short(**overrides) if args.short else ChaosConfig.long(**overrides)
    work_dir = Path(tempfile.mkdtemp(prefix="payments-chaos-"))
    if config.failover:
        # Its own primary and standby: a shared server cannot be killed and promoted.
        with replicated_postgres("payments_chaos") as pair:
            upgrade_head(pair.url)
            report = run_chaos(config, pair.url, work_dir, replicated=pair)
    else:
        with test_database(os.environ.get("DATABASE_URL") or None, work_dir) as database_url:
            report = run_chaos(config, database_url, work_dir)
    print(report.summary())
    if args.results is not None:
        save_results(report, work_dir, args.results)
    if report.ok and not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    elif not report.ok:
        print(f"chaos: logs, history and report kept in {work_dir}", file=sys.stderr)
    if report.violations or report.harness_failures:
        return 1
    return 0 if report.ok else 2


if __name__ == "__main__":
    raise SystemExit(main())
