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
