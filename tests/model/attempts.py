"""Attempts across providers: the answers each gives, the lookup of every attempt, failover.

A payment has one attempt per provider, attempt n at provider n, each with its own derived
key `{payment}:{n}` (`Key`). The row names the current attempt; moving to the next one is a
fenced write (trigger `failover`) that commits the new attempt before its first send, like
`PROVIDER_REQUEST_SENT` before any send. Failover is allowed only when the current attempt
provably charged nothing and never will:

- a definite decline its provider marks retryable elsewhere: the provider holds the decline
  under the key, so any other request with that key gets the decline back;
- a refusal ("not processed"; a connection refused or a breaker open is the same answer, a
  request that never left) of the attempt's only send: the owner's own first send, or a
  client's retry of a `FAILED_RETRYABLE` attempt, whose earlier send was refused too.

A timeout or a lost answer is unknown, and a refused recovery resend may have the attempt's
first request still on its way: both stay at that provider and are looked up there. Recovery
(a worker, a client's inline retry, the operator) looks up every attempt by its key.
"""

from __future__ import annotations

from tests.model.steps import Step, Successors, spend
from tests.model.world import (
    Key,
    Mode,
    Mutation,
    Op,
    Owner,
    Phase,
    Result,
    Verdict,
    World,
    deciding,
    is_charge,
    key_name,
    with_owner,
)
from tests.model.writes import Writes


class Attempts(Writes):
    """The rules that know about attempts and providers."""

    def answers(self, w: World, o: Owner) -> list[tuple[Result, World, str]]:
        """What the provider of the owner's attempt may answer its charge request, and do."""
        key = self.key(o)
        where = f"provider {key[1]}"
        out: list[tuple[Result, World, str]] = []
        for verdict, known in deciding(w, key[1]):
            charge = verdict is Verdict.APPROVE
            if key in w.ledger:
                what = "has a charge under the key" if charge else "has declined the key"
                result = Result.CHARGED if charge else Result.DECLINED
                out.append((result, w, f"{where} {what}: replays it"))
            elif verdict is Verdict.REJECT:
                out.append((Result.REJECTED, known, f"{where} rejects it as invalid"))
            else:
                after = known._replace(ledger=w.ledger | {key}, orphans=w.orphans - {key})
                if charge and o.mode is Mode.RECOVER and self._charged_before(w, key):
                    after = after._replace(recharged=True)
                what = "charges" if charge else "declines it, retryable elsewhere"
                result = Result.CHARGED if charge else Result.DECLINED
                out.append((result, after, f"{where} {what}"))
        return out

    def look_up(self, w: World, o: Owner) -> tuple[Result, int, str]:
        """`find_charge` by the key of every attempt up to the owner's, the latest first.

        A charge under any of them is found (and is what gets recorded); else the latest
        attempt's decline, which lets recovery fail over; else nothing.
        """
        last = o.attempt
        first = last if self.mutation is Mutation.LATEST_ATTEMPT_ONLY else 0
        for n in range(last, first - 1, -1):
            key = (o.row, n, 0)
            if key in w.ledger and is_charge(w, key):
                return Result.FOUND, n, f"charge under {key_name(key)}"
        if (o.row, last, 0) in w.ledger:
            return Result.DECLINED, last, f"{key_name((o.row, last, 0))} declined"
        return Result.NOT_FOUND, last, "no charge"

    @staticmethod
    def _charged_before(w: World, key: Key) -> bool:
        """Whether an attempt before `key`'s holds a charge for its operation: one that only
        a wrong "not processed" (the model's `lies`) can make."""
        return any(k[0] == key[0] and k[1] < key[1] and is_charge(w, k) for k in w.ledger)

    def lies(self, w: World, answers: list[tuple[Result, World, str]]) -> None:
        """A charge answered "not processed", wrongly, while the budget allows (`lies`)."""
        if not w.budget.lies:
            return
        for result, after, what in list(answers):
            if result is Result.CHARGED:
                wrong = f"{what}, but answers 503 not processed (wrong)"
                answers.append((Result.NOT_PROCESSED, spend(after, lies=1), wrong))

    def proves_nothing_sent(self, o: Owner) -> bool:
        """A "not processed" answer proves the attempt charged nothing and never will.

        Only for the owner's own first send or retry: a recovery's resend refused may have
        the attempt's earlier request still on its way.
        """
        return o.mode is not Mode.RECOVER or self.mutation is Mutation.REFUSED_RESEND_IS_NOT_SENT

    def _refused(self, w: World, i: int, o: Owner, out: Successors) -> None:
        """The attempt's only send was refused: defer it for the client's retry, or fail over."""
        self._record(w, i, o, "defer", "defer", out)
        if o.attempt + 1 < self.bounds.providers:
            self._failover(w, i, o, out)

    def _failover(self, w: World, i: int, o: Owner, out: Successors) -> None:
        """Write the next attempt (fenced, lease renewed), then send it with its own key."""
        nxt = o.attempt + 1
        then = Owner(
            Phase.SENDING,
            o.row,
            o.fence,
            o.generation,
            Op.PROVIDER_REQUEST_SENT,
            Mode.FIRST,  # the new attempt's first send: a refusal of it proves nothing sent
            Result.NONE,
            nxt,
        )
        if self.mutation is Mutation.ATTEMPT_NOT_PERSISTED:
            text = f"goes on to attempt {nxt} at provider {nxt} without writing it"
            step = Step(self.names[i], "next_attempt", None, text)
            out.append((step, with_owner(w, i, then._replace(believed=o.believed))))
            return
        write = self._write(w, i, o, "next_attempt", "failover", then, release=False, attempt=nxt)
        out.append(write)
