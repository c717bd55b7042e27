"""``lp-rounding``: LP relaxation of the MILP and two-phase rounding (Checkmate section 5).

1. Solve the LP relaxation at a budget reduced by an *allowance* (a fraction
   of the budget above the fixed bytes), which leaves room for rounding.
2. Round the fractional checkpoint matrix ``S*``: a deterministic sweep over
   thresholds (``S = S* >= tau``) and/or Bernoulli samples (``S ~ S*``).
3. Take the cheapest ``R`` for each rounded ``S`` (the shared R-given-S
   kernel behind :func:`~remat_core.optimal_r_given_s`), simulate, and keep
   the roundings within the full budget.
   If none fits, the one closest to fitting is repaired by a greedy descent
   on the peak (:func:`repair`).
4. Improve the cheapest few by a local search over the kept runs
   (:func:`polish`; ``polish_evals=0`` turns it off), make the winner
   canonical (:func:`~remat_core.formulation.canonical_schedule`, which never
   raises memory) and return it.

The paper fixes the allowance at 10% and notes that this is overly
conservative for some models; here it is searched (see :data:`ALLOWANCES`).
"""

from __future__ import annotations

import logging
import numbers
import math
import time
from typing import Any, Sequence

import numpy as np

from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from .checkpoint_all import trivial_result
from ..simulate import simulate

__all__ = ["solve_lp_rounding", "ALLOWANCES", "rounding_candidates", "polish", "repair"]

log = logging.getLogger(__name__)

#: Allowances tried by the automatic search, in order.
ALLOWANCES = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
#: The search stops after this many allowances without a cheaper schedule (once one is found).
_PATIENCE = 2
#: At most this many thresholds per sweep (spread over the distinct values of S*).
_MAX_THRESHOLDS = 48
#: The local search starts from this many of the cheapest roundings of each allowance...
_POLISH_PER_ALLOWANCE = 2
#: ... and each start gets at most ``polish_evals / _POLISH_SHARE`` evaluations.
_POLISH_SHARE = 6
#: The repair of the rounding closest to fitting (when none fits) gets at least this many evaluations, with or
#: without the local search: at tight budgets it is what finds a schedule at all, and a tenth of this found none
#: (the case is in tests/core/test_lp_rounding.py; the numbers in benchmarks/experiments/README.md).
_REPAIR_EVALS = 10000


def _thresholds(S_frac: np.ndarray) -> np.ndarray:
    vals = np.unique(S_frac[S_frac > 1e-6])
    vals = np.unique(np.concatenate([vals, [0.5, 1.0]]))
    if len(vals) > _MAX_THRESHOLDS:
        vals = np.unique(np.quantile(vals, np.linspace(0, 1, _MAX_THRESHOLDS)))
    return vals[::-1]  # from keeping least to keeping most


class _Evaluator:
    """Cost and peak of ``(optimal R given S, S)`` straight from the kernels (no validation, no objects).

    ``deadline`` (a :func:`time.perf_counter` time, optional): the loops that
    evaluate (the rounding sweep, :func:`repair`, :func:`polish`) stop once
    :meth:`expired` says it has passed.
    """

    def __init__(self, graph: Graph, deadline: float | None = None):
        from .. import kernels

        self.kernels = kernels
        self.graph = graph
        self.n = graph.n
        self.dep_ptr, self.dep_idx, _, _ = graph.csr
        self.calls = 0
        self.deadline = deadline
        self._reads = None

    def expired(self) -> bool:
        """Whether the deadline has passed (never without one)."""
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def reads(self, R: np.ndarray) -> np.ndarray:
        """``out[t, i]``: whether a node computed in stage ``t`` (per ``R``) reads value ``i``."""
        if self._reads is None:
            import scipy.sparse as sp

            e = self.graph.edges
            self._reads = sp.csr_array((np.ones(len(e)), (e[:, 1], e[:, 0])), shape=(self.n, self.n))
        return (self._reads.T @ R.T.astype(np.float64)).T > 0

    def __call__(self, S: np.ndarray, want_R: bool = False):
        self.calls += 1
        n = self.n
        rows, cols = np.nonzero(S)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
        cols = cols.astype(np.int64)
        R_ptr, R_idx = self.kernels.r_given_s(n, ptr, cols, self.dep_ptr, self.dep_idx)
        info, _ = self.kernels.simulate(n, R_ptr, R_idx, ptr, cols, self.dep_ptr, self.dep_idx,
                                        self.graph.memory_bytes, self.graph.workspace_bytes, self.graph.fixed_bytes)
        cost, peak = float(self.graph.cost[R_idx].sum()), int(info[4])
        if not want_R:
            return cost, peak
        R = np.zeros((n, n), dtype=bool)
        R[np.repeat(np.arange(n), np.diff(R_ptr)), R_idx] = True
        return cost, peak, R


