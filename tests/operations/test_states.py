"""Properties of the operation state machine, alone and as the repository writes it.

The machine: only the declared transitions can happen, and COMPLETED / FAILED never change.
The repository, against the real database: its verbs (`mark_sent`, `record_final`, `defer`,
`mark_unknown`) fired with random triggers, stale fences and wrong expected states move a row
only by a declared edge, only for the current fence and the current state, audit exactly the
writes they make, and never move a terminal operation; `take_over` never takes a terminal one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.rows import DictRow

from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.states import (
    MACHINE,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    State,
    Trigger,
)
from app.operations.values import OwnedRef, Schedule, StoredResponse
from tests.support.factories.claims import claim_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import operation, transitions

# The declared table, read independently of the machine built from it.
DECLARED: dict[tuple[State, Trigger], State] = {
    (source, trigger): dest for trigger, sources, dest in TRANSITIONS for source in sources
}

states = st.sampled_from(list(State))
triggers = st.sampled_from(list(Trigger))


def test_terminal_states_have_no_outgoing_transition() -> None:
    assert {State.COMPLETED, State.FAILED} == TERMINAL
    assert not [edge for edge in DECLARED if edge[0] in TERMINAL]


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("trigger", list(Trigger))
def test_every_state_and_trigger_follows_the_declared_table(state: State, trigger: Trigger) -> None:
    if (state, trigger) in DECLARED:
        assert MACHINE.next_state(state, trigger) == DECLARED[state, trigger]
    else:
        with pytest.raises(IllegalTransition):
            MACHINE.next_state(state, trigger)


@settings(max_examples=200, deadline=None)
@given(start=states, fired=st.lists(triggers, max_size=30))
def test_random_trigger_sequences_take_only_declared_edges(
    start: State, fired: list[Trigger]
) -> None:
    state = start
    for trigger in fired:
        before = state
        if (before, trigger) in DECLARED:
            state = MACHINE.next_state(before, trigger)
            assert state == DECLARED[before, trigger]
            assert before not in TERMINAL, f"{before} left by {trigger}"
        else:
            with pytest.raises(IllegalTransition) as refused:
                MACHINE.next_state(before, trigger)
            assert (refused.value.state, refused.value.trigger) == (before, trigger)


@settings(max_examples=100, deadline=None)
@given(terminal=st.sampled_from(sorted(TERMINAL)), fired=st.lists(triggers, min_size=1))
def test_terminal_states_never_change(terminal: State, fired: list[Trigger]) -> None:
    for trigger in fired:
        with pytest.raises(IllegalTransition):
            MACHINE.next_state(terminal, trigger)


@dataclass(frozen=True)
class Apply:
    """An owner fires `trigger` with a fence `fence_lag` behind the current one (0: it is
    the current owner) and believing the state is `believed` (None: the true state)."""

    trigger: Trigger
    fence_lag: int
    believed: State | None


@dataclass(frozen=True)
class TakeOver:
    """A new owner takes the operation over once the current lease has run out."""


Step = Apply | TakeOver

steps = st.lists(
    st.one_of(
        st.builds(
            Apply,
            trigger=triggers,
            # Mostly the current owner; sometimes one that was fenced out.
            fence_lag=st.sampled_from([0, 0, 0, 1, 2]),
            believed=st.one_of(st.none(), st.none(), states),
        ),
        st.just(TakeOver()),
    ),
    min_size=1,
    max_size=15,
)

TRACKED = ("state", "fence", "last_error", "lease_owner", "updated_at")


def _tracked(row: dict[str, Any]) -> dict[str, Any]:
    return {c: row[c] for c in TRACKED}


async def _new_operation(async_db: AsyncDb, tenant: TenantHandle) -> uuid.UUID:
    operation_id = uuid.uuid4()
    async with async_db.db.transaction() as conn:
        assert await claim_payment(
            conn,
            tenant_id=tenant.id,
            operation_id=operation_id,
            key=f"prop-{operation_id}",
        )
    return operation_id


async def _apply(async_db: AsyncDb, ref: OwnedRef, trigger: Trigger, tag: str) -> OwnedRef | None:
    """Fire `trigger` through the repository verb that owns it, as owner `tag`."""
    async with async_db.db.transaction() as conn:
        match trigger:
            case Trigger.SEND | Trigger.RETRY | Trigger.RESEND:
                return await operations.mark_sent(conn, ref, trigger, actor=tag, lease_s=30)
            case Trigger.COMPLETE | Trigger.FAIL:
                stored = StoredResponse(status=200, headers={}, body=b"{}")
                return await operations.record_final(
                    conn, ref, trigger, actor=tag, reason=tag, stored=stored
                )
            case Trigger.DEFER:
                return await operations.defer(conn, ref, actor=tag, reason=tag)
            case Trigger.LOSE:
                schedule = Schedule(attempts=0, delay_s=60, needs_attention=False)
                return await operations.mark_unknown(
                    conn, ref, actor=tag, reason=tag, schedule=schedule
                )
            case Trigger.FAILOVER:
                return await operations.fail_over(conn, ref, actor=tag, reason=tag, lease_s=30)


async def _take_over(async_db: AsyncDb, operation_id: uuid.UUID, owner: str) -> OwnedRef | None:
    async with async_db.db.transaction() as conn:
        # Only an expired lease can be taken over: end the current one, as time would.
        await conn.execute(
            "UPDATE operations SET lease_expires_at = now() WHERE id = %s", (operation_id,)
        )
    async with async_db.db.transaction() as conn:
        snapshot = await reads.get_snapshot(conn, operation_id, key_ttl_s=86400)
        assert snapshot is not None
        return await leases.take_over(conn, snapshot, owner=owner, lease_s=30)


def test_repository_writes_only_declared_edges_with_the_current_fence(
    async_db: AsyncDb, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    @settings(max_examples=60, deadline=None)
    @given(plan=steps)
    def scenario(plan: list[Step]) -> None:
        operation_id = async_db.run(_new_operation(async_db, tenant))
        state, fence = State.PROVIDER_REQUEST_SENT, 1
        for number, step in enumerate(plan):
            before = operation(db, operation_id)
            audited = len(transitions(db, operation_id))
            was_terminal = state in TERMINAL
            tag = f"step {number}"

            if isinstance(step, TakeOver):
                owned = async_db.run(_take_over(async_db, operation_id, f"owner-{number}"))
                after = operation(db, operation_id)
                if was_terminal:
                    assert owned is None
                    assert (after["state"], after["fence"]) == (before["state"], fence)
                else:
                    assert owned is not None
                    assert (owned.fence, owned.state) == (fence + 1, state)
                    fence = owned.fence
                    assert after["fence"] == fence
                assert len(transitions(db, operation_id)) == audited
                continue

            believed = step.believed or state
            ref = OwnedRef(
                id=operation_id,
                tenant_id=tenant.id,
                created_at=before["created_at"],
                fence=fence - step.fence_lag,
                state=believed,
                attempts=0,
            )
            declared = (believed, step.trigger) in DECLARED
            current = step.fence_lag == 0 and believed == state
            if not declared:
                # The machine refuses before any SQL runs.
                with pytest.raises(IllegalTransition):
                    async_db.run(_apply(async_db, ref, step.trigger, tag))
                moved = None
            else:
                moved = async_db.run(_apply(async_db, ref, step.trigger, tag))

            after = operation(db, operation_id)
            history = transitions(db, operation_id)
            if declared and current:
                assert moved is not None
                state = DECLARED[believed, step.trigger]
                assert (moved.state, moved.fence) == (state, fence)
                assert (after["state"], after["fence"]) == (state, fence)
                assert len(history) == audited + 1
                last = history[-1]
                assert (
                    last["from_state"],
                    last["to_state"],
                    last["trigger"],
                    last["fence"],
                    last["actor"],
                ) == (believed.value, state.value, step.trigger.value, fence, tag)
            else:
                # A stale fence or a wrong belief about the state: nothing written at all.
                assert moved is None
                assert _tracked(after) == _tracked(before)
                assert len(history) == audited
            if was_terminal:
                assert after["state"] == before["state"], "a terminal operation moved"

        # Every audited write was made under the fence current at the time: fences in the
        # audit trail never go down.
        fences = [t["fence"] for t in transitions(db, operation_id)]
        assert fences == sorted(fences)
        # These rows have no payment: leave none behind for the workers of later tests.
        db.execute("DELETE FROM operations WHERE id = %s", (operation_id,))

    scenario()
