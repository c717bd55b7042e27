"""MILP backends: one module per solver library, one registry, one result type.

A backend solves a program in standard form

    minimize c @ x  s.t.  row_lo <= A @ x <= row_hi,  col_lo <= x <= col_hi,
    x[j] integer where integrality[j] == 1

and never sees the graph. Each backend module defines ``solve(...)`` with the
signature of :func:`solve_arrays`, imports its library inside it, and maps the
library's statuses to :class:`~remat_core.SolveStatus` with a literal table.

This package imports only the errors and ``SolveStatus`` of the core (and a
backend's library, inside its ``solve``): never the graph, the formulation or
the simulator, so that a backend can be tested and replaced on arrays alone.
:func:`lp_sequence` keeps one HiGHS model across a sequence of LPs that differ
in bounds or added rows, re-solving each from the last basis.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ...errors import UnknownMethodError
from ...schedule import SolveStatus

__all__ = ["BackendResult", "BACKENDS", "checked", "available_backends", "get_backend", "lp_sequence", "solve_arrays"]


@dataclass
class BackendResult:
    """What a backend returns.

    Attributes
    ----------
    status : SolveStatus
        ``OPTIMAL`` (within ``mip_rel_gap``), ``FEASIBLE`` (an incumbent at a
        limit), ``INFEASIBLE``, or ``NO_SOLUTION`` (a limit without incumbent).
    x : numpy.ndarray or None
        The best solution found.
    objective : float or None
        ``c @ x``.
    bound : float or None
        The proven lower bound (the LP optimum for a continuous program).
    stats : dict
        ``backend_status`` (the library's own word), ``nodes``, ``gap``,
        ``time_s`` and whatever else the library reports.
    """

    status: SolveStatus
    x: np.ndarray | None = None
    objective: float | None = None
    bound: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)


def checked(result: BackendResult, c: np.ndarray) -> BackendResult:
    """``result`` if its ``objective`` is ``c @ x``, else the same point as ``FEASIBLE`` with no bound.

    A solver's status and bound are about the objective value it reports;
    when that value is not the returned point's (HiGHS 1.16 with its presolve
    on may take a start's value in the presolved program for its value in the
    original one, ``docs/reliability.rst``), neither is trusted: the point is
    still feasible, but nothing is proven about it.
    """
    if result.x is None or result.objective is None:
        return result
    actual = float(np.asarray(c, dtype=np.float64) @ result.x)
    if abs(actual - result.objective) <= 1e-6 * max(1.0, abs(actual)):
        return result
    stats = dict(result.stats, objective_mismatch={"reported": result.objective, "of_point": actual})
    return BackendResult(status=SolveStatus.FEASIBLE, x=result.x, objective=actual, bound=None, stats=stats)


# name -> (module path, library it needs); preference order
BACKENDS: dict[str, tuple[str, str]] = {
    "highs": ("remat_core.solvers.backends.highs", "highspy"),
    "gurobi": ("remat_core.solvers.backends.gurobi", "gurobipy"),
    "cbc": ("remat_core.solvers.backends.cbc", "mip"),
}


def _importable(library: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):
        return False


def available_backends() -> list[str]:
    """Backends whose library is installed, in preference order."""
    return [name for name, (_, lib) in BACKENDS.items() if _importable(lib)]


def get_backend(name: str) -> Callable[..., BackendResult]:
    """The ``solve`` function of backend ``name``.

    Raises
    ------
    UnknownMethodError
        If ``name`` is not a backend, or its library is not installed (the
        message lists the available backends).
    """
    if name not in BACKENDS:
        raise UnknownMethodError(
            f"unknown `backend` {name!r}; known: {', '.join(BACKENDS)}; available here: {', '.join(available_backends())}"
        )
    module, lib = BACKENDS[name]
    if not _importable(lib):
        raise UnknownMethodError(
            f"`backend` {name!r} needs the {lib!r} package, which is not installed; "
            f"available here: {', '.join(available_backends())}"
        )
    return importlib.import_module(module).solve


def solve_arrays(
    backend: str,
    c: np.ndarray,
    A: sp.csr_array,
    row_lo: np.ndarray,
    row_hi: np.ndarray,
    col_lo: np.ndarray,
    col_hi: np.ndarray,
    integrality: np.ndarray,
    *,
    time_limit_s: float | None = None,
    mip_rel_gap: float | None = None,
    threads: int | None = None,
    verbose: bool = False,
    start: np.ndarray | None = None,
    options: dict[str, Any] | None = None,
) -> BackendResult:
    """Solve a standard-form program with ``backend`` (see the module docstring).

    ``start`` is a full solution vector to warm-start from (ignored by a
    backend that cannot use it; it must not make the solve fail).
    ``options`` are passed to the library under its own names (for example
    ``{"mip_heuristic_effort": 0.0}`` for HiGHS); an unknown one is a
    ``ValueError``.
    """
    fn = get_backend(backend)
    return fn(c, A, row_lo, row_hi, col_lo, col_hi, integrality, time_limit_s=time_limit_s,
              mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose, start=start, options=options)


class _ColdLPSequence:
    """:func:`lp_sequence` for a backend without warm re-solves: every LP from scratch."""

    def __init__(self, solve_fn: Callable[..., BackendResult], threads: int | None, verbose: bool):
        self._solve, self.threads, self.verbose = solve_fn, threads, verbose
        self._last = None
        self.warm_solves = 0
        self.warm_abandoned = 0

    def solve(self, c, A, row_lo, row_hi, col_lo, col_hi, *, time_limit_s=None) -> BackendResult:
        self._last = (c, sp.csr_array(A), np.asarray(row_lo, np.float64), np.asarray(row_hi, np.float64),
                      col_lo, col_hi)
        return self._solve(c, A, row_lo, row_hi, col_lo, col_hi, np.zeros(len(c), dtype=np.uint8),
                           time_limit_s=time_limit_s, threads=self.threads, verbose=self.verbose)

    def add_rows(self, rows, row_lo, row_hi, *, time_limit_s=None) -> BackendResult:
        if self._last is None:
            raise RuntimeError("add_rows() needs an LP solved by solve() first")
        c, A, lo, hi, col_lo, col_hi = self._last
        return self.solve(c, sp.vstack([A, sp.csr_array(rows)]).tocsr(), np.concatenate([lo, row_lo]),
                          np.concatenate([hi, row_hi]), col_lo, col_hi, time_limit_s=time_limit_s)


def lp_sequence(backend: str, *, threads: int | None = None, verbose: bool = False):
    """A solver for a series of LPs that share ``c`` and ``A`` and differ in bounds.

    Its ``solve(c, A, row_lo, row_hi, col_lo, col_hi, time_limit_s=None)``
    returns a :class:`BackendResult`. With ``highs`` the model and its basis
    are kept between calls, so an LP whose bounds alone changed (the same
    formulation at another budget, built with the same ``memory_unit``) starts
    from the last optimal basis, and a re-solve that runs longer than the last
    solve from scratch is abandoned for one; other backends solve each LP from
    scratch. ``warm_solves`` counts the re-solves finished from a basis,
    ``warm_abandoned`` those given up.

    ``add_rows(rows, row_lo, row_hi, time_limit_s=None)`` appends rows to the
    last LP and re-solves it (with ``highs`` from its basis: how cuts are
    added round after round).
    """
    solve_fn = get_backend(backend)   # validates the name and the library
    cls = getattr(importlib.import_module(BACKENDS[backend][0]), "LPSequence", None)
    if cls is not None:
        return cls(threads=threads, verbose=verbose)
    return _ColdLPSequence(solve_fn, threads, verbose)
