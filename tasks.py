#!/usr/bin/env python3
"""Bootstrap and run the project with nothing but Python 3.11+.

    python3 tasks.py dev     the whole system on localhost (`payments dev`)
    python3 tasks.py test    the full test suite, two processes of tests at a time on two cores
                             (extra arguments go to pytest; `-n 0` runs it in one)
    python3 tasks.py lint    ruff and mypy (strict)

Each creates `.venv` and installs the project into it on first use, and again whenever
pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


def ensure_venv(extras: str) -> None:
    """Create `.venv` and install the project with `extras`, if not already current."""
    if sys.version_info < (3, 11):  # noqa: UP036 - runs before the project is installed
        sys.exit("payments needs Python 3.11 or newer")
    stamp = VENV / f".installed-{extras or 'base'}"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
    target = f".[{extras}]" if extras else "."
    print(f"installing {target} into .venv", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, cwd=ROOT)
    subprocess.run([*pip, "-e", target], check=True, cwd=ROOT)
    stamp.write_text(digest)


def run(args: list[str]) -> int:
    return subprocess.run(args, cwd=ROOT).returncode


def parallel(args: list[str]) -> list[str]:
    """pytest-xdist's options for the suite, unless `args` choose their own (`-n 0`: serial).

    The tests mostly wait (on processes starting, leases running out, faults acting), so two
    processes of tests at a time halve the suite's time on two cores. Each has its own
    PostgreSQL, fake provider and API (the session's fixtures), so they share nothing.
    """
    if "no:xdist" in args or any(arg.startswith(("-n", "--numprocesses")) for arg in args):
        return []
    return ["-n", str(min(os.cpu_count() or 1, 4))]


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "dev":
        ensure_venv("")
        return run([str(BIN / "payments"), "dev", *rest])
    if command == "test":
        ensure_venv("dev")
        return run([str(PYTHON), "-m", "pytest", *parallel(rest), *rest])
    if command == "lint":
        ensure_venv("dev")
        checks = [
            [str(PYTHON), "-m", "ruff", "check", "."],
            [str(PYTHON), "-m", "ruff", "format", "--check", "."],
            [str(PYTHON), "-m", "mypy"],
        ]
        return max(run(check) for check in checks)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