def rounding_candidates(S_frac: np.ndarray, rounding: str = "both", n_samples: int = 32, seed: int = 0):
    """Rounded checkpoint matrices of a fractional ``S``: ``(label, S)`` pairs.

    Deterministic: ``S* >= tau`` for every threshold of a sweep over the
    distinct values of ``S*``. Randomized: ``n_samples`` Bernoulli draws with
    ``P(S[t, i] = 1) = S*[t, i]``; even draws are independent per entry (the
    paper's), odd draws share one uniform per node (``S* [:, i] >= u_i``), which
    keeps the runs of stages over which a value is kept in one piece.
    """
    n = S_frac.shape[0]
    lower = np.tril(np.ones((n, n), dtype=bool), -1)
    S_frac = np.where(lower, np.clip(S_frac, 0.0, 1.0), 0.0)
    out: list[tuple[str, np.ndarray]] = []
    if rounding in ("both", "deterministic"):
        out += [(f"threshold {tau:.4g}", S_frac >= tau - 1e-9) for tau in _thresholds(S_frac)]
    if rounding in ("both", "randomized"):
        rng = np.random.default_rng(seed)
        for k in range(n_samples):
            u = rng.random((n, n)) if k % 2 == 0 else np.broadcast_to(rng.random((1, n)), (n, n))
            out.append((f"sample {k}", S_frac > u))
    return out


def cheapest_rounding(evaluate: "_Evaluator", S_frac: np.ndarray, budget_bytes: float, n_samples: int,
                      seed: int) -> tuple[float, np.ndarray] | None:
    """``(cost, S)`` of the cheapest of :func:`rounding_candidates` (both kinds) whose optimal recomputation,
    simulated by ``evaluate``, fits ``budget_bytes``; None if none fits. Each distinct rounding is evaluated
    once (near-integral points give many equal draws)."""
    best, seen = None, set()
    for _label, S in rounding_candidates(S_frac, "both", n_samples, seed):
        key = np.packbits(S).tobytes()
        if key in seen:
            continue
        seen.add(key)
        cost, peak = evaluate(S)
        if peak <= budget_bytes and (best is None or cost < best[0] - 1e-9):
            best = (cost, S)
    return best


