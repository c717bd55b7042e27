"""``ilp``: Checkmate's MILP solved exactly (or to a gap / time limit).

The formulation (:mod:`remat_core.formulation`) turns the graph into sparse
standard-form arrays; a backend (:mod:`remat_core.solvers.backends`) solves
them; the solution is decoded to a schedule and simulated. The best schedule
of the registered heuristics warm-starts the solver.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from typing import Any

import numpy as np

from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from .checkpoint_all import trivial_result
from ..simulate import simulate

__all__ = ["solve_ilp", "warm_start_schedule"]

log = logging.getLogger(__name__)

#: Methods never used to warm-start the MILP (this one, and those that solve an LP themselves).
_NOT_FOR_WARM_START = frozenset({"ilp", "lp-rounding"})
#: Largest graph for which lp-rounding is also tried as a warm start (its LP is cheap below this).
_LP_ROUNDING_WARM_START_MAX_NODES = 120


def _check_options(time_limit_s: Any, mip_rel_gap: Any, threads: Any) -> None:
    if time_limit_s is not None and (
        isinstance(time_limit_s, bool) or not isinstance(time_limit_s, numbers.Real)
        or not time_limit_s > 0 or not math.isfinite(time_limit_s)
    ):
        raise ValueError(f"`time_limit_s` must be a positive number of seconds or None; got {time_limit_s!r}")
    if mip_rel_gap is not None and (
        isinstance(mip_rel_gap, bool) or not isinstance(mip_rel_gap, numbers.Real) or not 0 <= mip_rel_gap < 1
    ):
        raise ValueError(f"`mip_rel_gap` must be a number in [0, 1) or None; got {mip_rel_gap!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1):
        raise ValueError(f"`threads` must be a positive integer or None; got {threads!r}")


def warm_start_schedule(graph: Graph, budget_bytes: int, include_lp_rounding: bool | None = None
                        ) -> tuple[Schedule | None, str, float | None]:
    """The cheapest schedule within budget among the registered heuristic methods.

    Every registered method except ``ilp`` (and ``lp-rounding`` unless
    ``include_lp_rounding``, by default only on graphs of at most 120 nodes)
    is run through :func:`remat_core.solve`; a method that fails or finds
    nothing is skipped.

    Returns
    -------
    (schedule or None, method name, simulated cost or None)
    """
    from . import available_methods, solve

    if include_lp_rounding is None:
        include_lp_rounding = graph.n <= _LP_ROUNDING_WARM_START_MAX_NODES
    skip = _NOT_FOR_WARM_START - ({"lp-rounding"} if include_lp_rounding else set())
    best: tuple[Schedule | None, str, float | None] = (None, "", None)
    for name in available_methods():
        if name in skip:
            continue
        try:
            res = solve(graph, budget_bytes, method=name)
        except Exception as exc:  # a broken heuristic must not break the exact solver
            log.debug("warm start: method %s failed: %s", name, exc)
            continue
        if res.success and (best[2] is None or res.objective < best[2]):
            best = (res.schedule, name, res.objective)
    return best


def _row_violation(sf, x: np.ndarray) -> float:
    ax = sf.A @ x
    return float(max(np.max(sf.row_lo - ax, initial=0.0), np.max(ax - sf.row_hi, initial=0.0)))


def solve_ilp(
    graph: Graph,
    budget_bytes: int,
    backend: str = "highs",
    formulation: str = "strong",
    time_limit_s: float | None = None,
    mip_rel_gap: float | None = 1e-4,
    threads: int | None = None,
    verbose: bool = False,
    warm_start: bool | Schedule = True,
    solver_options: dict[str, Any] | None = None,
) -> RematResult:
    """Solve the rematerialization MILP.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    backend : str
        ``"highs"`` (default), ``"cbc"`` or ``"gurobi"``; see
        :func:`remat_core.solvers.backends.available_backends`.
    formulation : str
        ``"strong"`` (default) or ``"paper"``.
    time_limit_s : float, optional
        Wall-clock limit for the whole call (warm start included).
    mip_rel_gap : float, optional
        Relative gap at which the solver stops and reports ``OPTIMAL``.
    threads : int, optional
        Solver threads.
    verbose : bool
        Let the solver print its log.
    warm_start : bool or Schedule
        Start from the best heuristic schedule (``True``), from a given
        schedule, or from nothing (``False``).
    solver_options : dict, optional
        Options passed to the solver library under its own names (for
        example ``{"mip_pscost_minreliable": 0}`` for HiGHS).

    Returns
    -------
    RematResult
        ``OPTIMAL`` (proven within ``mip_rel_gap``), ``FEASIBLE`` (best
        schedule at the time limit), ``INFEASIBLE`` (proven: no schedule
        fits), or ``NO_SOLUTION`` (time ran out first). ``lower_bound`` is the
        proven bound; ``stats`` holds ``gap``, ``nodes``, ``backend_status``,
        the formulation size, the warm start and the time split.

    Raises
    ------
    ValueError
        On a bad option (naming it).
    UnknownMethodError
        On an unknown or uninstalled ``backend`` or unknown ``formulation``.
    SolverError
        If the solver library fails.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> res = solve(linear_graph(4), 4, method="ilp")
    >>> res.status.value, res.objective, res.peak_memory_bytes <= 4
    ('optimal', 11.0, True)
    """
    from ..formulation import build_milp
    from .backends import get_backend

    _check_options(time_limit_s, mip_rel_gap, threads)
    if not isinstance(formulation, str):
        raise TypeError(f"`formulation` must be a string; got {formulation!r}")
    solve_fn = get_backend(backend)
    start = time.perf_counter()
    base_cost = float(graph.cost.sum())
    stats: dict[str, Any] = {"backend": backend, "formulation": formulation}

    trivial = trivial_result(graph, budget_bytes, backend, stats)
    if trivial is not None:
        return trivial
    lower = graph.min_budget_lower_bound_bytes()

    # ---------------------------------------------------------------- warm start
    t0 = time.perf_counter()
    warm: Schedule | None = None
    if isinstance(warm_start, Schedule):
        sim = simulate(graph, warm_start, timeline=False)
        if sim.peak_memory_bytes <= budget_bytes:
            warm, stats["warm_start_method"], stats["warm_start_cost"] = warm_start, "given", sim.total_cost
        else:
            log.info("ilp: the given warm start needs %d bytes > budget; ignored", sim.peak_memory_bytes)
    elif warm_start:
        warm, name, cost = warm_start_schedule(graph, budget_bytes)
        if warm is not None:
            stats["warm_start_method"], stats["warm_start_cost"] = name, cost
    stats["warm_start_time_s"] = time.perf_counter() - t0

    # ---------------------------------------------------------------- build + solve
    t0 = time.perf_counter()
    sf = build_milp(graph, budget_bytes, formulation)
    stats["build_time_s"] = time.perf_counter() - t0
    stats["size"] = sf.size()
    x0 = None
    if warm is not None:
        x0 = sf.encode(warm)
        viol = _row_violation(sf, x0)
        if viol > 1e-6:  # would be a bug in encode(); the solve does not depend on it
            log.warning("ilp: warm start violates a row by %g; not passed to the solver", viol)
            x0 = None
    limit = None
    if time_limit_s is not None:
        limit = max(float(time_limit_s) - (time.perf_counter() - start), 0.05)
    t0 = time.perf_counter()
    out = solve_fn(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                   time_limit_s=limit, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose, start=x0,
                   options=solver_options)
    stats["solve_time_s"] = time.perf_counter() - t0
    stats.update({k: v for k, v in out.stats.items() if k in ("backend_status", "nodes", "gap")})
    bound = None if out.bound is None else max(out.bound + sf.objective_offset, base_cost)

    if out.status is SolveStatus.INFEASIBLE:
        stats["min_budget_lower_bound_bytes"] = lower
        return RematResult(status=SolveStatus.INFEASIBLE, backend=backend, stats=stats,
                           message=f"the solver proved that no schedule fits {budget_bytes} bytes")

    # ---------------------------------------------------------------- decode and check
    schedule, cost = None, None
    if out.x is not None:
        schedule = sf.decode(out.x)
        sim = simulate(graph, schedule, timeline=False)
        if sim.peak_memory_bytes > budget_bytes:
            # only within the solver's feasibility tolerance: the canonical form never uses more memory
            from ..formulation import canonical_schedule

            R, S = canonical_schedule(graph, schedule.S)
            schedule = Schedule(R, S)
            sim = simulate(graph, schedule, timeline=False)
            if sim.peak_memory_bytes > budget_bytes:
                log.warning("ilp: solver solution needs %d bytes > budget %d (tolerance); discarded",
                            sim.peak_memory_bytes, budget_bytes)
                schedule = None
        if schedule is not None:
            cost = sim.total_cost
    if warm is not None and (cost is None or stats["warm_start_cost"] < cost - 1e-9):
        schedule, cost = warm, stats["warm_start_cost"]
        stats["returned_warm_start"] = True
    if schedule is None:
        return RematResult(status=SolveStatus.NO_SOLUTION, lower_bound=bound, backend=backend, stats=stats,
                           message=f"no schedule found ({out.stats.get('backend_status', out.status.value)})")
    if bound is not None:
        bound = min(bound, cost)
        stats["gap"] = 0.0 if cost == 0 else max(0.0, (cost - bound) / cost)
    status = SolveStatus.OPTIMAL if out.status is SolveStatus.OPTIMAL and not stats.get("returned_warm_start") \
        else SolveStatus.FEASIBLE
    if out.status is SolveStatus.OPTIMAL and stats.get("returned_warm_start") and bound is not None \
            and cost <= bound * (1 + (mip_rel_gap or 0.0)) + 1e-9:
        status = SolveStatus.OPTIMAL
    message = "optimal" if status is SolveStatus.OPTIMAL else \
        f"best schedule when the solver stopped ({out.stats.get('backend_status', out.status.value)})"
    return RematResult(status=status, schedule=schedule, lower_bound=bound, backend=backend,
                       stats=stats, message=message)
