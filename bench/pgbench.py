"""Running pgbench (from the embedded PostgreSQL wheel) on the service's own SQL.

`bench/sql/*.sql` are pgbench custom scripts; each pgbench "transaction" is one run of a
script, so for `create_payment.sql` the rate pgbench reports is payments per second as far as
the database alone can take them. Latencies come from pgbench's per-transaction log (`-l`).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg

from app.db.embedded import POSTGRES_BIN_PATH
from bench.stats import Measurement

SQL_DIR = Path(__file__).resolve().parent / "sql"
CREATE_PAYMENT_SCRIPT = SQL_DIR / "create_payment.sql"
BASELINE_INSERT_SCRIPT = SQL_DIR / "baseline_insert.sql"


@dataclass(frozen=True)
class PgbenchRun:
    """One pgbench run: the measurement and pgbench's own summary lines."""

    measurement: Measurement
    reported_tps: float
    failed: int
    output: str


def _libpq_env(database_url: str) -> dict[str, str]:
    params = psycopg.conninfo.conninfo_to_dict(database_url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    env = {names[k]: str(v) for k, v in params.items() if k in names and v is not None}
    env["PGDATABASE"] = str(params["dbname"])
    return env


def run_pgbench(
    database_url: str,
    script: Path,
    *,
    clients: int,
    threads: int,
    duration_s: int,
    variables: Mapping[str, str],
) -> PgbenchRun:
    """`pgbench -n -M prepared -c clients -j threads -T duration_s -f script -l`."""
    program = POSTGRES_BIN_PATH / "pgbench"
    with tempfile.TemporaryDirectory(prefix="payments-pgbench-") as log_dir:
        args = [
            str(program),
            "-n",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            str(threads),
            "-T",
            str(duration_s),
            "-f",
            str(script),
            "-l",
            "--log-prefix",
            "txn",
        ]
        for name, value in variables.items():
            args += ["-D", f"{name}={value}"]
        result = subprocess.run(
            args,
            env={**os.environ, **_libpq_env(database_url)},
            cwd=log_dir,
            capture_output=True,
            text=True,
            timeout=duration_s + 120,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise RuntimeError(f"pgbench failed ({result.returncode}):\n{output}")
        measurement = Measurement()
        first_epoch = last_epoch = None
        for log in Path(log_dir).glob("txn.*"):
            for line in log.read_text().splitlines():
                # client_id transaction_no latency_us script_no epoch_s epoch_us
                fields = line.split()
                latency_us = int(fields[2])
                done = int(fields[4]) + int(fields[5]) / 1e6
                measurement.latencies_s.append(latency_us / 1e6)
                measurement.statuses[0] += 1
                started = done - latency_us / 1e6
                first_epoch = started if first_epoch is None else min(first_epoch, started)
                last_epoch = done if last_epoch is None else max(last_epoch, done)
        if first_epoch is not None and last_epoch is not None:
            measurement.elapsed_s = last_epoch - first_epoch
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", output)
    failed = re.search(r"number of failed transactions: ([0-9]+)", output)
    return PgbenchRun(
        measurement=measurement,
        reported_tps=float(tps.group(1)) if tps else float("nan"),
        failed=int(failed.group(1)) if failed else 0,
        output=output,
    )
