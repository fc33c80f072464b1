"""Mutation testing of the protocol-critical modules with Cosmic Ray (`python3 tasks.py mutate`).

Each module of `mutation/modules.toml` is mutated on disk, one mutant at a time, and the
tests that concern it run against every mutant: the API, worker and fake provider processes
they start import the mutated file like the test process does. Cosmic Ray puts the original
back after each mutant; this script also compares the file with its copy from before the run
and restores it if anything was left behind (an interrupted run). Run it in a checkout of
its own (`git worktree add`): while it runs, the module on disk is a mutant.

    python mutation/run.py [module ...] [--resume | --survivors]

Mutants inside annotations are marked skipped before the run: every mutated module has
`from __future__ import annotations`, so an annotation is never evaluated and a mutant there
(`X | None` -> `X + None`) cannot change what the code does. Each session (a SQLite file) and
its survivors' diffs are kept in `mutation/.sessions/` (not committed).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from cosmic_ray.mutating import mutate_code
from cosmic_ray.plugins import get_operator
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import MutationSpec, TestOutcome, WorkerOutcome, WorkResult

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "mutation"
SESSIONS = HERE / ".sessions"
BIN = Path(sys.executable).parent
SKIPPED = WorkerOutcome.SKIPPED
ANNOTATION = "annotation: never evaluated (from __future__ import annotations)"
INVALID = "not valid Python"
EXCLUDED = "operator excluded by modules.toml"
SKIP_COUNTS = {EXCLUDED: "excluded", ANNOTATION: "annotations", INVALID: "invalid"}
Span = tuple[tuple[int, int], tuple[int, int]]


def annotation_spans(source: str) -> list[Span]:
    """(start, end) of every annotation in `source`, as (line, column in characters)."""
    lines = source.splitlines()

    def chars(line: int, col: int) -> int:  # ast counts UTF-8 bytes, parso characters
        return len(lines[line - 1].encode()[:col].decode())

    spans = []
    for node in ast.walk(ast.parse(source)):
        found: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        for ann in found:
            if ann is not None and ann.end_lineno is not None and ann.end_col_offset is not None:
                start = (ann.lineno, chars(ann.lineno, ann.col_offset))
                end = (ann.end_lineno, chars(ann.end_lineno, ann.end_col_offset))
                spans.append((start, end))
    return spans


def not_worth_running(
    mutation: MutationSpec, source: str, spans: list[Span], excluded: re.Pattern[str] | None
) -> str | None:
    """Why a mutant needs no test run, or None: it lies inside an annotation (never
    evaluated), it is not Python at all (Cosmic Ray takes `*` and `/` of a signature and `**`
    of a call's arguments for operators: `def f(a, +, b)` is no program, only an import
    error), or its operator is excluded (`modules.toml`)."""
    start, end = tuple(mutation.start_pos), tuple(mutation.end_pos)
    if any(lo <= start and end <= hi for lo, hi in spans):
        return ANNOTATION
    operator = get_operator(mutation.operator_name)(**(mutation.operator_args or {}))
    mutated = mutate_code(source, operator, mutation.occurrence)
    try:
        ast.parse(mutated or "")
    except SyntaxError:
        return INVALID
    if excluded is not None and excluded.match(mutation.operator_name):
        return EXCLUDED
    return None


def skip_unrunnable(db: WorkDB, source: str, exclude: list[str]) -> dict[str, int]:
    """Mark the pending mutants that need no test run as skipped; how many, by reason."""
    spans = annotation_spans(source)
    excluded = re.compile("|".join(f"(?:{e})" for e in exclude)) if exclude else None
    skipped = {EXCLUDED: 0, ANNOTATION: 0, INVALID: 0}
    for item in db.pending_work_items:
        reason = not_worth_running(item.mutations[0], source, spans, excluded)
        if reason is not None:
            db.set_result(item.job_id, WorkResult(output=reason, worker_outcome=SKIPPED))
            skipped[reason] += 1
    return skipped


def cosmic_ray_config(name: str, module: dict[str, Any], defaults: dict[str, Any]) -> Path:
    """The session's Cosmic Ray config, written from `modules.toml`."""
    unit = defaults["unit"] if module.get("unit") else []
    pytest = [str(BIN / "python"), "-m", "pytest", *defaults["pytest"], *unit, *module["tests"]]
    timeout = float(module.get("timeout", defaults["timeout"]))
    config = {
        "module-path": module["path"],
        "timeout": timeout,
        "excluded-modules": [],
        "test-command": shlex.join(pytest),
        "distributor": {"name": "local"},
    }
    lines = ["[cosmic-ray]"]
    for key, value in config.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {json.dumps(value)}")
    lines += ["", "[cosmic-ray.distributor]", 'name = "local"', ""]
    path = SESSIONS / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def summary(db: WorkDB) -> dict[str, Any]:
    """Counts of the session's outcomes, and its survivors' diffs."""
    names = ["mutants", "killed", "timeouts", "survived", "excluded", "annotations", "invalid"]
    counts: dict[str, Any] = dict.fromkeys([*names, "incompetent", "pending"], 0)
    survivors: list[str] = []
    results = dict(db.results)
    for item in db.work_items:
        counts["mutants"] += 1
        result = results.get(item.job_id)
        if result is None:
            counts["pending"] += 1
        elif result.worker_outcome is SKIPPED:
            counts[SKIP_COUNTS[result.output or ""]] += 1
        elif result.test_outcome is TestOutcome.SURVIVED:
            counts["survived"] += 1
            mutation = item.mutations[0]
            where = f"{mutation.module_path}:{mutation.start_pos[0]} {mutation.operator_name}"
            survivors.append(f"## {item.job_id} {where}\n{result.diff}")
        elif result.test_outcome is TestOutcome.INCOMPETENT:
            counts["incompetent"] += 1
        elif result.output == "timeout":
            counts["timeouts"] += 1
        else:
            counts["killed"] += 1
    tested = counts["killed"] + counts["timeouts"] + counts["survived"]
    counts["score"] = round(100 * (tested - counts["survived"]) / tested, 1) if tested else None
    return {"counts": counts, "survivors": survivors}


