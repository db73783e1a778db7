"""Schemathesis hooks for test_openapi.py (loaded through `SCHEMATHESIS_HOOKS=st_hooks`).

A long poll's `wait` of 2–60 s is sent as 1 s. Schemathesis learns ids across operations (an
operator's run finds the agent's pending clarifications in the listing) and its coverage phase
picks the bounds, so each `?wait=60` on a pending item held the run for a whole minute: 182 of
the operator run's 185 s. The answer's shape is the same after 1 s as after 60 (the wait itself
is tested in the server's suite); values outside 0–60, or not numbers, still go as generated,
so the range check is still exercised."""

import schemathesis


def shortened(wait):
    """`wait` as sent: 1 when it is a whole number of seconds in 2–60, else unchanged."""
    if isinstance(wait, bool):
        return wait
    if isinstance(wait, int) and 1 < wait <= 60:
        return 1
    if isinstance(wait, str) and wait.isascii() and wait.isdigit() and 1 < int(wait) <= 60:
        return "1"
    return wait


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if isinstance(case.query, dict) and "wait" in case.query:
        case.query["wait"] = shortened(case.query["wait"])
