"""Talking to the fake provider's admin and ledger API from tests."""

from __future__ import annotations

from typing import Any

import httpx


class FaultInjector:
    """Adds fault rules to the fake provider and reads its ledger."""

    def __init__(self, provider_url: str):
        self.url = provider_url

    def add(self, fault: str, *, times: int = 1, **filters: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/_faults", json={"fault": fault, "times": times, **filters}, timeout=10
        )
        response.raise_for_status()
        rule: dict[str, Any] = response.json()
        return rule

    def remaining(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/_faults", timeout=10)
        response.raise_for_status()
        rules: list[dict[str, Any]] = response.json()["faults"]
        return rules

    def clear(self) -> None:
        httpx.delete(f"{self.url}/_faults", timeout=10).raise_for_status()

    def charges(self, **match: Any) -> list[dict[str, Any]]:
        """Ledger entries whose fields equal every `match` value."""
        response = httpx.get(f"{self.url}/charges", timeout=10)
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()["charges"]
        return [e for e in entries if all(e.get(k) == v for k, v in match.items())]

    def refunds(self, **match: Any) -> list[dict[str, Any]]:
        """Refunds in the ledger whose fields equal every `match` value."""
        response = httpx.get(f"{self.url}/refunds", timeout=10)
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()["refunds"]
        return [e for e in entries if all(e.get(k) == v for k, v in match.items())]

    def captures(self, **match: Any) -> list[dict[str, Any]]:
        """Captures in the ledger whose fields equal every `match` value."""
        return self._listed("captures", match)

    def voids(self, **match: Any) -> list[dict[str, Any]]:
        """Voids in the ledger whose fields equal every `match` value."""
        return self._listed("voids", match)

    def _listed(self, collection: str, match: dict[str, Any]) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/{collection}", timeout=10)
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()[collection]
        return [e for e in entries if all(e.get(k) == v for k, v in match.items())]
