"""What a chaos run did and found (`ChaosReport`), and the summary table it prints.

`chaos/run.py` fills it; `report.json` is its fields, `summary.txt` (with `--results`) its
`summary()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos import providers as routed
from chaos.notifications import summary_lines as notification_lines
from chaos.settlement import summary_lines
from chaos.two_step_books import summary_lines as two_step_lines


@dataclass
class ChaosReport:
    """What a run did and found."""

    config: dict[str, Any]
    requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    intents: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    operation_count: int = 0  # payments' and refunds' operations, every state
    needs_attention: int = 0
    charges: int = 0
    refunds: dict[str, int] = field(default_factory=dict)
    # Manual payments, their captures and voids (chaos/two_step_books.py, two_step_checks.py):
    # what each check compared, and the provider's captures and voids against our books.
    two_step: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    schedule_errors: list[str] = field(default_factory=list)
    harness_failures: list[str] = field(default_factory=list)
    recovery: dict[str, int] = field(default_factory=dict)
    # Events and their webhook deliveries to the chaos consumer (chaos/webhooks.py).
    webhooks: dict[str, int] = field(default_factory=dict)
    # The providers' notifications: what was made, sent, kept and applied, and what
    # accounts for the rest (chaos/notifications.py); empty when the run does not notify.
    notifications: dict[str, Any] = field(default_factory=dict)
    # The processes' provider circuit breakers over time (chaos/breakers.py), and what they
    # did not show of the outage: findings, not violations.
    breakers: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    # The settlement pass after convergence (chaos/settlement.py): the days settled, each
    # run's summary, the items left open by kind.
    settlement: dict[str, Any] = field(default_factory=dict)
    # `--failover`: when the primary died and the standby was promoted (wall clock).
    failover: dict[str, Any] = field(default_factory=dict)
    # `--providers 2`: each provider's charges and faults, the failovers, their outcomes
    # (chaos/providers.py); empty with one provider.
    providers: dict[str, Any] = field(default_factory=dict)
    phase_end_at: float | None = None  # wall clock; the phase began `duration_s` before
    last_fault_end_s: float | None = None
    converge_s: float | None = None
    converged: bool = False
    wall_s: float = 0.0
    work_dir: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.violations and not self.gaps and not self.harness_failures and self.converged
        )

    def summary(self) -> str:
        kinds = self.faults.get("kinds", {})
        fault_lines = [
            f"    {kind:34} injected {v['injected']:3}  window hit {v['hit']:3}"
            for kind, v in sorted(kinds.items())
        ]
        lines = [
            "chaos run summary",
            f"  requests sent        {self.requests}  {dict(sorted(self.statuses.items()))}",
            f"  intents              {sum(self.intents.values())}  {self.intents}",
            f"  operations           {sum(self.operations.values())}  {self.operations}"
            f"  (needs_attention {self.needs_attention})",
            f"  provider charges     {self.charges}",
            f"  refunds              {self.refunds}",
            f"  recovery             {self.recovery}",
            f"  restarts             {self.restarts}",
            f"  events and webhooks  {self.webhooks}",
            *notification_lines(self.notifications),
            *two_step_lines(self.two_step),
            "  faults injected:",
            *fault_lines,
            f"  fault windows never hit: {self.gaps or 'none'}",
            *self._breaker_lines(),
            *self._failover_lines(),
            *routed.summary_lines(self.providers, self._origin()),
            *(
                [f"  findings             {len(self.findings)}"]
                + [f"    {finding[:300]}" for finding in self.findings[:10]]
                if self.providers
                else []
            ),
            *summary_lines(self.settlement),
            f"  converged            {self.converged}, "
            + (
                f"{self.converge_s:.1f} s after the fault phase ended (its last fault ended "
                f"{self.last_fault_end_s:.1f} s after it)"
                if self.converge_s is not None and self.last_fault_end_s is not None
                else "-"
            ),
            f"  violations           {len(self.violations)}",
            *(f"    {v}" for v in self.violations[:30]),
            f"  wall time            {self.wall_s:.1f} s; logs and history in {self.work_dir}",
        ]
        if self.schedule_errors:
            lines.append(f"  schedule notes       {self.schedule_errors[:10]}")
        if self.harness_failures:
            lines.append(f"  HARNESS FAILED      {self.harness_failures}")
        return "\n".join(lines)

    def _origin(self) -> float | None:
        duration = self.config.get("duration_s")
        if self.phase_end_at is None or duration is None:
            return None
        return self.phase_end_at - float(duration)

    def _failover_lines(self) -> list[str]:
        duration = self.config.get("duration_s")
        if not self.failover or self.phase_end_at is None or duration is None:
            return []
        origin = self.phase_end_at - float(duration)
        killed, promoted = self.failover.get("killed_at"), self.failover.get("promoted_at")
        if killed is None or promoted is None:
            return [f"  database failover    did not happen: {self.failover.get('error')}"]
        return [
            f"  database failover    primary killed at {killed - origin:.1f} s, "
            f"standby promoted at {promoted - origin:.1f} s"
        ]

    def _breaker_lines(self) -> list[str]:
        """The outage and each process's breaker changes, in seconds into the fault phase."""
        duration = self.config.get("duration_s")
        if self.phase_end_at is None or duration is None:
            return []
        origin = self.phase_end_at - float(duration)
        outage = (self.faults.get("outage") or {}) if self.faults else {}
        lines = []
        if outage.get("armed_at") is not None and outage.get("used_up_at") is not None:
            lines.append(
                f"  provider outage      {outage['armed_at'] - origin:.1f}-"
                f"{outage['used_up_at'] - origin:.1f} s: {outage.get('consumed', 0)} charges hung"
            )
        for source in ("sampled", "logged"):
            for name, changes in sorted((self.breakers.get(source) or {}).items()):
                steps = ", ".join(
                    f"{c['at'] - origin:.1f} {'restart' if c.get('restart') else c['state']}"
                    for c in changes
                )
                label = "metric" if source == "sampled" else "log"
                lines.append(f"  breaker {name:8} ({label:6}) {steps or '-'}")
        if outage:
            lines.append(f"  breaker findings     {self.findings or 'none'}")
        return lines
