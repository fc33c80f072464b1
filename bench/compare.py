"""`python -m bench.compare BEFORE AFTER`: two revisions of the API, measured side by side.

On this machine the same code measures up to a third apart from one full run to the next,
more than most single steps gain. A comparison therefore runs both revisions at once, each
its own API process on one database, fake provider and tenant, and alternates the same load
between them, round after round: whatever the machine does meanwhile falls on both. The
first round warms both up and is not counted; the table gives every round, and the medians.

    python -m bench.compare HEAD~1 HEAD                       # replays, 5 rounds of 8 s
    python -m bench.compare HEAD~1 HEAD --scenario payments --rounds 7
    python -m bench.compare . . --scenario payments --trace-after   # tracing's cost
    python -m bench.compare . --scenario payments,authorize,capture  # scenarios side by side

Several scenarios (`--scenario A,B,...`) are measured side by side the same way, each in
its turn within a round, and one revision alone measures its scenarios against each other;
the table's last row gives each side against the first (`bench/compare_report.py`). The
scenarios: `replays` and `lookups` of the `MADE` payments made first, `payments` (new keys
every round), and the two steps of a two-step payment (`bench/two_step.py`): `authorize` (a
manual payment, new keys every round) and `capture` (a whole capture of an authorization
made at the start of its round, before any of its measured runs).

`--trace-after` runs the second revision's API traced, every request sampled
(`OTEL_TRACES_SAMPLER=always_on`), its spans serialized as JSON lines to /dev/null (`TRACED`;
docs/tracing.md); the fake provider is not traced. `--trace-ratio 0.05` samples a share of
its payments instead, by trace id, as a deployment would.

A revision is anything `git worktree add` takes (a commit, a branch, a tag), checked out
in a temporary worktree that is removed afterwards; `.` is the working tree as it is, copied
to a temporary folder likewise (`checkout`). Each runs on a database of its own on the
bench's server, migrated by its own migrations, with a tenant and the same payments made by
its own API, so revisions of different schemas compare.
Results go to `bench/results/<UTC time>-compare.md` and `.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import psycopg

from bench.compare_profile import profile_scenarios
from bench.compare_report import Round, report, side_label
from bench.loadgen import Request, Target, run_load
from bench.machine import describe_machine, tree_cpu_s
from bench.scenarios import payment_body, post_payment
from bench.system import (
    RESULTS_DIR,
    api_env,
    bench_database,
    revision_database,
    start_provider,
    tree_cli,
)
from bench.two_step import authorizations, captures, make_authorizations, pool_size
from tests.support.control.processes import PAYMENTS, REPO_ROOT, Process, free_port, start_process
from tests.support.control.system import admin_env

SCENARIOS = ("replays", "payments", "lookups", "authorize", "capture")
# The traced side of `--trace-after`: all of a real exporter's work, nothing kept.
TRACED = {
    "OTEL_SDK_DISABLED": "false",
    "OTEL_TRACES_SAMPLER": "always_on",
    "OTEL_TRACES_EXPORTER": "none",
    "PAYMENTS_TRACE_FILE": "/dev/null",
}
MADE = 3000


def traced_env(ratio: float = 1.0) -> dict[str, str]:
    """The traced side's settings: every request sampled (`TRACED`), or `ratio` of them by
    trace id (`parentbased_traceidratio`, as a deployment samples)."""
    if not 0 < ratio <= 1:
        raise ValueError(f"a sampling ratio is in (0, 1], not {ratio}")
    if ratio == 1:
        return dict(TRACED)
    sampled = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}
    return {**TRACED, **sampled, "OTEL_TRACES_SAMPLER_ARG": repr(ratio)}


def traced_label(revision: str, ratio: float) -> str:
    return f"{revision} traced" + ("" if ratio == 1 else f" {ratio:.0%}")


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """The tree of `revision` in a temporary folder, removed afterwards: a worktree of the
    revision, or for `.` a copy of this checkout's files as they are (tracked and new, not
    ignored: uncommitted changes included, no caches, no virtualenv).

    `.` used to run from this checkout itself, and measured slower than the same code from a
    worktree (7 % fewer new payments a second, docs/benchmark.md); each side now runs from a
    fresh tree alike.
    """
    folder = Path(tempfile.mkdtemp(prefix="payments-compare-")) / "tree"
    git = ["git", "-C", str(REPO_ROOT)]
    if revision == ".":
        listed = subprocess.run(
            [*git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
        ).stdout.decode()
        for name in filter(None, listed.split("\0")):
            source = REPO_ROOT / name
            if source.is_file():  # a file deleted but not yet staged is listed, and gone
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, folder / name)
        try:
            yield folder
        finally:
            shutil.rmtree(folder.parent, ignore_errors=True)
        return
    subprocess.run([*git, "worktree", "add", "--detach", str(folder), revision], check=True)
    try:
        yield folder
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=True)
        folder.parent.rmdir()


def known_settings(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` without the `PAYMENTS_*` settings `tree`'s revision does not have yet.

    A process refuses to start on a setting it does not know (a misspelt one), and the
    harness sets some that older revisions never had (the tenant rate limit, off).
    """
    source = (tree / "app" / "settings.py").read_text()
    return {
        name: value
        for name, value in env.items()
        if not name.startswith("PAYMENTS_")
        or name in source
        or name.removeprefix("PAYMENTS_").lower() in source
    }


