"""``dtr``: Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021), simulated over the graph.

DTR needs no plan: it runs the operators in their order as an online cache
under the budget, evicts the resident value with the lowest heuristic score
when an allocation does not fit, and recomputes evicted values when they are
read, recursively. Here the run is simulated on the graph's topological order
by a kernel (:func:`remat_core.kernels.dtr`; the reference implementation's
docstring is the specification) and recorded as a Checkmate schedule ``(R,
S)`` in frontier-advancing stages: stage ``t`` computes node ``t`` for the
first time together with the recomputations it triggers, and ``S`` holds the
values resident across the stage boundaries. :func:`remat_core.solve`
re-simulates that schedule like every other method's; the run's memory
accounting is never below the simulator's, so a run that succeeds is a
schedule within the budget.

The same evictor runs live in PyTorch, on models that cannot be traced:
:func:`remat_torch.dtr`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kernels
from ..graph import Graph
from ..kernels import _reference as _ref
from ..schedule import RematResult, Schedule, SolveStatus
from ..units import format_bytes

__all__ = ["HEURISTICS", "solve_dtr", "dtr_run"]

#: heuristic name -> kernel code (the scores are defined in :func:`remat_core.kernels._reference.dtr`)
HEURISTICS = {
    "h_dtr": _ref.DTR_H_DTR,
    "h_dtr_eq": _ref.DTR_H_DTR_EQ,
    "h_dtr_local": _ref.DTR_H_DTR_LOCAL,
    "lru": _ref.DTR_LRU,
    "largest": _ref.DTR_LARGEST,
    "msps": _ref.DTR_MSPS,
    "random": _ref.DTR_RANDOM,
}
DEFAULT_HEURISTIC = "h_dtr_eq"
#: a run stops as thrashing after this many computations per node (the DTR paper's simulator caps runs too)
DEFAULT_MAX_COMPUTE_FACTOR = 50


def _check_options(heuristic: Any, seed: Any, max_compute_factor: Any) -> None:
    if heuristic not in HEURISTICS:
        raise ValueError(f"`heuristic` must be one of {', '.join(HEURISTICS)}; got {heuristic!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"`seed` must be an integer in [0, 2**32); got {seed!r}")
    if (isinstance(max_compute_factor, bool) or not isinstance(max_compute_factor, (int, float, np.number))
            or not max_compute_factor >= 1 or not math.isfinite(max_compute_factor)):
        raise ValueError(f"`max_compute_factor` must be a finite number >= 1; got {max_compute_factor!r}")


def dtr_run(graph: Graph, budget_bytes: int, heuristic: str = DEFAULT_HEURISTIC, seed: int = 0,
            max_compute_factor: float = DEFAULT_MAX_COMPUTE_FACTOR, kernel: str | None = None,
            keep_dead: bool = False) -> dict[str, Any]:
    """One DTR run on ``graph`` under ``budget_bytes``; the kernel's outputs as a dict.

    With ``keep_dead``, a value past its last use stays resident (as an
    eviction candidate) while one of its readers is still read later, so
    that evicting that reader leaves a one-step recomputation (see
    :func:`remat_core.kernels._reference.dtr`).

    Keys: ``ok`` (bool), ``code`` (0 ok, 1 an operator's working set did not
    fit, 2 thrashing: the computation cap was reached), ``fail_stage``,
    ``fail_node``, ``fail_need_bytes``, ``peak_bytes`` (the run's own
    accounting), ``computations``, ``evictions``, and ``schedule`` (a
    :class:`~remat_core.Schedule`, when ``ok``).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> run = dtr_run(linear_graph(8), 6, heuristic="h_dtr")
    >>> run["ok"], run["computations"] > linear_graph(8).n
    (True, True)
    """
    _check_options(heuristic, seed, max_compute_factor)
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    max_computes = int(min(2**62, max(graph.n, math.ceil(max_compute_factor * graph.n))))
    info, R_ptr, R_idx, S_ptr, S_idx = kernels.dtr(
        graph.n, dep_ptr, dep_idx, user_ptr, user_idx, graph.memory_bytes, graph.workspace_bytes, graph.cost,
        graph.fixed_bytes, int(budget_bytes), HEURISTICS[heuristic], int(seed), max_computes, keep_dead=keep_dead,
        kernel=kernel)
    code, fail_stage, fail_node, need, peak, computations, evictions = (int(x) for x in info)
    out = dict(ok=code == _ref.DTR_OK, code=code, fail_stage=fail_stage, fail_node=fail_node,
               fail_need_bytes=need, peak_bytes=peak, computations=computations, evictions=evictions,
               keep_dead=bool(keep_dead), schedule=None)
    if out["ok"]:
        out["schedule"] = Schedule.from_csr(graph.n, R_ptr, R_idx, S_ptr, S_idx)
    return out


def _smallest_success(graph: Graph, lo: int, hi: int, run_at) -> int:
    """Bisection between a failing budget ``lo`` and a succeeding ``hi`` (to 0.5% of the range or 1 byte):
    the smallest budget found at which the run succeeds (DTR is not monotone in the budget: a bound found, not
    a proof)."""
    tol = max(1, (hi - lo) // 200)
    while hi - lo > tol:
        mid = (lo + hi) // 2
        if run_at(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _run_with_fallback(graph: Graph, budget_bytes: int, heuristic: str, seed: int,
                       max_compute_factor: float, keep_dead: bool | None = None) -> dict[str, Any]:
    """The default run; when it fails, the ``keep_dead`` run if that one succeeds (else the default's failure).
    ``keep_dead`` True or False: that rule's run only."""
    if keep_dead is not None:
        return dtr_run(graph, budget_bytes, heuristic, seed, max_compute_factor, keep_dead=keep_dead)
    run = dtr_run(graph, budget_bytes, heuristic, seed, max_compute_factor)
    if not run["ok"]:
        again = dtr_run(graph, budget_bytes, heuristic, seed, max_compute_factor, keep_dead=True)
        if again["ok"]:
            return again
    return run


def solve_dtr(graph: Graph, budget_bytes: int, heuristic: str = DEFAULT_HEURISTIC, seed: int = 0,
              max_compute_factor: float = DEFAULT_MAX_COMPUTE_FACTOR, find_min_budget: bool = True,
              keep_dead: bool | None = None) -> RematResult:
    """DTR's online evictor under ``budget_bytes``, as a schedule.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    heuristic : str
        ``"h_dtr_eq"`` (default), ``"h_dtr"``, ``"h_dtr_local"``, ``"lru"``,
        ``"largest"``, ``"msps"`` or ``"random"``.
    seed : int
        Seed of the ``random`` heuristic.
    max_compute_factor : float
        A run that makes more than ``max_compute_factor * n`` computations is
        stopped as thrashing (INFEASIBLE).
    find_min_budget : bool
        When the budget fails, bisect for the smallest budget at which the run
        succeeds (``stats["method_min_budget_bytes"]``).
    keep_dead : bool or None
        The freeing rule: ``None`` (default) runs the default rule and, when
        it fails, the ``keep_dead`` rule (see Notes); ``True`` or ``False``
        runs only the ``keep_dead`` or only the default rule.

    Returns
    -------
    RematResult
        ``FEASIBLE`` with the schedule, or ``INFEASIBLE`` (never an
        exception) when an operator's working set does not fit or the run
        thrashes. ``stats``: ``heuristic``, ``computations``, ``evictions``,
        ``dtr_peak_bytes`` (the run's own accounting), ``keep_dead``.

    Notes
    -----
    When the run fails, it is run again with ``keep_dead`` (values past their
    last use kept while a reader is still read later; see ``dtr_run``),
    and that run's schedule is returned if it succeeds: in the stage format a
    long recomputation holds much of its row at once, and on an LSTM's
    backward pass (per-step weight-gradient pieces that are summed at the
    end) the default rule leaves no short recomputation to evict.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> res = solve(linear_graph(16), 8, method="dtr", heuristic="h_dtr")
    >>> res.status.value, res.peak_memory_bytes <= 8
    ('feasible', True)
    """
    _check_options(heuristic, seed, max_compute_factor)
    if keep_dead is not None and not isinstance(keep_dead, (bool, np.bool_)):
        raise ValueError(f"`keep_dead` must be True, False or None; got {keep_dead!r}")
    keep_dead = None if keep_dead is None else bool(keep_dead)
    run = _run_with_fallback(graph, budget_bytes, heuristic, seed, max_compute_factor, keep_dead)
    stats: dict[str, Any] = dict(heuristic=heuristic, computations=run["computations"],
                                 evictions=run["evictions"], dtr_peak_bytes=run["peak_bytes"],
                                 keep_dead=run["keep_dead"])
    if run["ok"]:
        return RematResult(status=SolveStatus.FEASIBLE, schedule=run["schedule"], stats=stats,
                           message=f"DTR ({heuristic}): {run['computations']} computations for {graph.n} nodes, "
                                   f"{run['evictions']} evictions")
    why = ("thrashing: it stopped after " f"{run['computations']} computations ({max_compute_factor:g} per node)"
           if run["code"] == _ref.DTR_THRASH else
           f"node {run['fail_node']} ({graph.names[run['fail_node']]!r}) needed "
           f"{format_bytes(run['fail_need_bytes'])} with nothing left to evict")
    msg = f"DTR ({heuristic}) did not fit {format_bytes(budget_bytes)}: {why}"
    lower = graph.min_budget_lower_bound_bytes()
    stats["min_budget_lower_bound_bytes"] = lower
    if find_min_budget and graph.n:
        from ..simulate import checkpoint_all_peak_bytes

        hi = checkpoint_all_peak_bytes(graph)   # DTR never evicts there: it is checkpoint-all
        if budget_bytes < hi:
            lo = max(int(budget_bytes), lower - 1)
            found = _smallest_success(graph, lo, hi, lambda b: _run_with_fallback(
                graph, b, heuristic, seed, max_compute_factor, keep_dead)["ok"])
            stats["method_min_budget_bytes"] = found
            msg += f"; the smallest budget at which it succeeds (bisection): {format_bytes(found)}"
    return RematResult(status=SolveStatus.INFEASIBLE, message=msg, stats=stats)