def _keep_moves(S: np.ndarray, R: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Moves that avoid recomputing ``i`` in stage ``t`` by keeping it since the last stage it was present."""
    n = S.shape[0]
    present = R | S
    moves = []
    ts, is_ = np.nonzero(R & ~np.eye(n, dtype=bool))
    for t, i in zip(ts.tolist(), is_.tolist()):
        prev = np.flatnonzero(present[:t, i])
        if len(prev):
            moves.append((i, np.arange(prev[-1] + 1, t + 1)))
    return moves


def _drop_moves(S: np.ndarray, used: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """Moves that stop keeping a value: a whole run of kept stages, its last stage, or (given
    ``used[t, i]``, whether stage ``t`` reads ``i``) a gap of the run in which nothing reads it."""
    moves = []
    for i in np.flatnonzero(S.any(axis=0)).tolist():
        d = np.diff(np.concatenate([[0], S[:, i].astype(np.int8), [0]]))
        for a, b in zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()):
            moves.append((i, np.arange(a, b)))
            if b - a > 1:
                moves.append((i, np.arange(b - 1, b)))
            if used is not None:
                idle = np.concatenate([[0], (~used[a:b, i]).astype(np.int8), [0]])
                dd = np.diff(idle)
                for ga, gb in zip(np.flatnonzero(dd == 1).tolist(), np.flatnonzero(dd == -1).tolist()):
                    if gb - ga < b - a and not (ga == b - a - 1 and gb == b - a):
                        moves.append((i, np.arange(a + ga, a + gb)))
    return moves


def repair(evaluate: _Evaluator, S: np.ndarray, budget_bytes: int, max_evals: int) -> np.ndarray | None:
    """Greedy descent on the peak (cost breaks ties) until ``S`` fits.

    Moves: keep a value one more stage (``S[t, i] = 1``), or stop keeping it from
    stage ``t`` to the end of its run. The fallback when no rounding fits;
    returns ``None`` if it gets stuck or runs out of evaluations or of time
    (``evaluate``'s deadline).
    """
    from ..formulation import canonical_schedule

    n = S.shape[0]
    S = canonical_schedule(evaluate.graph, S)[1]   # unused keeps only add memory
    rows, cols = np.tril_indices(n, -1)
    stop = evaluate.calls + max_evals
    cost, peak = evaluate(S)
    while peak > budget_bytes and evaluate.calls < stop and not evaluate.expired():
        best = None
        for t, i in zip(rows.tolist(), cols.tolist()):
            if evaluate.calls >= stop or evaluate.expired():
                break
            if S[t, i]:
                e = t
                while e < n and S[e, i]:
                    e += 1
                S[t:e, i] = False
                c, p = evaluate(S)
                S[t:e, i] = True
            else:
                e = -1
                S[t, i] = True
                c, p = evaluate(S)
                S[t, i] = False
            if (p, c) < (peak, cost) and (best is None or (p, c) < best[:2]):
                best = (p, c, t, i, e)
        if best is None:
            return None
        peak, cost, t, i, e = best
        if e < 0:
            S[t, i] = True
        else:
            S[t:e, i] = False
    return S if peak <= budget_bytes else None


def _descend(evaluate: _Evaluator, S: np.ndarray, budget_bytes: int, stop: int) -> tuple[np.ndarray, float]:
    """First-improvement descent over ``S`` (modified in place) until a local optimum, ``stop`` evaluations or
    ``evaluate``'s deadline.

    Moves: avoid a recomputation by keeping the value since the last stage it
    was present (:func:`_keep_moves`), alone or after dropping one run of kept
    stages of another value (:func:`_drop_moves`) to make room.
    """
    cost, _, R = evaluate(S, True)
    improved = True
    while improved and evaluate.calls < stop and not evaluate.expired():
        improved = False
        for drop in [None] + _drop_moves(S, evaluate.reads(R)):
            if evaluate.calls >= stop or evaluate.expired():
                break
            if drop is not None:
                di, drows = drop
                saved = S[drows, di].copy()
                S[drows, di] = False
                R_now = evaluate(S, True)[2]
            else:
                R_now = R
            for i, rows in _keep_moves(S, R_now):
                if evaluate.calls >= stop or evaluate.expired():
                    break
                old = S[rows, i].copy()
                S[rows, i] = True
                c, p = evaluate(S)
                if p <= budget_bytes and c < cost - 1e-9:
                    cost, _, R = evaluate(S, True)
                    improved = True
                    break
                S[rows, i] = old
            if improved:
                break
            if drop is not None:
                S[drows, di] = saved
    return S, cost


def polish(evaluate: _Evaluator, S: np.ndarray, budget_bytes: int, max_evals: int) -> tuple[np.ndarray, float]:
    """Local search from a feasible ``S`` (see :func:`_descend`) within ``max_evals`` evaluations."""
    return _descend(evaluate, S.copy(), budget_bytes, evaluate.calls + max_evals)


def solve_lp_rounding(
    graph: Graph,
    budget_bytes: int,
    backend: str = "highs",
    formulation: str = "strong",
    rounding: str = "both",
    n_samples: int = 32,
    seed: int = 0,
    allowances: Sequence[float] | None = None,
    polish_evals: int = 50000,
    time_limit_s: float | None = None,
    verbose: bool = False,
    _relaxation: tuple | None = None,
) -> RematResult:
    """Approximate the MILP by LP relaxation and two-phase rounding.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    backend : str
        LP solver (``"highs"`` by default).
    formulation : str
        ``"strong"`` (default: a tighter LP) or ``"paper"``.
    rounding : {"both", "deterministic", "randomized"}
        Threshold sweep, Bernoulli samples, or both.
    n_samples : int
        Number of Bernoulli samples per allowance.
    seed : int
        Seed of the samples.
    allowances : sequence of float, optional
        Budget allowances to try, fractions of ``budget_bytes - fixed_bytes``
        in ``[0, 1)``. By default :data:`ALLOWANCES` in order, stopping once
        two allowances in a row brought nothing cheaper.
    polish_evals : int
        Evaluation budget of the local search that improves the best
        roundings (each evaluation is one R-given-S and one simulation);
        0 turns it off (plain two-phase rounding).
    time_limit_s : float, optional
        Wall-clock limit of the call: once it is spent no new allowance
        starts, and the LP solver, the rounding sweep, the repair and the
        local search stop (with the best schedule so far, or the cheapest
        heuristic's; none if no schedule was found in time).
    verbose : bool
        Let the LP solver print its log.
    _relaxation : (StandardForm, BackendResult, LP sequence), optional
        Internal (``ilp``): the LP relaxation of ``formulation`` at the full
        budget, already solved (by the given
        :func:`~remat_core.solvers.backends.lp_sequence`, whose basis the
        next allowance then starts from); allowance 0 reuses it instead of
        solving the same LP again.

    Returns
    -------
    RematResult
        ``FEASIBLE`` (``OPTIMAL`` when the schedule meets the LP bound).
        ``lower_bound`` is the LP optimum at the full budget, a valid lower
        bound on the optimal cost; when that LP was not solved (allowance 0
        not tried, or the time limit) it is the relaxation of
        :func:`remat_core.bounds.cost_lower_bound` in the time left
        (``stats["bound_method"]``). ``stats`` has ``lp_objective`` (per allowance), ``allowance``,
        ``candidate`` (threshold or sample that won), ``rounded_cost`` (before
        the local search), ``lp_time_s``, ``lp_warm_solves`` (LPs re-solved from the
        previous allowance's basis; ``lp_warm_abandoned``: re-solves slower than a
        solve from scratch, given up for one), ``rounding_time_s`` and ``polish_time_s``. ``INFEASIBLE`` when the LP at the full budget is
        infeasible (then so is the MILP); ``NO_SOLUTION`` when no rounding fits.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> res = solve(linear_graph(6), 5, method="lp-rounding")
    >>> res.success, res.peak_memory_bytes <= 5, res.lower_bound <= res.objective
    (True, True, True)
    """
    start = time.perf_counter()   # the limit covers the imports (scipy.sparse's first import: 0.3-0.6 s)
    from ..formulation import build_milp, canonical_schedule
    from . import validate_time_limit
    from .backends import lp_sequence

    if rounding not in ("both", "deterministic", "randomized"):
        raise ValueError(f"`rounding` must be 'both', 'deterministic' or 'randomized'; got {rounding!r}")
    if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
        raise ValueError(f"`n_samples` must be a positive integer; got {n_samples!r}")
    if isinstance(polish_evals, bool) or not isinstance(polish_evals, numbers.Integral) or polish_evals < 0:
        raise ValueError(f"`polish_evals` must be a non-negative integer; got {polish_evals!r}")
    if allowances is None:
        grid, auto = list(ALLOWANCES), True
    else:
        try:
            grid = [float(a) for a in allowances]
        except (TypeError, ValueError):
            raise ValueError(f"`allowances` must be a sequence of numbers in [0, 1); got {allowances!r}") from None
        if not grid or any(not 0.0 <= a < 1.0 for a in grid):
            raise ValueError(f"`allowances` must be a non-empty sequence of numbers in [0, 1); got {allowances!r}")
        auto = False
    validate_time_limit(time_limit_s)
    from ..formulation.scaling import cost_scale, scaled_graph, unscale_result

    scale = cost_scale(graph) if _relaxation is None else 1.0   # ilp's relaxation is already scaled
    if scale != 1.0:   # costs of 1e18 and more stopped HiGHS ("model status Unknown"): solve scaled costs
        return unscale_result(solve_lp_rounding(
            scaled_graph(graph, scale), budget_bytes, backend=backend, formulation=formulation, rounding=rounding,
            n_samples=n_samples, seed=seed, allowances=allowances, polish_evals=polish_evals,
            time_limit_s=None if time_limit_s is None else max(float(time_limit_s) - (time.perf_counter() - start),
                                                              1e-3), verbose=verbose), scale)
    from ._deadline import _cheapest_heuristic, guard, not_worse_than_heuristic

    # a program over the memory limit is not built; with a time limit, a large one is solved in a child killed
    # at the limit (the LP and the rounding loops cannot be interrupted here): see _deadline
    guarded = None if _relaxation is not None else guard("lp-rounding", graph, budget_bytes, dict(
        backend=backend, formulation=formulation, rounding=rounding, n_samples=n_samples, seed=seed,
        allowances=allowances, polish_evals=polish_evals, verbose=verbose),
        None if time_limit_s is None else max(float(time_limit_s) - (time.perf_counter() - start), 1e-3))
    if guarded is not None:
        return guarded
    lps = _relaxation[2] if _relaxation is not None else lp_sequence(backend, verbose=verbose)
    unit = _relaxation[0].memory_unit if _relaxation is not None else None
    like = _relaxation[0] if _relaxation is not None and _relaxation[0].formulation == formulation else None
    deadline = None if time_limit_s is None else start + float(time_limit_s)
    base_cost = float(graph.cost.sum())
    stats: dict[str, Any] = {"backend": backend, "formulation": formulation, "rounding": rounding}

    trivial = trivial_result(graph, budget_bytes, backend, stats)
    if trivial is not None:
        return trivial
    lower = graph.min_budget_lower_bound_bytes()
    # never worse than a heuristic at the same budget (the rounding can be: SegNet at 0.5, 1.286x the optimum);
    # they take milliseconds, and run first so that the time limit covers them. Explicit allowances: the
    # rounding itself, as asked
    heuristic = _cheapest_heuristic(graph, budget_bytes, deadline) if auto else None

    free = budget_bytes - graph.fixed_bytes
    evaluate = _Evaluator(graph, deadline)
    lp_time = rounding_time = 0.0
    lp_objective: dict[float, float | None] = {}
    seen: set[bytes] = set()
    best: tuple[float, str, float, np.ndarray] | None = None   # (cost, label, allowance, S)
    rounded: tuple[float, str, float] | None = None            # the cheapest plain rounding
    stale, lower_bound, polish_used, polish_time = 0, None, 0, 0.0
    lp_budgets_done: set[int] = set()
    for a in grid:
        if evaluate.expired():
            stats["stopped"] = "time limit"
            break
        lp_budget = graph.fixed_bytes + int(np.floor(free * (1.0 - a)))
        if lp_budget < lower:
            lp_objective[a] = None
            break
        if lp_budget in lp_budgets_done:   # coarse sizes: the same LP as a smaller allowance
            continue
        lp_budgets_done.add(lp_budget)
        t0 = time.perf_counter()
        if (_relaxation is not None and lp_budget == budget_bytes and _relaxation[0].budget_bytes == budget_bytes
                and _relaxation[0].formulation == formulation):
            sf, out = _relaxation[:2]   # the caller's solve of this very LP
        else:
            # one memory unit for every allowance: the LPs then differ only in bounds, and each
            # re-solve starts from the last optimal basis (HiGHS)
            sf = None if like is None else like.with_budget(lp_budget)   # bounds only, where it can
            if sf is None:
                sf = build_milp(graph, lp_budget, formulation, memory_unit=unit)
            lp_limit = None if time_limit_s is None else max(time_limit_s - (time.perf_counter() - start), 0.05)
            out = lps.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, time_limit_s=lp_limit)
        unit, like = sf.memory_unit, sf
        lp_time += time.perf_counter() - t0
        if out.status is not SolveStatus.OPTIMAL and out.status is not SolveStatus.INFEASIBLE:
            # the LP solver stopped early: the time limit (the LP itself is always feasible or infeasible)
            lp_objective[a] = None
            stats["stopped"] = "time limit"
            break
        if out.status is not SolveStatus.OPTIMAL:
            lp_objective[a] = None
            if a == 0.0 and out.status is SolveStatus.INFEASIBLE:
                stats.update(lp_objective={0.0: None}, lp_time_s=lp_time, min_budget_lower_bound_bytes=lower)
                return RematResult(status=SolveStatus.INFEASIBLE, backend=backend, stats=stats,
                                   message="the LP relaxation at the full budget is infeasible, so is every schedule")
            break  # a smaller LP budget is infeasible too
        obj = out.objective + sf.objective_offset
        lp_objective[a] = obj
        if a == 0.0:
            lower_bound = max(obj, base_cost)
        t0 = time.perf_counter()
        cands = []      # (cost, label, S) within budget
        lowest = None   # (peak, S): the rounding closest to fitting
        for label, S in rounding_candidates(sf.fractional(out.x)[1], rounding, n_samples,
                                            seed + len(lp_budgets_done) - 1):
            if (cands or lowest is not None) and evaluate.expired():
                break
            key = np.packbits(S).tobytes()
            if key in seen:
                continue
            seen.add(key)
            cost, peak = evaluate(S)
            if peak <= budget_bytes:
                cands.append((cost, label, S))
            elif lowest is None or peak < lowest[0]:
                lowest = (peak, S)
        if not cands and best is None and lowest is not None:
            S = repair(evaluate, lowest[1], budget_bytes, max(polish_evals // _POLISH_SHARE, _REPAIR_EVALS))
            if S is not None:
                cands.append((evaluate(S)[0], "repaired rounding", S))
        cands.sort(key=lambda v: v[0])
        rounding_time += time.perf_counter() - t0
        if not cands:
            stale += best is not None
        else:
            if rounded is None or cands[0][0] < rounded[0] - 1e-9:
                rounded = (cands[0][0], cands[0][1], a)
            improved = False
            # phase 3: local search from the cheapest roundings of this allowance
            t0 = time.perf_counter()
            for cost, label, S in cands[:_POLISH_PER_ALLOWANCE]:
                left = polish_evals - polish_used
                if left > 0 and not (lower_bound is not None and cost <= lower_bound * (1 + 1e-9)):
                    calls = evaluate.calls
                    S, c2 = polish(evaluate, S, budget_bytes, min(left, max(polish_evals // _POLISH_SHARE, 1)))
                    polish_used += evaluate.calls - calls
                    if c2 < cost - 1e-9:
                        cost, label = c2, f"{label} + local search"
                if best is None or cost < best[0] - 1e-9:
                    best, improved = (cost, label, a, S), True
            polish_time += time.perf_counter() - t0
            stale = 0 if improved else stale + 1
        if auto and best is not None and (stale >= _PATIENCE or (
                lower_bound is not None and best[0] <= lower_bound * (1 + 1e-9))):
            break
    if evaluate.expired():
        stats["stopped"] = "time limit"
    stats.update(lp_objective=lp_objective, lp_time_s=lp_time, lp_warm_solves=lps.warm_solves,
                 lp_warm_abandoned=lps.warm_abandoned,
                 rounding_time_s=rounding_time,
                 polish_time_s=polish_time, candidates=len(seen), evaluations=evaluate.calls)
    if lower_bound is not None:
        stats["lp_lower_bound"] = lower_bound
    else:   # the LP did not finish: the cheap relaxation of remat_core.bounds in what time is left (sum of costs at 0)
        from ..bounds import cost_lower_bound

        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
        got = cost_lower_bound(graph, budget_bytes, time_limit_s=left)
        if math.isfinite(got.value):
            lower_bound = max(float(got.value), base_cost)
            stats["bound_method"] = got.method
    if best is None:
        message = "no rounding fits the budget at any allowance tried"
        if stats.get("stopped") == "time limit":
            message = f"the time limit ({time_limit_s:g} s) ran out before a rounding fit the budget"
        return not_worse_than_heuristic(graph, RematResult(
            status=SolveStatus.NO_SOLUTION, lower_bound=lower_bound, backend=backend, stats=stats, message=message),
            heuristic)
    cost, label, allowance, S_best = best
    stats.update(allowance=allowance, candidate=label, rounded_cost=rounded[0])
    R, S = canonical_schedule(graph, S_best)
    schedule = Schedule(R, S)
    cost = simulate(graph, schedule, timeline=False).total_cost
    lb = None if lower_bound is None else min(lower_bound, cost)
    status = SolveStatus.OPTIMAL if lb is not None and cost <= lb * (1 + 1e-9) + 1e-12 else SolveStatus.FEASIBLE
    return not_worse_than_heuristic(graph, RematResult(
        status=status, schedule=schedule, lower_bound=lb, backend=backend, stats=stats,
        message=f"rounded at allowance {stats['allowance']:g} ({stats['candidate']})"), heuristic)
