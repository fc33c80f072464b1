"""What a settlement run reports: its summary, and the reasons it stops."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class DayTaken(Exception):
    """Another run holds the day."""


class DayLost(Exception):
    """The run's day was taken over by another run (the run's lease ran out): the run's
    write was refused by the day's fence, and the run stops with nothing more written."""


class LagDiffers(Exception):
    """The provider's reports state another settlement lag than we were told to expect."""


@dataclass
class Summary:
    """What one run read, found and changed; printed by `payments settle`, kept per day."""

    day: str
    their_charges: int = 0
    their_refunds: int = 0
    our_payments: int = 0
    our_refunds: int = 0
    # Captures of authorizations (a manual payment's charge is counted with the charges).
    their_captures: int = 0
    our_captures: int = 0
    looked_up: int = 0
    compared: int = 0
    agreed: int = 0
    lines_recorded: int = 0
    found: dict[str, int] = field(default_factory=dict)
    opened: int = 0
    reopened: int = 0
    kept_closed: int = 0
    auto_resolved: int = 0
    recovering: int = 0
    other_days: int = 0
    foreign: int = 0
    # Declines left under the key of an attempt a payment failed over from (expected).
    failover_declines: int = 0
    # Records of ours held by a provider no longer configured: not compared.
    unconfigured: int = 0
    # Per provider: what its books listed and looked up (`their_charges`, `their_refunds`,
    # `their_captures`) and the records of ours it holds (`our_payments`, `our_refunds`,
    # `our_captures`).
    by_provider: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The summary as stored and printed with `--json`."""
        return asdict(self)
