"""Magic account ids, like card-network test numbers: the account decides the outcome."""

from __future__ import annotations

from dataclasses import dataclass

DECLINE_PREFIX = "acc_decline_"
REJECT_ACCOUNT = "acc_reject"
# What `acc_decline_` with nothing after it declines with.
DEFAULT_DECLINE_CODE = "card_declined"


@dataclass(frozen=True)
class Approve:
    """The charge succeeds."""


@dataclass(frozen=True)
class Decline:
    """The charge is stored as declined with this code."""

    code: str


@dataclass(frozen=True)
class Reject:
    """The request is refused as invalid; nothing is stored."""

    detail: str


Decision = Approve | Decline | Reject


def decide(account_id: str) -> Decision:
    """What the provider does with a charge on `account_id`."""
    if account_id == REJECT_ACCOUNT:
        return Reject(f"account {REJECT_ACCOUNT} is rejected as invalid; nothing was charged")
    if account_id.startswith(DECLINE_PREFIX):
        return Decline(account_id.removeprefix(DECLINE_PREFIX) or DEFAULT_DECLINE_CODE)
    return Approve()