def run_module(name: str, module: dict[str, Any], defaults: dict[str, Any], again: str) -> int:
    """Mutate one module: a new session, or (`again`: "resume", "survivors") the last one's
    pending mutants, or its survivors (after a test was added for them) run once more."""
    target = ROOT / module["path"]
    original = target.read_bytes()
    config = cosmic_ray_config(name, module, defaults)
    session = SESSIONS / f"{name}.sqlite"
    cr = str(BIN / "cosmic-ray")
    if again == "survivors" and session.exists():
        with sqlite3.connect(session) as db:
            db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")
    try:
        if not (again and session.exists()):
            subprocess.run([cr, "init", str(config), str(session), "--force"], check=True)
            with use_db(str(session), WorkDB.Mode.open) as db:
                exclude = module.get("exclude-operators", defaults["exclude-operators"])
                skipped = skip_unrunnable(db, original.decode(), exclude)
            print(f"{name}: skipped without a run: {skipped}", flush=True)
            baseline = subprocess.run([cr, "baseline", str(config)], cwd=ROOT)
            if baseline.returncode:
                print(f"{name}: the tests fail without any mutant; fix them first")
                return 1
        with use_db(str(session), WorkDB.Mode.open) as db:
            pending = len(list(db.pending_work_items))
        started = time.monotonic()
        subprocess.run([cr, "exec", str(config), str(session)], cwd=ROOT, check=True)
        elapsed = time.monotonic() - started
    finally:
        if target.read_bytes() != original:
            target.write_bytes(original)
            print(f"{name}: {module['path']} was left mutated; restored", file=sys.stderr)
    with use_db(str(session), WorkDB.Mode.open) as db:
        found = summary(db)
    counts = found["counts"]
    # Of this invocation: the mutants it ran, in how long.
    counts |= {"ran": pending, "seconds": round(elapsed)}
    counts["seconds_per_mutant"] = round(elapsed / pending, 1) if pending else None
    (SESSIONS / f"{name}.survivors.txt").write_text("\n".join(found["survivors"]))
    (SESSIONS / f"{name}.json").write_text(json.dumps(counts, indent=2))
    print(f"{name}: {json.dumps(counts)}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="names in mutation/modules.toml (all if none)")
    rerun = parser.add_mutually_exclusive_group()
    rerun.add_argument("--resume", action="store_true", help="run the last session's pending")
    rerun.add_argument("--survivors", action="store_true", help="run its survivors again")
    args = parser.parse_args(argv)
    table = tomllib.loads((HERE / "modules.toml").read_text())
    modules: dict[str, dict[str, Any]] = table["modules"]
    unknown = [name for name in args.modules if name not in modules]
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {', '.join(modules)}")
    if "DATABASE_URL" not in os.environ:
        print("DATABASE_URL is not set: every mutant's tests start an embedded PostgreSQL")
    SESSIONS.mkdir(exist_ok=True)
    again = "resume" if args.resume else "survivors" if args.survivors else ""
    status = 0
    for name in args.modules or list(modules):
        status = max(status, run_module(name, modules[name], table["defaults"], again))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
