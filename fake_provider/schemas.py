"""Request and response bodies of the fake provider's HTTP API."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_serializer,
)

# What a charge's request was answered: an automatic charge `succeeded` or was `declined`, a
# manual one was `authorized` (the money held, to be captured or voided) or `declined`. It
# never changes afterwards.
ChargeStatus = Literal["succeeded", "declined", "authorized"]
# The statuses an edit of the ledger (`/_ledger`) gives a charge.
EditedChargeStatus = Literal["succeeded", "declined"]
# `automatic`: the charge takes the money at once; `manual`: it only authorizes it.
CaptureMode = Literal["automatic", "manual"]
# The calls a fault rule may be limited to (`FaultRuleRequest.call`): a send of that kind of
# record, or a lookup of one.
CallKind = Literal["charge", "refund", "capture", "void"]
# What a rule's `call` may name: a kind of call, or, for the notification faults only,
# `notification` (every event, whatever record it tells of; a kind limits them to the events
# of records of that kind).
RuleCall = CallKind | Literal["notification"]

FaultName = Literal[
    "latency",
    "unavailable",
    "timeout_before_commit",
    "timeout_after_commit",
    "error_after_commit",
    "drop_after_commit",
    "crash_after_commit",
    "unavailable_after_commit",
    "lookup_unavailable",
    "lookup_latency",
    "decline",
    "notify_duplicate",
    "notify_delay",
    "notify_drop",
    "notify_reorder",
    "notify_early",
    "notify_unknown_key",
]

# Visible ASCII, like the keys the payments API accepts from its own clients.
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
# A decline code a `decline` fault rule names: the shape of the codes real providers send
# (`insufficient_funds`), so a code the routing keys on cannot differ from one by case or a
# stray character.
DECLINE_CODE_PATTERN = r"^[a-z0-9_]{1,64}$"


class ChargeRequest(BaseModel):
    """The body of `POST /charges`; strict, so a string or float amount is a bad request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    amount_minor: Annotated[StrictInt, Field(gt=0)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    account_id: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    reference: Annotated[StrictStr, Field(max_length=128)] = ""
    capture: CaptureMode = "automatic"


class Charge(BaseModel):
    """A charge in the ledger, as every charge endpoint returns it."""

    model_config = ConfigDict(frozen=True)

    charge_id: str
    status: ChargeStatus
    decline_code: str | None
    idempotency_key: str
    amount_minor: int
    currency: str
    account_id: str
    reference: str
    created_at: str
    capture: CaptureMode
    # An automatic charge: its amount if it succeeded, else 0; a manual one: the sum of its
    # captures.
    amount_captured_minor: int
    # Whether the authorization was voided (its rest released); always false for automatic.
    voided: bool

    def same_request(self, request: ChargeRequest) -> bool:
        """Whether `request` is the one this charge was created from."""
        return (
            self.amount_minor == request.amount_minor
            and self.currency == request.currency
            and self.account_id == request.account_id
            and self.reference == request.reference
            and self.capture == request.capture
        )


class RefundRequest(BaseModel):
    """The body of `POST /refunds`: which charge, and how much of it to give back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    charge_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    amount_minor: Annotated[StrictInt, Field(gt=0)]


class Refund(BaseModel):
    """A refund in the ledger, as every refund endpoint returns it."""

    model_config = ConfigDict(frozen=True)

    refund_id: str
    charge_id: str
    idempotency_key: str
    amount_minor: int
    status: Literal["succeeded"]
    created_at: str

    def same_request(self, request: RefundRequest) -> bool:
        """Whether `request` is the one this refund was created from."""
        return self.charge_id == request.charge_id and self.amount_minor == request.amount_minor


class RefundList(BaseModel):
    """Every refund, oldest first."""

    refunds: list[Refund]


class ChargeList(BaseModel):
    """The whole ledger, oldest first."""

    charges: list[Charge]


class FaultRuleRequest(BaseModel):
    """The body of `POST /_faults`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fault: FaultName
    times: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 1
    account_id: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None
    idempotency_key: Annotated[StrictStr, Field(pattern=IDEMPOTENCY_KEY_PATTERN)] | None = None
    delay_s: Annotated[StrictFloat | StrictInt, Field(ge=0, le=3600)] | None = None
    decline_code: Annotated[StrictStr, Field(pattern=DECLINE_CODE_PATTERN)] | None = None
    # How many times a `notify_duplicate` rule sends its event.
    copies: Annotated[StrictInt, Field(ge=2, le=10)] | None = None
    # Only calls of this kind (their sends and lookups); None: every kind.
    call: RuleCall | None = None


class FaultRuleView(BaseModel):
    """A fault rule as the admin API shows it, with the calls it still applies to."""

    id: int
    fault: FaultName
    times: int
    remaining: int
    account_id: str | None
    idempotency_key: str | None
    delay_s: float | None
    decline_code: str | None
    call: RuleCall | None
    # Shown only for `notify_duplicate`, the one fault that has copies.
    copies: int | None = None

    @model_serializer(mode="wrap")
    def _copies_only_where_they_apply(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        shown: dict[str, Any] = handler(self)
        if self.copies is None:
            shown.pop("copies", None)
        return shown


class FaultRuleList(BaseModel):
    """The rules with calls left, in the order they are matched."""

    faults: list[FaultRuleView]


# A charge as the listings show it: its stored status, or for a succeeded charge with refunds
# how much of it they gave back.
# An authorization is listed as `authorized` whatever was captured or refunded of it: its
# `amount_captured_minor`, `amount_refunded_minor` and `voided` say that.
ListedChargeStatus = Literal[
    "succeeded", "declined", "authorized", "partially_refunded", "refunded"
]


class ListedCharge(BaseModel):
    """A charge in `GET /charges?created_gte=...`: the charge with what was refunded of it."""

    model_config = ConfigDict(frozen=True)

    charge_id: str
    idempotency_key: str
    amount_minor: int
    amount_refunded_minor: int
    currency: str
    status: ListedChargeStatus
    decline_code: str | None
    account_id: str
    reference: str
    created_at: str
    capture: CaptureMode
    amount_captured_minor: int
    voided: bool


class ListedRefund(BaseModel):
    """A refund in `GET /refunds?created_gte=...`, with its charge's currency."""

    model_config = ConfigDict(frozen=True)

    refund_id: str
    charge_id: str
    idempotency_key: str
    amount_minor: int
    currency: str
    status: Literal["succeeded"]
    created_at: str


class ChargePage(BaseModel):
    """One page of a charge listing, and whether its window holds more after it."""

    data: list[ListedCharge]
    has_more: bool


class RefundPage(BaseModel):
    """One page of a refund listing, and whether its window holds more after it."""

    data: list[ListedRefund]
    has_more: bool


class CaptureRequest(BaseModel):
    """The body of `POST /charges/{charge_id}/captures`: how much of the authorization to take."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    amount_minor: Annotated[StrictInt, Field(gt=0)]


class Capture(BaseModel):
    """A capture of an authorization, as every capture endpoint (and listing) returns it."""

    model_config = ConfigDict(frozen=True)

    capture_id: str
    charge_id: str
    idempotency_key: str
    amount_minor: int
    currency: str
    status: Literal["succeeded"]
    created_at: str

    def same_request(self, charge_id: str, request: CaptureRequest) -> bool:
        """Whether a capture of `charge_id` asking `request` is the one this was made from."""
        return self.charge_id == charge_id and self.amount_minor == request.amount_minor


class VoidRequest(BaseModel):
    """The body of `POST /charges/{charge_id}/voids`: `{}`, and nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Void(BaseModel):
    """A void of an authorization, as every void endpoint (and listing) returns it."""

    model_config = ConfigDict(frozen=True)

    void_id: str
    charge_id: str
    idempotency_key: str
    # What was left to capture when the authorization was voided.
    amount_released_minor: int
    currency: str
    status: Literal["succeeded"]
    created_at: str

    def same_request(self, charge_id: str) -> bool:
        """Whether a void of `charge_id` is the one this was made from."""
        return self.charge_id == charge_id


class CaptureList(BaseModel):
    """Every capture, oldest first."""

    captures: list[Capture]


class VoidList(BaseModel):
    """Every void, oldest first."""

    voids: list[Void]


class CapturePage(BaseModel):
    """One page of a capture listing, and whether its window holds more after it."""

    data: list[Capture]
    has_more: bool


class VoidPage(BaseModel):
    """One page of a void listing, and whether its window holds more after it."""

    data: list[Void]
    has_more: bool


class SettlementLine(BaseModel):
    """One charge, capture or refund in a day's settlement report."""

    id: str
    type: Literal["charge", "capture", "refund"]
    charge_id: str | None
    idempotency_key: str
    gross_minor: int
    fee_minor: int
    net_minor: int
    currency: str
    status: Literal["succeeded"]
    payout_id: str
    settled_on: str
    created_at: str


class Payout(BaseModel):
    """What one payout (a currency, a settlement day) pays: the sums of its lines."""

    payout_id: str
    currency: str
    count: int
    gross_minor: int
    fee_minor: int
    net_minor: int


class SettlementReport(BaseModel):
    """`GET /settlements/{date}`: the lines settled that day, and the payouts they add up to."""

    date: str
    settlement_lag_days: int
    complete: bool
    payouts: list[Payout]
    data: list[SettlementLine]


class LedgerChargeRequest(BaseModel):
    """The body of `POST /_ledger/charges`: a charge the payments service never asked for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idempotency_key: Annotated[StrictStr, Field(pattern=IDEMPOTENCY_KEY_PATTERN)]
    amount_minor: Annotated[StrictInt, Field(gt=0)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    account_id: Annotated[StrictStr, Field(min_length=1, max_length=64)] = "acc_orphan"
    reference: Annotated[StrictStr, Field(max_length=128)] = ""
    status: EditedChargeStatus = "succeeded"
    created_at: StrictStr | None = None


class LedgerChargeChange(BaseModel):
    """The body of `PATCH /_ledger/charges/{charge_id}`: the members to overwrite."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    amount_minor: Annotated[StrictInt, Field(gt=0)] | None = None
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")] | None = None
    status: EditedChargeStatus | None = None
    created_at: StrictStr | None = None


class LedgerRefundChange(BaseModel):
    """The body of `PATCH /_ledger/refunds/{refund_id}`: the members to overwrite."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    amount_minor: Annotated[StrictInt, Field(gt=0)] | None = None
    created_at: StrictStr | None = None


# The most changes one `PATCH /_ledger/charges` or `/_ledger/refunds` takes.
MAX_LEDGER_EDITS = 100_000


class LedgerChargeEdit(LedgerChargeChange):
    """One change of `PATCH /_ledger/charges`: the charge, and the members to overwrite."""

    charge_id: StrictStr


class LedgerChargeEdits(BaseModel):
    """The body of `PATCH /_ledger/charges`: changes of many charges, made all together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    changes: Annotated[list[LedgerChargeEdit], Field(min_length=1, max_length=MAX_LEDGER_EDITS)]


class LedgerRefundEdit(LedgerRefundChange):
    """One change of `PATCH /_ledger/refunds`: the refund, and the members to overwrite."""

    refund_id: StrictStr


class LedgerRefundEdits(BaseModel):
    """The body of `PATCH /_ledger/refunds`: changes of many refunds, made all together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    changes: Annotated[list[LedgerRefundEdit], Field(min_length=1, max_length=MAX_LEDGER_EDITS)]


class LedgerEdited(BaseModel):
    """The answer to `PATCH /_ledger/charges` or `/_ledger/refunds`: how many records changed."""

    changed: int
