#!/usr/bin/env python3
"""Bootstrap and run the project with nothing but Python 3.11+.

    python3 tasks.py dev     the whole system on localhost (`payments dev`)
    python3 tasks.py test    the full test suite, two processes of tests at a time on two cores
                             (extra arguments go to pytest; `-n 0` runs it in one)
    python3 tasks.py test-ha the high-availability tests (tests/ha, marker `ha`): a Patroni
                             cluster's failover under load, PgBouncer in front; they need
                             Debian's patroni, etcd-server and pgbouncer and install nothing
                             (without them they are skipped); not part of `test`
    python3 tasks.py test-long the long tests (marker `long`: several API and worker processes
                             under a failover, the settlement demo at its test size), which
                             `test` lists as skipped to stay within ten minutes on two cores
    python3 tasks.py lint    ruff and mypy (strict)
    python3 tasks.py mutate [module ...] [--resume | --survivors]
                             mutation testing (Cosmic Ray) of the protocol-critical modules of
                             mutation/modules.toml, each against its own tests; it mutates the
                             files on disk, so run it in a worktree of its own
                             (docs/testing.md, "Mutation testing")
    python3 tasks.py lock    compile requirements.lock and requirements-dev.lock from
                             pyproject.toml (extra arguments go to `uv pip compile`, e.g.
                             `--upgrade-package starlette` or `--upgrade`)

Each of dev, test and lint creates `.venv` and installs into it on first use, and again
whenever the lock or pyproject.toml changes: the exact versions of requirements.lock (dev) or
requirements-dev.lock (test, lint), each file checked against its hash, then the project itself
without dependencies. A lock that no longer matches pyproject.toml's dependency lists is
refused: run `python3 tasks.py lock`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
PIP = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]

# The lock of each set of extras: the runtime's (the image installs it too) and the one with
# the dev extras (the tests, the checks, CI).
LOCKS = {"": "requirements.lock", "dev": "requirements-dev.lock"}
# The line of a lock's header that records which dependency lists it was compiled from.
DIGEST_LINE = "# pyproject-sha256: "


def dependency_lists(pyproject: Path, extras: str) -> dict[str, list[str]]:
    """The lists of pyproject.toml that a lock of `extras` is compiled from.

    The build system's requirements are among them: the project is installed from the lock
    without build isolation, so the lock carries setuptools too.
    """
    import tomllib  # here, so that Python 3.10 still gets the message of ensure_venv

    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    lists: dict[str, list[str]] = {
        "build-system.requires": list(data["build-system"]["requires"]),
        "project.dependencies": list(data["project"]["dependencies"]),
    }
    if extras:
        optional = data["project"]["optional-dependencies"][extras]
        lists[f"project.optional-dependencies.{extras}"] = list(optional)
    return lists


def dependencies_digest(pyproject: Path, extras: str) -> str:
    """The sha256 of those lists (not of the file: comments and other tables leave it be)."""
    lists = dependency_lists(pyproject, extras)
    return hashlib.sha256(json.dumps(lists, sort_keys=True).encode()).hexdigest()


def recorded_digest(lock: Path) -> str | None:
    """The digest that the header of `lock` records, if it has one."""
    for line in lock.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            return None
        if line.startswith(DIGEST_LINE):
            return line.removeprefix(DIGEST_LINE).split()[0]
    return None


def lock_problem(root: Path, extras: str) -> str | None:
    """Why the lock of `extras` under `root` cannot be installed, or None if it can."""
    lock = root / LOCKS[extras]
    if not lock.exists():
        return f"{lock.name} is missing: run python3 tasks.py lock"
    if recorded_digest(lock) != dependencies_digest(root / "pyproject.toml", extras):
        return (
            f"{lock.name} is out of date: pyproject.toml's dependency lists changed since it"
            " was compiled; run python3 tasks.py lock (and commit the locks)"
        )
    return None


def ensure_venv(extras: str) -> None:
    """Create `.venv` and install the lock of `extras` and the project, if not already current."""
    if sys.version_info < (3, 11):  # noqa: UP036 - runs before the project is installed
        sys.exit("payments needs Python 3.11 or newer")
    problem = lock_problem(ROOT, extras)
    if problem:
        sys.exit(f"refusing to install: {problem}")
    lock = ROOT / LOCKS[extras]
    stamp = VENV / f".installed-{extras or 'base'}"
    digest = hashlib.sha256(lock.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
    print(f"installing {lock.name} and the project into .venv", flush=True)
    subprocess.run([*PIP, "--require-hashes", "-r", lock.name], check=True, cwd=ROOT)
    subprocess.run([*PIP, "--no-deps", "--no-build-isolation", "-e", "."], check=True, cwd=ROOT)
    stamp.write_text(digest)


def uv_pin(pyproject: Path) -> str:
    """The `uv==X` requirement of the dev extras: the version that compiles the locks."""
    dev = dependency_lists(pyproject, "dev")["project.optional-dependencies.dev"]
    return next(req for req in dev if req.replace(" ", "").startswith("uv=="))


def lock(args: list[str]) -> int:
    """Compile both locks with uv, each headed by the digest of the lists it came from."""
    if sys.version_info < (3, 11):  # noqa: UP036 - runs before the project is installed
        sys.exit("payments needs Python 3.11 or newer")
    pyproject = ROOT / "pyproject.toml"
    uv = BIN / "uv"
    if not uv.exists():
        if not PYTHON.exists():
            print("creating .venv", flush=True)
            venv.create(VENV, with_pip=True)
        print(f"installing {uv_pin(pyproject)} into .venv", flush=True)
        subprocess.run([*PIP, uv_pin(pyproject)], check=True, cwd=ROOT)
    for extras, name in LOCKS.items():
        build = "\n".join(dependency_lists(pyproject, extras)["build-system.requires"])
        command = [
            str(uv), "pip", "compile", "--quiet", "--universal", "--generate-hashes",
            "--python-version", "3.11", "--custom-compile-command", "python3 tasks.py lock",
            "pyproject.toml", "-", "--output-file", name,
            *(["--extra", extras] if extras else []),
            *args,
        ]  # fmt: skip
        print(f"compiling {name}", flush=True)
        result = subprocess.run(command, input=build, text=True, cwd=ROOT)
        if result.returncode:
            return result.returncode
        # uv writes the whole file afresh; the digest goes on top of its header.
        path = ROOT / name
        header = (
            f"{DIGEST_LINE}{dependencies_digest(pyproject, extras)}\n"
            "# (of pyproject.toml's build-system.requires, project.dependencies"
            + (f" and optional-dependencies.{extras}" if extras else "")
            + "; tasks.py refuses the lock once they change)\n"
        )
        path.write_text(header + path.read_text(encoding="utf-8"), encoding="utf-8")
    return 0


def run(args: list[str]) -> int:
    """`args` in the project's root. The project's modules are compiled once and kept
    (`__pycache__`, which git ignores) even where the environment sets
    PYTHONDONTWRITEBYTECODE: the suite starts a few hundred API, worker and provider
    processes, and each would otherwise compile the project's modules again (about 75 ms of
    CPU per start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(args, cwd=ROOT, env=env).returncode


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
    if command == "test-ha":
        # One at a time: each test runs its own cluster, and they time a failover.
        ensure_venv("dev")
        return run([str(PYTHON), "-m", "pytest", "-n", "0", "-m", "ha", "tests/ha", *rest])
    if command == "test-long":
        ensure_venv("dev")
        return run([str(PYTHON), "-m", "pytest", *parallel(rest), "-m", "long", *rest])
    if command == "mutate":
        ensure_venv("dev")
        return run([str(PYTHON), "mutation/run.py", *rest])
    if command == "lock":
        return lock(rest)
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
