"""Concurrent duplicates, checked: one payment and one charge per group of identical requests.

Every request of a group carries the same key and body, sent at the same moment. What the
contract allows: exactly one request does the work (a 201 without `Idempotent-Replayed`),
the others are answered 409 in progress or with that same 201 replayed; every 201 of the
group names the same payment and charge; and the provider's ledger holds exactly one charge
for the group (counted from the database's payments for the group's merchant reference and
the ledger's charges under their provider keys, so a second payment made for the key would
show as a second charge). A group that breaks any of it is a violation, and the bench exits
non-zero (`python -m bench`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import Request, Response


@dataclass
class Group:
    """What one group's requests were answered, and what its 201s named."""

    statuses: Counter[int] = field(default_factory=Counter)
    first_201s: int = 0  # 201s not marked as replays: the requests that did the work
    payment_ids: set[str] = field(default_factory=set)
    charge_ids: set[str] = field(default_factory=set)
    charges: int | None = None  # in the provider's ledger, once counted


class DuplicateTally:
    """Counts each group's answers as they come (`on_response`), then its charges."""

    def __init__(self) -> None:
        self.groups: dict[int, Group] = {}

    def on_response(self, index: int, _request: Request, response: Response) -> None:
        group = self.groups.setdefault(index, Group())
        group.statuses[response.status] += 1
        if response.status != 201:
            return
        if response.headers.get("idempotent-replayed") != "true":
            group.first_201s += 1
        body: dict[str, Any] = json.loads(response.body)
        group.payment_ids.add(str(body.get("payment_id")))
        group.charge_ids.add(str(body.get("provider_charge_id")))

    def count_charges(self, charges: Mapping[int, int]) -> None:
        """The ledger's charges per group (`charges_per_group`); a group absent has none."""
        for index, group in self.groups.items():
            group.charges = charges.get(index, 0)

    def violations(self) -> list[str]:
        """Every group that had more than one payment or charge, or none it should have."""
        found = []
        for index, group in sorted(self.groups.items()):
            problems = []
            if group.first_201s > 1:
                problems.append(f"{group.first_201s} first 201s")
            if len(group.payment_ids) > 1:
                problems.append(f"201s name {len(group.payment_ids)} payments")
            if len(group.charge_ids) > 1:
                problems.append(f"201s name {len(group.charge_ids)} charges")
            if group.charges is not None and group.charges > 1:
                problems.append(f"{group.charges} charges in the ledger")
            if group.statuses[201] and group.charges == 0:
                problems.append("answered 201 with no charge in the ledger")
            if problems:
                statuses = dict(sorted(group.statuses.items()))
                found.append(f"group {index}: {', '.join(problems)} (statuses {statuses})")
        return found

    def summary(self) -> str:
        """One line for the bench's notes: groups, 201s and charges per group."""
        groups = list(self.groups.values())
        firsts = Counter(g.first_201s for g in groups)
        charges = Counter(g.charges for g in groups if g.charges is not None)
        return (
            f"{len(groups)} groups; groups by first 201s {dict(sorted(firsts.items()))}, "
            f"by ledger charges {dict(sorted(charges.items()))}; "
            f"{len(self.violations())} groups with more than one payment or charge"
        )


def charges_per_group(
    payments: Iterable[tuple[str | None, str]], ledger: Iterable[Mapping[str, Any]], tag: str
) -> dict[int, int]:
    """The ledger's charges per group index: `payments` are (merchant_reference,
    provider_key) rows of the bench's tenant; a group's reference is `{tag}-{index}`."""
    group_of_key: dict[str, int] = {}
    prefix = f"{tag}-"
    for reference, provider_key in payments:
        if reference is not None and reference.startswith(prefix):
            suffix = reference.removeprefix(prefix)
            if suffix.isdigit():
                group_of_key[provider_key] = int(suffix)
    counted: Counter[int] = Counter()
    for charge in ledger:
        index = group_of_key.get(str(charge["idempotency_key"]))
        if index is not None:
            counted[index] += 1
    return dict(counted)
