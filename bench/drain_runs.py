"""Drains side by side: a seeded backlog, and one worker's claims draining a copy of it, with
this checkout's code and another's, alternating (`bench/webhook_drain.py`,
`bench/recovery_drain.py`).

Each drain is a process of its own that runs the drain module's file with `PYTHONPATH` set to
a checkout, so it claims with that checkout's `app`; it prints its figures as one JSON line.
This module runs in the parent only (the drain modules import it after their `--drain`
branch), so a baseline checkout needs none of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.db.migrate import upgrade_head
from tests.support.control.database import throwaway_database

HERE = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def copy_of(server: str, template: str, prefix: str) -> Iterator[str]:
    """A new database on `server`, a copy of `template`; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield make_conninfo(server, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drain_in(script: Path, code: Path, url: str) -> dict[str, float]:
    """One drain by `script --drain URL`, in a process that imports `app` from `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, str(script), "--drain", url],
        env=env,
        cwd=code,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def side_by_side(
    script: Path,
    *,
    prefix: str,
    seed: Callable[[str], str],
    baseline: Path | None,
    runs: int,
) -> None:
    """Seed a database (`seed` returns the line saying what it holds), then drain a copy of
    it `runs` times with each checkout, the baseline first, printing a row per drain: the
    items claimed, the claims, items a second (of the time spent claiming), the median
    claim."""
    server = os.environ.get("DATABASE_URL", DEFAULT_SERVER)
    checkouts = [("this", HERE)] + ([("baseline", baseline.resolve())] if baseline else [])
    with throwaway_database(server, prefix) as seeded:
        upgrade_head(seeded)
        print(seed(seeded))
        template = str(conninfo_to_dict(seeded)["dbname"])
        print(f"{'code':<9} {'claimed':>8} {'claims':>7} {'per s':>7} {'median ms':>10}")
        for _ in range(runs):
            for label, code in checkouts[::-1]:
                with copy_of(server, template, prefix) as url:
                    r = drain_in(script, code, url)
                print(
                    f"{label:<9} {int(r['claimed']):>8,} {int(r['claims']):>7,}"
                    f" {r['claimed'] / r['claim_s']:>7.0f} {r['median_claim_ms']:>10.1f}"
                )
