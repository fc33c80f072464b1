"""Run the protocol model from the command line.

    python -m tests.model                    the protocol at the small bound (as CI does)
    python -m tests.model --large            the protocol at the large bound
    python -m tests.model --mutations        also every mutation: each must be caught
    python -m tests.model --mutation NAME    one mutation, with its shortest trace
    python -m tests.model --large --faults 4 the large bound with more faults in all (slower)
    python -m tests.model --providers 1      one provider, no failover (the model before attempts)
    python -m tests.model --mutation NAME --double-charge
                                             the shortest trace to a double charge alone
    python -m tests.model --wrong-not-processed
                                             one fault may be a wrong "not processed" (a
                                             charge under an attempt failed over from):
                                             checks only that recovery never charges again
                                             (the latest-attempt-only mutation runs so)

Exit status 0 when every run came out as it must (the protocol keeps every invariant, each
mutation breaks one), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from tests.model.protocol import Protocol
from tests.model.search import Report, W, double_charge, explore, recharged
from tests.model.trace import format_violation
from tests.model.world import (
    LARGE,
    SMALL,
    Bounds,
    Mutation,
    World,
    approved_everywhere,
    initial_worlds,
)

# The mutations only a wrong "not processed" exposes: searched with one (`run`'s `lies`).
LIE_MUTATIONS = frozenset({Mutation.LATEST_ATTEMPT_ONLY})


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
    parser = argparse.ArgumentParser(prog="python -m tests.model", description=__doc__)
    parser.add_argument("--large", action="store_true", help="explore the large bound")
    parser.add_argument("--faults", type=int, help="faults in all (default: the bound's)")
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
    bounds = LARGE if args.large else SMALL
    if args.faults is not None:
        bounds = bounds._replace(budget=bounds.budget._replace(total=args.faults))
    if args.providers is not None:
        bounds = bounds._replace(providers=args.providers)
    one = None if args.mutation is None else Mutation(args.mutation)
    lies = args.wrong_not_processed or one in LIE_MUTATIONS
    shown = bounds._replace(budget=bounds.budget._replace(lies=int(lies)))
    print(f"bounds: {describe_bounds(shown)}", flush=True)
    ok = True
    if args.mutation is None:
        report, protocol = run(bounds, None, doubles=args.double_charge, lies=lies)
        print(summary("protocol", report), flush=True)
        if report.violation is not None:
            print(format_violation(report.violation, protocol))
            ok = False
    mutations = list(Mutation) if args.mutations else []
    if args.mutation is not None:
        mutations = [Mutation(args.mutation)]
    for mutation in mutations:
        report, protocol = run(bounds, mutation, doubles=args.double_charge, lies=lies)
        print(summary(f"mutation {mutation.value}", report), flush=True)
        if report.violation is None:
            print("  not caught: the model should have found a violation")
            ok = False
        else:
            print(f"  shortest trace: {len(report.violation.trace)} steps")
            if args.mutation is not None:
                print(format_violation(report.violation, protocol))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
