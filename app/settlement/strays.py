"""Strays: records a provider holds under a key of ours other than the one we expect there.

A record of ours is expected at the provider holding it, under one key (`matching.py`). A
record a provider holds under another key of ours (`parse_key`: a payment's attempt n is
`payment-<id>:<n>`) is judged by `judge_stray`:

    the key was sent           theirs                      verdict
    here (route[n] is this     declined                    nothing: the decline a failover
      provider), attempt n                                   left behind (counted)
      other than the one the   charged, our operation      recover (the reconciler's lookup
      payment's outcome came     not final, n <= attempt     of every attempt finds it)
      from                     charged, otherwise          orphan: a second charge, or one
                                                              of an attempt we failed over from
    never here                 any record                  orphan: a key of ours where we
                                                              never sent it

"Charged" is any record the provider made under the key: money taken, or held (a manual
payment's authorization: a second hold is as much a stray as a second charge). A refund's or
a capture's key has no attempts: sent only to its provider, it can only be a stray elsewhere.
"""

from __future__ import annotations

from app.provider.keys import split_attempt_key
from app.settlement.books import TheirRecord
from app.settlement.matching import (
    AUTHORIZED,
    HELD,
    NOUNS,
    SETTLED_STATES,
    THEY_MADE,
    TOOK_EFFECT,
    Difference,
    OurRecord,
    Verdict,
    is_our_key,
)
from app.settlement.rows import ItemKind, RecordType


def parse_key(record_type: RecordType, provider_key: str) -> tuple[str, int] | None:
    """The key of ours `provider_key` belongs to and the attempt it names, or None when it is
    not a key we derive: `payment-<id>` is attempt 0, `payment-<id>:<n>` attempt n >= 1
    (`app/provider/keys.py: attempt_key`); a refund or capture has its key alone."""
    if is_our_key(record_type, provider_key):
        return provider_key, 0
    if record_type is not RecordType.CHARGE:
        return None
    return split_attempt_key(provider_key)


def _where(record_type: RecordType, ours: OurRecord) -> str:
    if record_type is not RecordType.CHARGE:
        return f"we sent the {NOUNS[record_type]} to {ours.provider}"
    return f"the payment is {ours.status} at attempt {ours.attempt}, at {ours.provider}"


def _taken(theirs: TheirRecord) -> str:
    if theirs.status == AUTHORIZED:
        return "money held"
    return "money taken" if theirs.status in THEY_MADE else f"{theirs.status}: nothing taken"


def judge_stray(
    record_type: RecordType, ours: OurRecord, attempt: int, theirs: TheirRecord, provider: str
) -> Verdict:
    """The verdict on a record `provider` holds under a key of `ours` that is not the one
    `ours` is expected under there: the key of its attempt `attempt` (a refund's or a
    capture's is 0), sent to that attempt's provider only. See the module's docstring."""
    noun = NOUNS[record_type]
    charged = theirs.status in THEY_MADE
    sent_to = ours.sent_to(attempt)
    label = f"attempt {attempt}'s key" if record_type is RecordType.CHARGE else "its key"
    where = _where(record_type, ours)
    if sent_to != provider:
        went = f"sent only to {sent_to}" if sent_to is not None else "of an attempt never made"
        return Verdict(
            (
                Difference(
                    ItemKind.ORPHAN,
                    f"the provider made this {noun} under {label}, {went}, never here "
                    f"({_taken(theirs)}); {where}",
                ),
            )
        )
    if not charged:
        return Verdict(failover_decline=True)
    if ours.operation_state not in SETTLED_STATES and attempt <= ours.attempt:
        return Verdict(recover=True)
    if ours.status in TOOK_EFFECT or (ours.manual and ours.status in HELD):
        detail = f"the provider made this charge under {label}; {where}: a second charge"
    else:
        detail = f"the provider made this charge under {label}; we recorded none under it ({where})"
    return Verdict((Difference(ItemKind.ORPHAN, detail),))
