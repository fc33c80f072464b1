"""The provider circuit breakers of the run's processes, seen from outside, over time.

Two sources, both with wall-clock times:

- sampled: each API's gauge `payments_provider_breaker_state` (0 closed, 1 half-open,
  2 open), read from its `/metrics` every `breaker_sample_s` by one thread per API. What an
  operator's scraper would see: a change is recorded at the first sample that shows it, and
  an API that does not answer (killed, restarting, paused) is recorded as `no answer`;
- logged: every API's and worker's JSON log lines "provider circuit breaker open" /
  "half-open" / "closed", read after the run: every change, at the moment it happened, and
  each restart of the process (a new process starts closed).

Each is a list of changes per process (`api0`, `api1`, `worker0`, ...): `{"at", "state"}`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

METRIC = "payments_provider_breaker_state"
STATES = {0: "closed", 1: "half-open", 2: "open"}
NO_ANSWER = "no answer"
LOG_MESSAGE = "provider circuit breaker "


def gauge_state(text: str, provider: str | None = None) -> str | None:
    """The breaker state in a `/metrics` page, or None when the gauge is not there.

    Each provider has a breaker of its own (`provider` label): `provider`'s, or, unnamed, the
    worst of them (open over half-open over closed).
    """
    states: list[int] = []
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        if name != METRIC:
            continue
        if provider is not None and f'provider="{provider}"' not in labels:
            continue
        try:
            states.append(int(float(value)))
        except ValueError:
            return None
    return STATES.get(max(states)) if states else None


class BreakerSampler:
    """One thread per API reading its breaker gauge until `stop`.

    `urls` are the APIs' operators' listeners, where `/metrics` is served.
    """

    def __init__(self, urls: Sequence[str], interval_s: float):
        self.interval_s = interval_s
        self.changes: dict[str, list[dict[str, Any]]] = {f"api{n}": [] for n in range(len(urls))}
        self.samples: dict[str, int] = dict.fromkeys(self.changes, 0)
        self.until: float | None = None
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._sample, args=(f"api{n}", url), daemon=True)
            for n, url in enumerate(urls)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        if self.until is None:
            self.until = time.time()

    def _sample(self, name: str, url: str) -> None:
        changes = self.changes[name]
        # A paused API holds the request: give up well before the next sample is due.
        with httpx.Client(timeout=max(0.5, 2 * self.interval_s)) as http:
            while not self._stop.is_set():
                try:
                    response = http.get(f"{url}/metrics")
                    state = gauge_state(response.text) if response.is_success else None
                except httpx.HTTPError:
                    state = None
                state = state or NO_ANSWER
                self.samples[name] += 1
                if not changes or changes[-1]["state"] != state:
                    changes.append({"at": time.time(), "state": state})
                self._stop.wait(self.interval_s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "samples": dict(self.samples),
            "until": self.until,
            "sampled": {name: list(changes) for name, changes in self.changes.items()},
        }


def _timestamp(entry: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(entry["ts"])).timestamp()
    except (KeyError, ValueError):
        return None


def _started_ns(path: Path) -> int:
    suffix = path.stem.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def logged_changes(log_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every breaker change the APIs and workers logged, and each of their restarts."""
    changes: dict[str, list[dict[str, Any]]] = {}
    # Files are `<process>-<monotonic ns>.log`: one per process started, in start order.
    for path in sorted(log_dir.glob("*.log"), key=_started_ns):
        name = path.stem.rsplit("-", 1)[0]
        if not name.startswith(("api", "worker")):
            continue
        started = name in changes
        process = changes.setdefault(name, [])
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            at = _timestamp(entry) if isinstance(entry, dict) else None
            if at is None:
                continue
            if started:  # a restart: the new process's breaker starts closed
                process.append({"at": at, "state": "closed", "restart": True})
                started = False
            message = str(entry.get("msg", ""))
            if message.startswith(LOG_MESSAGE):
                process.append({"at": at, "state": message.removeprefix(LOG_MESSAGE)})
    for process in changes.values():
        process.sort(key=lambda change: change["at"])
    return changes


def state_at(changes: Sequence[Mapping[str, Any]], at: float) -> str | None:
    """The state the last change at or before `at` left; None before the first."""
    state = None
    for change in changes:
        if change["at"] > at:
            break
        state = change["state"]
    return state
