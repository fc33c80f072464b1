"""The machine the figures come from, and the CPU each process tree spent during a scenario.

CPU time is read from /proc (Linux): for a process tree, the user and system time of every
live process in it plus what its reaped children spent. On a small shared machine these
numbers say more than throughput alone: how many CPU milliseconds one request costs in the
API, the provider, PostgreSQL and the load generator, and how much other work was running.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; everything after its ")" is fixed.
    return raw[raw.rindex(")") + 2 :].split()


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def tree_cpu_s(root_pids: Iterable[int]) -> float:
    """CPU seconds spent so far by the process trees under `root_pids` (live and reaped)."""
    children = _children_map()
    seen: set[int] = set()
    stack = list(root_pids)
    ticks = 0
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        fields = _stat_fields(pid)
        if fields is None:
            continue
        # utime, stime, cutime, cstime are fields 14-17 of /proc/PID/stat (11-14 here).
        ticks += sum(int(v) for v in fields[11:15])
        stack.extend(children.get(pid, []))
    return ticks / _CLOCK_TICKS


def cpu_by_process(root_pid: int) -> dict[int, float]:
    """CPU seconds of `root_pid` and of each of its direct children, separately."""
    pids = [root_pid, *_children_map().get(root_pid, [])]
    spent: dict[int, float] = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            spent[pid] = sum(int(v) for v in fields[11:13]) / _CLOCK_TICKS
    return spent


def resident_mib(pid: int) -> tuple[float, float]:
    """Resident memory of `pid` now and at its peak so far (VmRSS, VmHWM), in MiB."""
    found = {"VmRSS:": 0.0, "VmHWM:": 0.0}
    try:
        lines = (_PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return 0.0, 0.0
    for line in lines:
        parts = line.split()
        if parts and parts[0] in found:
            found[parts[0]] = int(parts[1]) / 1024  # kB
    return found["VmRSS:"], found["VmHWM:"]


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores) since boot."""
    try:
        values = [int(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _CLOCK_TICKS


def self_cpu_s() -> float:
    """CPU seconds this process (the load generator) has spent."""
    times = os.times()
    return times.user + times.system


def reaped_children_cpu_s() -> float:
    """CPU seconds of this process's children that have exited and been waited for."""
    times = os.times()
    return times.children_user + times.children_system


@dataclass
class CpuSample:
    """CPU counters at one moment: per named process tree, this process, the machine."""

    trees: dict[str, float]
    own: float
    reaped: float
    machine: float


def sample_cpu(trees: Mapping[str, Iterable[int]]) -> CpuSample:
    return CpuSample(
        trees={name: tree_cpu_s(pids) for name, pids in trees.items()},
        own=self_cpu_s(),
        reaped=reaped_children_cpu_s(),
        machine=machine_busy_s(),
    )


def cpu_between(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per tree between two samples, plus `bench` (the generator), `reaped`
    (short-lived children such as `worker --once`) and `other` (the rest of the machine)."""
    spent = {name: max(0.0, after.trees.get(name, 0.0) - v) for name, v in before.trees.items()}
    spent["bench"] = after.own - before.own
    spent["reaped"] = after.reaped - before.reaped
    ours = sum(spent.values())
    spent["other"] = max(0.0, (after.machine - before.machine) - ours)
    return spent


def load_average() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def _cpu_model() -> str:
    try:
        for line in (_PROC / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in (_PROC / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _git_revision(repo: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (modified)' if dirty else ''}" if head else "unknown"


def _versions(names: Iterable[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def describe_machine(
    repo: Path, *, postgres_version: str, postgres_settings: str
) -> dict[str, Any]:
    """Cores, memory, CPU model, OS, Python, PostgreSQL and library versions, load now."""
    return {
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "postgresql": postgres_version,
        "postgresql_settings": postgres_settings,
        "libraries": _versions(["fastapi", "starlette", "uvicorn", "sqlalchemy", "psycopg"]),
        "git": _git_revision(repo),
        "load_average_at_start": load_average(),
    }