def start_shared_provider(trees: list[Path], log_dir: Path) -> Process:
    """The fake provider both revisions' APIs charge through.

    This checkout's, unless a revision predates provider keys (its settings have no
    `provider_api_key`): its API sends no key, which today's provider refuses `401`, so the
    provider is then that revision's own, which checks none (the other API's key it ignores).
    """
    keyless = [
        t for t in trees if "provider_api_key" not in (t / "app" / "settings.py").read_text()
    ]
    if not keyless:
        return start_provider(log_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    return start_process(
        f"fake-provider-{keyless[0].name}",
        [*PAYMENTS, "fake-provider", "--port", str(port)],
        env={
            "PAYMENTS_FAKE_PROVIDER_DB": str(log_dir / "provider-ledger.sqlite3"),
            "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
        },
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
        timeout=60,
        cwd=keyless[0],
    )


def start_api(tree: Path, env: dict[str, str], log_dir: Path) -> Process:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    return start_process(
        f"api-{tree.name}",
        [*PAYMENTS, "serve", "--port", str(port)],
        # Older revisions have no operators' listener and refuse its settings as misspelt.
        env=known_settings(tree, admin_env(env, free_port())),
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
        timeout=60,
        cwd=tree,
    )


def _payments(tag: str) -> Callable[[int], Request]:
    """Payment `i` of the keys tagged `tag`: always the same key and body for the same `i`."""
    return lambda i: post_payment(f"{tag}-{i}", payment_body(i, tag))


def _maker(
    scenario: str, tag: str, round_: int, authorized: Sequence[str] = ()
) -> Callable[[int], Request]:
    """Request `i` of `scenario` in round `round_`; a capture's of `authorized[i]`."""
    if scenario == "replays":
        made = _payments(tag)
        return lambda i: made(i % MADE)
    if scenario == "lookups":
        return lambda i: Request("GET", f"/operations?idempotency_key={quote(f'{tag}-{i % MADE}')}")
    fresh = f"{tag}-r{round_}-{uuid.uuid4().hex[:6]}"
    if scenario == "authorize":
        return authorizations(f"{fresh}-auth")
    if scenario == "capture":
        return captures(authorized, f"{fresh}-capture")
    return _payments(fresh)


def parse_scenarios(value: str) -> tuple[str, ...]:
    """`--scenario`'s value: one scenario, or several separated by commas, each once."""
    named = tuple(name.strip() for name in value.split(","))
    unknown = [name for name in named if name not in SCENARIOS]
    if unknown or not named or len(set(named)) != len(named):
        raise argparse.ArgumentTypeError(
            f"scenarios are some of {', '.join(SCENARIOS)}, each once, not {value!r}"
        )
    return named


T = TypeVar("T")


def in_turn(runs: list[T], round_: int) -> list[T]:
    """`runs` in the order round `round_` measures them: as given, then reversed, round after
    round (two sides: each goes first every other round; more: each side's mean place is the
    same, so a drift over a round weighs on all alike).

    With a fixed order the side measured second was favoured by nothing and hurt by warm-up
    and drift: b9a8a0e then the refactored main gave 0.551 against 0.622 ms of API CPU per
    replay, the same two in the other order 0.530 against 0.533. Taking turns spreads that.
    """
    return runs if round_ % 2 else runs[::-1]


def compare(
    revisions: Sequence[str],
    *,
    scenarios: Sequence[str],
    rounds: int,
    seconds: float,
    concurrency: int,
    trace_after: bool = False,
    trace_ratio: float = 1.0,
    profile: Path | None = None,
) -> tuple[list[Round], dict[str, object]]:
    log_dir = Path(tempfile.mkdtemp(prefix="payments-compare-logs-"))
    results: list[Round] = []
    with ExitStack() as stack:
        trees = [stack.enter_context(checkout(revision)) for revision in revisions]
        db = stack.enter_context(bench_database(durable=True))
        provider = start_shared_provider(trees, log_dir)
        stack.callback(provider.stop)
        assert provider.url is not None
        env = {**os.environ, **api_env(db.url, provider.url)}
        apis, targets, envs, api_keys = [], [], [], []
        tag = uuid.uuid4().hex[:8]
        for i, tree in enumerate(trees):
            # Each revision on a database of its own schema, migrated by its own migrations,
            # with its own tenant and the same payments made (revisions of different schemas
            # compare; the server, the machine and the provider are shared).
            tree_env = known_settings(tree, env)
            url = stack.enter_context(revision_database(db.url, tree, tree_env))
            tree_env = {**tree_env, "DATABASE_URL": url}
            api_key = tree_cli(tree, tree_env, "tenant", "create", f"compare-{i}")
            traced = traced_env(trace_ratio) if trace_after and i else {}
            api = start_api(tree, {**tree_env, **traced}, log_dir)
            stack.callback(api.stop)
            target = Target.from_url(str(api.url), headers={"authorization": f"Bearer {api_key}"})
            made = asyncio.run(
                run_load(
                    target, _payments(tag), total=MADE, concurrency=concurrency, duration_s=300
                )
            )
            print(f"compare: {made.answered} payments made, {dict(made.statuses)}", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE")
            apis.append(api)
            targets.append(target)
            envs.append(tree_env)
            api_keys.append(api_key)
        with psycopg.connect(db.url, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            durability = conn.execute(
                "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings"
                " WHERE name IN ('fsync', 'synchronous_commit')"
            ).fetchone()
        machine = describe_machine(
            REPO_ROOT,
            postgres_version=str(version[0] if version else "?"),
            postgres_settings=str(durability[0] if durability else "?"),
        )
        labels: tuple[str, ...]
        if trace_after:
            labels = (revisions[0], traced_label(revisions[1], trace_ratio))
        else:
            labels = tuple(revisions)
        runs = list(zip(labels, apis, targets, strict=True))
        sides = [(run, scenario) for run in runs for scenario in scenarios]
        capture_per_s: dict[str, float] = {}
        for round_ in range(rounds + 1):
            name = f"round {round_}{' (warm-up)' if round_ == 0 else ''}"
            # The authorizations this round's captures take, made before any of its measured
            # runs: their CPU falls outside every window.
            authorized: dict[str, list[str]] = {}
            if "capture" in scenarios:
                for revision, _api, target in in_turn(runs, round_):
                    count = pool_size(seconds, capture_per_s.get(revision))
                    authorized[revision] = made_ids = make_authorizations(
                        target, count, f"{tag}-r{round_}-pool", concurrency=concurrency
                    )
                    print(f"{name}: {revision}: {len(made_ids)} of {count} authorized", flush=True)
                    if not made_ids:
                        raise SystemExit(f"{revision}: no authorization to capture")
            for (revision, api, target), scenario in in_turn(sides, round_):
                pool = authorized.get(revision, [])
                before = tree_cpu_s([api.pid])
                measured = asyncio.run(
                    run_load(
                        target,
                        _maker(scenario, tag, round_, pool),
                        total=len(pool) if scenario == "capture" else 10**9,
                        concurrency=concurrency,
                        duration_s=seconds,
                    )
                )
                cpu_s = tree_cpu_s([api.pid]) - before
                done = max(measured.answered, 1)
                row = Round(
                    revision=revision,
                    scenario=scenario,
                    round=round_,
                    answered=measured.answered,
                    per_s=round(measured.throughput, 1),
                    api_cpu_ms=round(1000 * cpu_s / done, 3),
                    statuses={str(k): v for k, v in sorted(measured.statuses.items())},
                )
                if scenario == "capture" and round_ > 0:  # the warm-up's rate is no guide
                    capture_per_s[revision] = max(
                        capture_per_s.get(revision, 0.0), measured.throughput
                    )
                print(
                    f"{name}: {side_label(revision, scenario, labels, scenarios)}: "
                    f"{row.per_s}/s, API CPU {row.api_cpu_ms} ms per request, {row.statuses}",
                    flush=True,
                )
                if round_ > 0:
                    results.append(row)
        if profile is not None:
            profile_scenarios(
                trees[0],
                envs[0],
                api_keys[0],
                scenarios,
                lambda scenario, pool: _maker(scenario, tag, rounds + 1, pool),
                output=profile,
                log_dir=log_dir,
                seconds=seconds,
                concurrency=concurrency,
                capture_per_s=capture_per_s.get(labels[0]),
            )
    return results, machine


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("before", help="a git revision, or . for the working tree")
    parser.add_argument(
        "after", nargs="?", help="a git revision, or . (none: BEFORE's scenarios alone)"
    )
    parser.add_argument(
        "--scenario",
        type=parse_scenarios,
        default=("replays",),
        help=f"one of {', '.join(SCENARIOS)}, or several separated by commas",
    )
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (after a warm-up)")
    parser.add_argument("--seconds", type=float, default=8.0, help="load per revision per round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--trace-after", action="store_true", help="trace AFTER, 100%% sampled")
    parser.add_argument(
        "--trace-ratio",
        type=float,
        default=1.0,
        help="with --trace-after: sample this share of AFTER's payments (default 1: every one)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then profile each scenario in BEFORE's API (bench/compare_profile.py)",
    )
    args = parser.parse_args()
    revisions = (args.before,) if args.after is None else (args.before, args.after)
    if args.trace_after and args.after is None:
        parser.error("--trace-after traces AFTER: name two revisions")
    scenarios: tuple[str, ...] = args.scenario
    started = time.time()
    stamp = datetime.fromtimestamp(started, UTC).strftime("%Y%m%dT%H%M%SZ")
    profile = RESULTS_DIR / f"{stamp}-compare-profile" if args.profile else None
    results, machine = compare(
        revisions,
        scenarios=scenarios,
        rounds=args.rounds,
        seconds=args.seconds,
        concurrency=args.concurrency,
        trace_after=args.trace_after,
        trace_ratio=args.trace_ratio,
        profile=profile,
    )
    if args.trace_after:
        revisions = (args.before, traced_label(args.after, args.trace_ratio))
    table = report(results, revisions, scenarios)
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Comparison {stamp}: {' against '.join(revisions)}, {', '.join(scenarios)}\n\n"
        f"- machine: {machine}\n- {args.rounds} rounds of {args.seconds} s per revision and "
        f"scenario, {args.concurrency} connections, alternated; round 0 (warm-up) not counted\n"
        + (f"- profiles: `{profile.relative_to(REPO_ROOT)}/<scenario>/`\n" if profile else "")
        + "\n"
    )
    (RESULTS_DIR / f"{stamp}-compare.md").write_text(header + table + "\n")
    payload: dict[str, object] = {
        "revisions": revisions,
        "scenarios": scenarios,
        "machine": machine,
    }
    payload["rounds"] = [asdict(row) for row in results]
    (RESULTS_DIR / f"{stamp}-compare.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results: {RESULTS_DIR / f'{stamp}-compare.md'}")


if __name__ == "__main__":
    main()
