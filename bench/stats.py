"""Latency percentiles and throughput for one measured run."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `values`; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Measurement:
    """What one scenario measured: latencies of answered requests, statuses, errors, time."""

    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0

    @property
    def answered(self) -> int:
        return len(self.latencies_s)

    @property
    def throughput(self) -> float:
        """Answered requests (or operations) per second."""
        return self.answered / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def p(self, q: float) -> float:
        """The `q`-th latency percentile in milliseconds."""
        return percentile(self.latencies_s, q) * 1000

    def summary(self) -> dict[str, Any]:
        return {
            "answered": self.answered,
            "errors": sum(self.errors.values()),
            "error_kinds": dict(self.errors.most_common(5)),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_per_s": round(self.throughput, 1),
            "p50_ms": round(self.p(50), 2),
            "p90_ms": round(self.p(90), 2),
            "p99_ms": round(self.p(99), 2),
            "max_ms": round(self.p(100), 2),
        }
