"""`python -m bench [--quick] [options]`: run the benchmark, print the table, write results."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench.config import SCENARIO_GROUPS, BenchConfig
from bench.run import run_bench


def _groups(value: str) -> tuple[str, ...]:
    groups = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [group for group in groups if group not in SCENARIO_GROUPS]
    if unknown or not groups:
        raise argparse.ArgumentTypeError(
            f"unknown scenario group {', '.join(unknown) or value!r}; "
            f"choose from {', '.join(SCENARIO_GROUPS)}"
        )
    return groups


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the payments service against its baselines on this machine. "
        "Starts its own PostgreSQL (or a new database on DATABASE_URL), fake provider, API "
        "and workers; every load is bounded by a request count and a duration.",
    )
    parser.add_argument("--quick", action="store_true", help="small counts (about 1-2 minutes)")
    parser.add_argument("--api-workers", type=int, help="uvicorn worker processes (default 1)")
    parser.add_argument("--concurrency", type=int, help="keep-alive connections (default 16)")
    parser.add_argument("--requests", type=int, help="requests in the new-payments scenarios")
    parser.add_argument("--backlog", type=int, help="unknown operations to reconcile")
    parser.add_argument("--preload-rows", type=int, help="rows preloaded for the big-table runs")
    parser.add_argument("--max-scenario-s", type=float, help="time bound of each load run")
    parser.add_argument("--pgbench-s", type=int, help="duration of each pgbench run")
    parser.add_argument("--profile", action="store_true", help="also profile the create path")
    parser.add_argument(
        "--profile-worker",
        action="store_true",
        help="also profile one worker draining a reconcile backlog",
    )
    parser.add_argument(
        "--only",
        type=_groups,
        default=(),
        help=f"comma-separated scenario groups to run: {','.join(SCENARIO_GROUPS)}",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="embedded PostgreSQL without fsync (measures the code, not the disk)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {
        name: value
        for name, value in {
            "api_workers": args.api_workers,
            "concurrency": args.concurrency,
            "new_payments": args.requests,
            "backlog": args.backlog,
            "preload_rows": args.preload_rows,
            "max_scenario_s": args.max_scenario_s,
            "pgbench_s": args.pgbench_s,
        }.items()
        if value is not None
    }
    overrides["profile"] = args.profile
    overrides["profile_worker"] = args.profile_worker
    overrides["only"] = args.only
    overrides["durable"] = not args.no_fsync
    config = BenchConfig.quick(**overrides) if args.quick else BenchConfig.full(**overrides)
    work_dir = Path(tempfile.mkdtemp(prefix="payments-bench-"))
    ok = False
    try:
        _rows, json_path, md_path, violations = run_bench(config, work_dir)
        ok = True
    finally:
        if args.keep_logs or not ok:
            print(f"bench: process logs kept in {work_dir / 'logs'}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(f"\nresults: {json_path}\n         {md_path}")
    return exit_status(violations)


def exit_status(violations: list[str]) -> int:
    """0, or 1 after printing them when a scenario found broken promises (two charges for
    one key, say): a fast result that broke the contract is no result."""
    for violation in violations:
        print(f"bench: VIOLATION {violation}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
