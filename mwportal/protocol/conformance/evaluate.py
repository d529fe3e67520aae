"""The loop every signed-document bundle shares: read the manifest's
evaluations, fail them all when the kernel module they need is missing, and
turn each evaluation's result or failure into one ``Outcome``.

A crash of the kernel (any exception) fails its evaluation; it never stops the
run, and nothing is ever skipped as passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import kernel
from .files import BundleError
from .report import Outcome

Evaluation = dict[str, Any]


class Mismatch(Exception):
    """An evaluation's result differs from its expectation."""

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(actual)
        self.expected = expected
        self.actual = actual


def run_evaluations(
    bundle: str,
    manifest_name: str,
    manifest: dict[str, Any] | None,
    *,
    evaluations: Callable[[dict[str, Any]], list[tuple[str, Evaluation]]],
    needs: tuple[str, ...],
    describe: Callable[[Evaluation], str],
    checker: Callable[[], Callable[[Evaluation], tuple[str, str]]],
) -> list[Outcome]:
    """``checker()`` (called once the manifest is known to be readable) gives
    the per-evaluation check, which returns ``(expected, actual)`` or raises
    ``Mismatch``; ``describe`` says what was expected when it raises anything
    else."""
    if manifest is None:
        return [Outcome(bundle, "manifest", False, f"a readable {manifest_name}", "unreadable")]
    try:
        evals = evaluations(manifest)
    except BundleError as exc:
        return [Outcome(bundle, "manifest", False, f"a readable {manifest_name}", str(exc))]
    absent = kernel.missing(needs)
    if absent:
        return [Outcome(bundle, eid, False, describe(e), absent) for eid, e in evals]
    check = checker()
    outcomes = []
    for eid, e in evals:
        try:
            expected, actual = check(e)
        except Mismatch as exc:
            outcomes.append(Outcome(bundle, eid, False, exc.expected, exc.actual))
        except BundleError as exc:
            outcomes.append(Outcome(bundle, eid, False, describe(e), f"bundle: {exc}"))
        except Exception as exc:  # a crash of the kernel fails the evaluation, it does not stop the run
            outcomes.append(Outcome(bundle, eid, False, describe(e), f"{type(exc).__name__}: {exc}"))
        else:
            outcomes.append(Outcome(bundle, eid, True, expected, actual))
    return outcomes
