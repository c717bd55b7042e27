"""Exception hierarchy of remat.

Every exception raised on purpose by remat derives from :class:`RematError`;
subclasses also derive from the builtin that fits, so ``except ValueError``
keeps working for callers who do not know about remat.
"""

from __future__ import annotations

__all__ = [
    "RematError",
    "GraphValidationError",
    "InvalidScheduleError",
    "UnknownMethodError",
    "SolverError",
    "ScheduleVerificationError",
    "BudgetInfeasibleError",
]


class RematError(Exception):
    """Base class of every error raised by remat."""


class GraphValidationError(RematError, ValueError):
    """A graph is malformed (cycle, unknown or duplicate name, bad number...)."""


class InvalidScheduleError(RematError, ValueError):
    """A schedule breaks the frontier-advancing or dependency constraints.

    Attributes
    ----------
    stage, node : int or None
        The stage and node (topological index) where the violation was found.
    """

    def __init__(self, message: str, stage: int | None = None, node: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.node = node


class UnknownMethodError(RematError, KeyError):
    """A method or backend name is not in its registry."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text
        return str(self.args[0]) if self.args else ""


class SolverError(RematError, RuntimeError):
    """A solver library crashed or returned something unusable."""


class ScheduleVerificationError(RematError, AssertionError):
    """A method returned a schedule that the simulator rejects (a bug, never a warning)."""


class BudgetInfeasibleError(RematError, ValueError):
    """No plan fits the requested budget.

    Raised by the adapters (the core's :func:`~remat_core.solve` reports an
    impossible budget as a status instead). The message gives the smallest
    feasible budget known, in bytes and as a fraction of activation memory,
    and the node (module) that sets it.

    Attributes
    ----------
    result : RematResult or None
        The solver's result.
    budget_bytes : int or None
    min_budget_bytes : int or None
        A budget below which no schedule exists.
    culprit : str or None
        The node (module path, for an adapter) that sets ``min_budget_bytes``.
    """

    def __init__(self, message: str, result=None, budget_bytes: int | None = None,
                 min_budget_bytes: int | None = None, culprit: str | None = None):
        super().__init__(message)
        self.result = result
        self.budget_bytes = budget_bytes
        self.min_budget_bytes = min_budget_bytes
        self.culprit = culprit
