"""Run the protocol model from the command line.

    python -m tests.model                    both models at the small bound (as CI does): the
                                             charge protocol, then two-step payments
    python -m tests.model --large            both at the large bound
    python -m tests.model --mutations        also every mutation: each must be caught
    python -m tests.model --mutation NAME    one mutation, with its shortest trace (in the
                                             model, or both models, that have its rule)
    python -m tests.model --model two-step   one model: `charges` or `two-step` (default both)
    python -m tests.model --large --faults 4 the large bound with more faults in all (slower)
    python -m tests.model --providers 1      one provider, no failover (the model before attempts)
    python -m tests.model --mutation NAME --double-charge
                                             the shortest trace to a double charge alone
    python -m tests.model --wrong-not-processed
                                             one fault may be a wrong "not processed" (a
                                             charge under an attempt failed over from):
                                             checks only that recovery never charges again
                                             (the latest-attempt-only mutation runs so)

--providers, --double-charge and --wrong-not-processed are the charge protocol's, and run it
alone. Exit status 0 when every run came out as it must (each model keeps every invariant,
each mutation breaks one), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from tests.model.modification_invariants import search_modifications
from tests.model.modifications import Modifications
from tests.model.protocol import Protocol
from tests.model.search import Report, W, double_charge, explore, recharged
from tests.model.trace import format_two_step, format_violation
from tests.model.two_step import (
    AMOUNT,
    TWO_STEP_LARGE,
    TWO_STEP_SMALL,
    TwoStep,
    TwoStepBounds,
    two_step_worlds,
)
from tests.model.world import (
    LARGE,
    SHARED_MUTATIONS,
    SMALL,
    TWO_STEP_MUTATIONS,
    Bounds,
    Mutation,
    World,
    approved_everywhere,
    initial_worlds,
)

# The mutations only a wrong "not processed" exposes: searched with one (`run`'s `lies`).
LIE_MUTATIONS = frozenset({Mutation.LATEST_ATTEMPT_ONLY})

CHARGES, TWO_STEP = "charges", "two-step"
MODELS = (CHARGES, TWO_STEP)
CHARGE_MUTATIONS = frozenset(Mutation) - TWO_STEP_MUTATIONS
MODEL_MUTATIONS = {CHARGES: CHARGE_MUTATIONS, TWO_STEP: TWO_STEP_MUTATIONS | SHARED_MUTATIONS}
"""The mutations each model has the rule of, and so searches."""


def describe_bounds(bounds: Bounds) -> str:
    b = bounds.budget
    return (
        f"{bounds.clients} clients (the first request, then retries), {bounds.workers} "
        f"worker{'s' if bounds.workers > 1 else ''}, {bounds.operators} operator, "
        f"{bounds.providers} provider{'s' if bounds.providers > 1 else ''}; "
        f"at most {b.crashes} crashes, "
        f"{b.expiries} leases expiring under a working owner, {b.faults} provider faults, "
        f"{b.timeouts} timeouts, {b.total} faults in all"
        + (f", {b.lies} wrong 'not processed'" if b.lies else "")
    )


def run(
    bounds: Bounds, mutation: Mutation | None, *, doubles: bool = False, lies: bool = False
) -> tuple[Report[World], Protocol]:
    """One search; `doubles`: of the double-charge invariants alone, without dead ends, from
    the worlds where every provider approves; `lies` (and the `LIE_MUTATIONS`): one of the
    faults may be a wrong "not processed", and recovery must never charge again."""
    if lies or mutation in LIE_MUTATIONS:
        bounds = bounds._replace(budget=bounds.budget._replace(lies=1))
        protocol = Protocol(bounds, mutation)
        return explore(protocol, initial_worlds(bounds), dead_ends=False, check=recharged), protocol
    protocol = Protocol(bounds, mutation)
    if doubles:
        starts = approved_everywhere(bounds)
        return explore(protocol, starts, dead_ends=False, check=double_charge), protocol
    return explore(protocol, initial_worlds(bounds)), protocol


def summary(name: str, report: Report[W]) -> str:
    verdict = "no violation" if report.violation is None else "VIOLATION"
    return (
        f"{name}: {report.states:,} states, {report.transitions:,} transitions, "
        f"{report.seconds:.1f} s: {verdict}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--large", action="store_true", help="explore the large bound")
    parser.add_argument("--faults", type=int, help="faults in all (default: the bound's)")
    parser.add_argument("--model", choices=MODELS, help="one model (default: both)")
    parser.add_argument("--providers", type=int, help="providers (default: the bound's, 2)")
    parser.add_argument(
        "--double-charge",
        action="store_true",
        help="check only that nothing is charged twice, or at two providers (from the worlds"
        " where every provider approves)",
    )
    parser.add_argument(
        "--wrong-not-processed",
        action="store_true",
        help="let one fault be a 'not processed' answer for a charge the provider made, and"
        " check only that recovery never charges again",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--mutations", action="store_true", help="run every mutation too")
    which.add_argument("--mutation", choices=[m.value for m in Mutation])
    args = parser.parse_args(argv)
    if args.double_charge and args.mutations:
        # Most mutations break another invariant and never charge twice.
        parser.error("--double-charge goes with --mutation NAME, or with no mutation")
    if args.wrong_not_processed and (args.mutations or args.double_charge):
        # Its check is one invariant, which the other mutations need not break.
        parser.error("--wrong-not-processed goes with --mutation NAME, or with no mutation")
    one = None if args.mutation is None else Mutation(args.mutation)
    charges_only = args.double_charge or args.wrong_not_processed or args.providers is not None
    models = set(MODELS) if args.model is None else {args.model}
    if charges_only:
        models &= {CHARGES}
    if one is not None:
        models &= {model for model in MODELS if one in MODEL_MUTATIONS[model]}
    if not models:
        parser.error("that mutation or option is not of the model chosen")
    ok = True
    if CHARGES in models:
        ok = _charges(args, one) and ok
    if TWO_STEP in models:
        ok = _two_step(args, one) and ok
    return 0 if ok else 1


def _charges(args: argparse.Namespace, one: Mutation | None) -> bool:
    """The charge protocol, and its mutations asked for; whether each came out as it must."""
    bounds = LARGE if args.large else SMALL
    if args.faults is not None:
        bounds = bounds._replace(budget=bounds.budget._replace(total=args.faults))
    if args.providers is not None:
        bounds = bounds._replace(providers=args.providers)
    lies = args.wrong_not_processed or one in LIE_MUTATIONS
    shown = bounds._replace(budget=bounds.budget._replace(lies=int(lies)))
    print(f"bounds: {describe_bounds(shown)}", flush=True)
    ok = True
    if one is None:
        report, protocol = run(bounds, None, doubles=args.double_charge, lies=lies)
        print(summary("protocol", report), flush=True)
        if report.violation is not None:
            print(format_violation(report.violation, protocol))
            ok = False
    mutations = [m for m in Mutation if m in CHARGE_MUTATIONS] if args.mutations else []
    if one is not None:
        mutations = [one]
    for mutation in mutations:
        report, protocol = run(bounds, mutation, doubles=args.double_charge, lies=lies)
        print(summary(f"mutation {mutation.value}", report), flush=True)
        if report.violation is None:
            print("  not caught: the model should have found a violation")
            ok = False
        else:
            print(f"  shortest trace: {len(report.violation.trace)} steps")
            if one is not None:
                print(format_violation(report.violation, protocol))
    return ok


def run_two_step(
    bounds: TwoStepBounds, mutation: Mutation | None
) -> tuple[Report[TwoStep], Modifications]:
    """One search of the two-step model, with its dead-end check."""
    rules = Modifications(bounds, mutation)
    return search_modifications(rules, two_step_worlds(bounds)), rules


def _two_step(args: argparse.Namespace, one: Mutation | None) -> bool:
    """Two-step payments, and their mutations asked for; whether each came out as it must."""
    bounds = TWO_STEP_LARGE if args.large else TWO_STEP_SMALL
    if args.faults is not None:
        bounds = bounds._replace(budget=bounds.budget._replace(total=args.faults))
    print(f"two-step bounds: {describe_two_step_bounds(bounds)}", flush=True)
    ok = True
    if one is None:
        report, rules = run_two_step(bounds, None)
        print(summary("two-step payments", report), flush=True)
        if report.violation is not None:
            print(format_two_step(report.violation, rules))
            ok = False
    mutations = [m for m in Mutation if m in MODEL_MUTATIONS[TWO_STEP]] if args.mutations else []
    if one is not None:
        mutations = [one]
    for mutation in mutations:
        report, rules = run_two_step(bounds, mutation)
        print(summary(f"two-step mutation {mutation.value}", report), flush=True)
        if report.violation is None:
            print("  not caught: the model should have found a violation")
            ok = False
        else:
            print(f"  shortest trace: {len(report.violation.trace)} steps")
            if one is not None:
                print(format_two_step(report.violation, rules))
    return ok


def describe_two_step_bounds(bounds: TwoStepBounds) -> str:
    b = bounds.budget
    return (
        f"{bounds.clients} clients, each with its own key (a capture of 1 or of all"
        f" {AMOUNT}, or a void: every combination), {bounds.workers} "
        f"worker{'s' if bounds.workers > 1 else ''}; at most {b.crashes} crashes, "
        f"{b.expiries} leases expiring under a working owner, {b.faults} provider faults, "
        f"{b.timeouts} timeouts, {b.total} faults in all"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
