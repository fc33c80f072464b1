"""Which providers a payment's attempts go to, and which declines may go elsewhere.

`PAYMENTS_ROUTING` (JSON, `RoutingSpec`) holds an ordered list of routes and the decline
codes that are retryable at another provider. The first route whose filters all match a
payment (its tenant, currency and amount in minor units, each filter optional) gives its
providers in priority order; with `weights`, the first attempt's provider is drawn by weight
among them and the rest follow in the listed order. No route matching, or no routing at all,
is every configured provider in the order `PAYMENTS_PROVIDERS` lists them.

The route is chosen once, at the claim, and stored on the payment (`payments.route`): attempt
n always goes to the route's provider n, whoever sends it and whatever the configuration
says by then, so one attempt's key never reaches two providers.

A decline is final unless its code is in `retry_elsewhere`: codes that say the provider or
its acquirer could not take the payment right now, not that the payer cannot pay. Card
declines (`card_declined`, `insufficient_funds`, ...) go to the client as they are: another
provider would only decline them again, or, worse, approve what the issuer refused.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# What a provider answers when it, not the payer, is the trouble (Hyperswitch calls these
# "retryable at the next connector"); an operator widens or narrows it in PAYMENTS_ROUTING.
DEFAULT_RETRY_ELSEWHERE: tuple[str, ...] = (
    "processor_declined",
    "processor_unavailable",
    "issuer_unavailable",
    "try_again_later",
)


class Route(BaseModel):
    """One route: its filters (each optional) and the providers it sends to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: tuple[uuid.UUID, ...] = ()
    currencies: tuple[str, ...] = ()
    min_amount_minor: int | None = Field(default=None, ge=0)
    max_amount_minor: int | None = Field(default=None, ge=0)
    providers: tuple[str, ...] = Field(min_length=1)
    weights: dict[str, int] | None = None

    @field_validator("currencies")
    @classmethod
    def _upper(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for code in value:
            if len(code) != 3 or not code.isalpha():
                raise ValueError(f"{code!r} is not an ISO 4217 alphabetic code")
        return tuple(code.upper() for code in value)

    @model_validator(mode="after")
    def _consistent(self) -> Route:
        if len(set(self.providers)) != len(self.providers):
            # One attempt per provider: a provider twice would send two keys to it.
            raise ValueError(f"a route names a provider twice: {list(self.providers)}")
        if (
            self.min_amount_minor is not None
            and self.max_amount_minor is not None
            and self.min_amount_minor > self.max_amount_minor
        ):
            raise ValueError("a route's min_amount_minor exceeds its max_amount_minor")
        if self.weights is not None:
            if set(self.weights) != set(self.providers):
                raise ValueError("a route's weights must name exactly its providers")
            if any(weight < 0 for weight in self.weights.values()) or not any(
                self.weights.values()
            ):
                raise ValueError("a route's weights must be >= 0, and one of them > 0")
        return self

    def matches(self, tenant_id: uuid.UUID, currency: str, amount_minor: int) -> bool:
        if self.tenants and tenant_id not in self.tenants:
            return False
        if self.currencies and currency not in self.currencies:
            return False
        if self.min_amount_minor is not None and amount_minor < self.min_amount_minor:
            return False
        return self.max_amount_minor is None or amount_minor <= self.max_amount_minor


class RoutingSpec(BaseModel):
    """`PAYMENTS_ROUTING`: the routes, first match wins, and the declines retried elsewhere."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    routes: tuple[Route, ...] = ()
    retry_elsewhere: tuple[str, ...] = DEFAULT_RETRY_ELSEWHERE

    def check_providers(self, names: Sequence[str]) -> None:
        """Raise `ValueError` for a route that names a provider not in `names`."""
        for i, route in enumerate(self.routes):
            unknown = [name for name in route.providers if name not in names]
            if unknown:
                raise ValueError(f"route {i} names unknown providers: {unknown}")


@dataclass(frozen=True)
class RoutingTable:
    """The routing as the service applies it, over the configured providers' names."""

    providers: tuple[str, ...]
    spec: RoutingSpec

    def __post_init__(self) -> None:
        self.spec.check_providers(self.providers)

    def route(
        self,
        tenant_id: uuid.UUID,
        currency: str,
        amount_minor: int,
        *,
        rng: random.Random | None = None,
    ) -> tuple[str, ...]:
        """The providers of a new payment's attempts, in order (stored with the payment)."""
        for route in self.spec.routes:
            if route.matches(tenant_id, currency, amount_minor):
                return _ordered(route, rng or _RNG)
        return self.providers

    def retries_elsewhere(self, decline_code: str | None) -> bool:
        """Whether a decline with this code charged nothing the next provider could not
        take: the payment may fail over instead of being declined."""
        return decline_code is not None and decline_code in self.spec.retry_elsewhere


_RNG = random.Random()


def _ordered(route: Route, rng: random.Random) -> tuple[str, ...]:
    if route.weights is None:
        return route.providers
    weights = [route.weights[name] for name in route.providers]
    first = rng.choices(route.providers, weights=weights)[0]
    return (first, *(name for name in route.providers if name != first))


def single(name: str) -> RoutingTable:
    """The routing of a deployment with one provider: every payment goes to it."""
    return RoutingTable((name,), RoutingSpec())
