"""The table `python -m bench.compare` prints: every round of every side (a revision in a
scenario), each side's medians, and each side against the first.

"Against the first" is the first scenario of the same revision when several scenarios are
measured, else the first revision in the same scenario: the median of the rounds' ratios,
the lowest and highest in brackets. Both sides of a ratio ran in the same round, so what
the machine did meanwhile falls on both; the ratio of the medians would mix rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Round:
    """One revision's share of one round in one scenario: its throughput and its API's CPU
    per request."""

    revision: str
    scenario: str
    round: int
    answered: int
    per_s: float
    api_cpu_ms: float
    statuses: dict[str, int]


def side_label(
    revision: str, scenario: str, revisions: Sequence[str], scenarios: Sequence[str]
) -> str:
    """A side's name in the table: its revision, its scenario, or both when both vary."""
    if len(scenarios) == 1:
        return revision
    if len(revisions) == 1:
        return scenario
    return f"{revision} {scenario}"


def _ratios(values: list[float]) -> str:
    return f"**{statistics.median(values):.2f}x** ({min(values):.2f}-{max(values):.2f})"


def report(results: list[Round], revisions: Sequence[str], scenarios: Sequence[str]) -> str:
    """Every round of every side, each side's medians, and each side against the first
    scenario of its revision (or, with one scenario, the first revision): the median of the
    rounds' ratios, lowest and highest in brackets."""
    sides = [(revision, scenario) for revision in revisions for scenario in scenarios]
    names = [side_label(r, s, revisions, scenarios) for r, s in sides]
    title = scenarios[0] if len(scenarios) == 1 else revisions[0] if len(revisions) == 1 else ""
    lines = [
        f"| {title} | " + " | ".join(f"{n} per s | {n} API CPU ms" for n in names) + " |",
        "|---|" + "---:|" * (2 * len(sides)),
    ]

    def found(number: int, revision: str, scenario: str) -> Round:
        return next(
            r for r in results if (r.round, r.revision, r.scenario) == (number, revision, scenario)
        )

    rounds = sorted({row.round for row in results})
    for number in rounds:
        cells = []
        for side in sides:
            row = found(number, *side)
            cells += [f"{row.per_s:,.1f}", f"{row.api_cpu_ms:.3f}"]
        lines.append(f"| round {number} | " + " | ".join(cells) + " |")
    medians = []
    for revision, scenario in sides:
        own = [r for r in results if (r.revision, r.scenario) == (revision, scenario)]
        medians += [
            f"**{statistics.median(r.per_s for r in own):,.1f}**",
            f"**{statistics.median(r.api_cpu_ms for r in own):.3f}**",
        ]
    lines.append("| median | " + " | ".join(medians) + " |")
    if len(sides) == 1:
        return "\n".join(lines)
    against = scenarios[0] if len(scenarios) > 1 else revisions[0]
    ratios = []
    for revision, scenario in sides:
        base = (revision, scenarios[0]) if len(scenarios) > 1 else (revisions[0], scenario)
        if base == (revision, scenario):
            ratios += ["", ""]
            continue
        pairs = [(found(n, revision, scenario), found(n, *base)) for n in rounds]
        ratios += [
            _ratios([side.per_s / first.per_s for side, first in pairs]),
            _ratios([side.api_cpu_ms / first.api_cpu_ms for side, first in pairs]),
        ]
    lines.append(f"| against {against} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)
