"""A lower bound on the cost of every schedule within a budget, at every graph size.

The LP relaxation of the MILP (``lp-rounding``, ``ilp``) has ``O(n^2)``
columns and up to ``O(n^3)`` nonzeros: beyond a few hundred nodes it does not
fit. :func:`cost_lower_bound` relaxes the problem much further, to one
column per *gap* of a value and one row per stage, and stays small at every
size (a few million nonzeros on the 5,239-node LSTM graph).

The relaxation
--------------
Stage ``t`` computes ``v_t`` last (``R[t, k] = 0`` for ``k > t``). At the
instant ``v_t`` is allocated, the memory accounting of ``docs/memory_model.rst``
holds at least: the fixed bytes, ``v_t`` and its workspace, every input of
``v_t`` (it is read now, so it is resident), and every value kept into stage
``t + 1`` (a kept value is never freed during the stage, and it was computed
or kept in stage ``t``, so it is resident by then). Let ``L_t`` be the values
``v < t`` that are not inputs of ``t`` and have a reader ``u > t``. If ``v``
in ``L_t`` is not kept into stage ``t + 1``, the first such reader ``u``
needs ``v`` in stage ``u``, so ``v`` is computed again in some stage
``s`` in ``(t, u]``: a computation beyond its first one (stage ``v``).

With readers ``c_1 < c_2 < ...`` of ``v``, its *gaps* are the open intervals
``(v, c_1), (c_1, c_2), ...``: a value dropped at several stages of one gap
may be repaired by one recomputation, drops in different gaps need distinct
ones (their repair stages are disjoint). With ``y[v, g]`` = "``v`` is dropped
somewhere in gap ``g``" (binary, relaxed to ``[0, 1]``):

    minimize   sum(cost) + sum_{v, g} cost[v] * y[v, g]
    subject to sum_{v in L_t} min(m_v, E_t) * y[v, gap(v, t)] >= E_t
               for every stage t with E_t > 0,

where ``E_t = fixed + m_t + ws_t + m(inputs(t)) + m(L_t) - budget`` is the
memory that must be dropped at that instant. The coefficient of ``v`` is
capped at ``E_t`` (valid because ``y`` is binary in the exact problem; it
tightens the relaxation: a large cheap value cannot cover a stage fractionally).

Every subset of the rows gives a valid (weaker) bound, and so does the
Lagrangian value ``sum_t pi_t E_t + sum_g min(0, cost_g - sum_t pi_t a_tg)``
for any ``pi >= 0``: the value reported is that Lagrangian at the duals of the
last LP that HiGHS solved to optimality, so a solver tolerance can only lower
it. Large instances are solved by cutting planes: the rows whose single-row
(fractional knapsack) bound is largest first, then the most violated rows,
until none is violated or the time is up.

Recomputations need their inputs
--------------------------------
The rows above charge a dropped value only its own cost, as if its inputs
were at hand whenever it is recomputed. Where a large value is cheap to
compute from inputs nothing else holds by then (an LSTM's gates and
products), that is far too generous. For a row ``t`` call ``w`` *dead at t*
when every reader of ``w`` is before ``t``. If ``v`` in ``L_t`` is not kept
into stage ``t + 1`` (``d[v, t]``, at most ``y[v, gap(v, t)]``), it is
computed again after ``t``, and each dead input ``w`` of it must then be
present: resident at the instant of the row (``r[w, t]``, whose bytes the
row now counts), or computed again after ``t`` (``q[w, t]``), which needs
``w``'s own dead inputs in the same way. A computation of ``w`` after its
last reader is one no gap of ``w`` pays for; one such computation (``T[w]``,
costing ``cost[w]``, at least every ``q[w, t]``) may serve every row:

    sum_v m_v d[v, t] - sum_w m_w r[w, t] >= E_t,
    r[w, t] + q[w, t] >= d[v, t]   (w a dead input of v),
    r[x, t] + q[x, t] >= q[w, t]   (x a dead input of w),   T[w] >= q[w, t].

These *closure rows* are added, two rows a round, to the rows with the
largest duals of the cutting-plane LP, which is then solved again from its
basis; inputs are followed back at most :data:`_CLOSURE_DEPTH` levels (a
shallower closure leaves requirements out, so it is still a relaxation).
The value reported is the Lagrangian of the strengthened LP at its duals.

Examples
--------
>>> from remat_core.zoo import linear_graph
>>> from remat_core.units import resolve_budget
>>> g = linear_graph(8)
>>> res = cost_lower_bound(g, resolve_budget(g, 0.5))
>>> res.value > float(g.cost.sum()), res.method
(True, 'lp-cuts')
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from .errors import SolverError
from .graph import Graph

__all__ = ["BoundResult", "cost_lower_bound", "DEFAULT_MAX_NONZEROS", "INTEGER_Y_NODES", "REFERENCE_OPTIMUM_OVER_BOUND",
           "gap_statement"]

log = logging.getLogger(__name__)

#: Nonzeros the cutting-plane LP may hold (about 40 bytes each in HiGHS); the full program of the largest shared
#: graph (LSTM_512, 5,239 nodes) has 2.7 M.
DEFAULT_MAX_NONZEROS = 4_000_000
#: Nonzeros of the constraint rows materialized at once when the rows are scanned (knapsack, separation).
_CHUNK_NONZEROS = 250_000
#: A row is violated when its left-hand side is below ``(1 - _TOL) * E_t``.
_TOL = 1e-7
#: Share of the bound given up against floating-point error in the Lagrangian's evaluation.
_SAFETY = 1e-9


#: How far above :func:`cost_lower_bound` the optimum lay where it was measured near the smallest budget: the
#: largest ratio to this bound of ``ilp``'s optimum, or of its best schedule where it did not prove one (the
#: optimum lies below), on 12 random training graphs of 13-41 nodes at budgets from the smallest any heuristic
#: finds to halfway to the checkpoint-all peak (``python benchmarks/bench_bounds.py --tight``, README section
#: bounds-tight: proven optima 1.00-1.24 times the bound, one at least 1.26). Small graphs only: on larger ones
#: the ratio may be larger, so statements built on it are "likely", not proven.
REFERENCE_OPTIMUM_OVER_BOUND = 1.32


def gap_statement(cost: float, bound: float) -> str:
    """Which side of the gap between a schedule's ``cost`` and the relaxation's ``bound`` is likely far, in a
    sentence: beyond ``REFERENCE_OPTIMUM_OVER_BOUND`` at least the excess is likely the schedule's; below it
    the whole gap may be the bound's.

    >>> gap_statement(1.5, 1.0)[:55]
    "50.0% above the relaxation's lower bound: the optimum l"
    """
    ratio, ref = cost / bound, REFERENCE_OPTIMUM_OVER_BOUND
    head = (f"{100 * (ratio - 1):.1f}% above the relaxation's lower bound: the optimum lies between; where it was "
            f"measured near the smallest budget it lay up to {ref:.2f} times this bound (small graphs; "
            "docs/large_graphs.rst)")
    if ratio > ref:
        return f"{head}, so this schedule is likely at least {100 * (ratio / ref - 1):.1f}% above optimal"
    return f"{head}, so the whole gap may be the bound's: the schedule may be close to optimal"


@dataclass(frozen=True)
class BoundResult:
    """A lower bound on the cost of every schedule of a graph within a budget.

    Attributes
    ----------
    value : float
        The bound (``inf`` when no schedule fits the budget: some node's
        inputs, output and workspace alone exceed it).
    method : str
        What gave it: ``"lp-closure"`` (the LP with the rows strengthened by
        the inputs of recomputations), ``"lp-cuts"`` (the relaxation's LP over the rows added
        so far), ``"knapsack"`` (the best single row, when no LP finished),
        ``"sum"`` (the sum of the node costs: no stage must drop anything),
        or ``"infeasible"``.
    cuts : int
        Rows in the last LP solved.
    rows : int
        Stages that must drop memory (``E_t > 0``), the rows of the full LP.
    converged : bool
        Whether no row was left violated (the value is the full LP's).
    sum_cost, knapsack : float
        The sum of the node costs, and the best single-row bound.
    time_s : float
        Wall-clock time of the call.
    integer : bool
        Whether the value is the dual bound of that LP's model solved with
        its ``y`` integer (``integer_y=True``; only when that raised it).
    """

    value: float
    method: str
    cuts: int
    rows: int
    converged: bool
    sum_cost: float
    knapsack: float
    time_s: float
    integer: bool = False


class _Rows:
    """The constraint rows of the relaxation, materialized on demand (never all at once)."""

    def __init__(self, graph: Graph, budget_bytes: int):
        n = graph.n
        mem, cost = graph.memory_bytes, graph.cost
        _, _, user_ptr, user_idx = graph.csr
        count = np.diff(user_ptr)
        owner = np.repeat(np.arange(n, dtype=np.int64), count)
        # gap j of v spans stages (left, right): left is v or its previous reader, right its next reader
        left = np.empty_like(user_idx)
        left[1:] = user_idx[:-1]
        starts = user_ptr[:-1][count > 0]
        left[starts] = np.flatnonzero(count > 0)
        lo, hi = left + 1, user_idx - 1          # the stages t of the gap, inclusive
        keep = (hi >= lo) & (mem[owner] > 0)
        self.owner, self.lo, self.hi = owner[keep], lo[keep], hi[keep]
        self.a = mem[self.owner].astype(np.float64)
        self.c = cost[self.owner].astype(np.float64)
        # m(L_t) and |L_t| for every stage, exactly in int64, from difference arrays over the gaps
        dm = np.zeros(n + 1, dtype=np.int64)
        np.add.at(dm, self.lo, mem[self.owner])
        np.add.at(dm, self.hi + 1, -mem[self.owner])
        dn = np.zeros(n + 1, dtype=np.int64)
        np.add.at(dn, self.lo, 1)
        np.add.at(dn, self.hi + 1, -1)
        base = graph.fixed_bytes + graph.node_need_bytes()
        self.infeasible = bool(n and base.max() > budget_bytes)
        excess = base + np.cumsum(dm)[:n] - int(budget_bytes)
        self.stages = np.flatnonzero(excess > 0)                     # the rows
        self.E = excess[self.stages].astype(np.float64)
        self.size = np.cumsum(dn)[:n][self.stages]                   # nonzeros of each row
        # rows are built for sorted subsets of stage positions; gap g covers positions [p_lo, p_hi)
        self.p_lo = np.searchsorted(self.stages, self.lo, side="left")
        self.p_hi = np.searchsorted(self.stages, self.hi, side="right")

    @property
    def cost_scale(self) -> float:
        """The unit the LPs count costs in (the largest cost of a gap; 1 if there is none)."""
        return float(self.c.max()) if len(self.c) and self.c.max() > 0 else 1.0

    def build(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``rows`` (sorted positions into :attr:`stages`) as COO ``(row position in rows, gap, coefficient)``."""
        q_lo = np.searchsorted(rows, self.p_lo, side="left")
        q_hi = np.searchsorted(rows, self.p_hi, side="left")
        cnt = q_hi - q_lo
        g = np.flatnonzero(cnt > 0)
        cnt = cnt[g]
        total = int(cnt.sum())
        offs = np.repeat(np.cumsum(cnt) - cnt, cnt)
        r = np.arange(total, dtype=np.int64) - offs + np.repeat(q_lo[g], cnt)
        gap = np.repeat(g, cnt)
        coef = np.minimum(self.a[gap], self.E[rows[r]])
        return r, gap, coef

    def chunks(self, rows: np.ndarray):
        """``rows`` split into consecutive pieces of about :data:`_CHUNK_NONZEROS` nonzeros."""
        csum = np.cumsum(self.size[rows])
        cut = np.searchsorted(csum, np.arange(_CHUNK_NONZEROS, int(csum[-1]) if len(csum) else 0, _CHUNK_NONZEROS))
        return np.split(rows, np.unique(cut[cut > 0]))

    def knapsack(self, rows: np.ndarray, deadline: float | None = None) -> np.ndarray:
        """Each row's own bound (fractional knapsack: the cheapest bytes per unit of cost first); rows not
        reached by ``deadline`` get 0 (also a valid bound)."""
        out = np.zeros(len(rows))
        at = 0
        for part in self.chunks(rows):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            r, gap, coef = self.build(part)
            order = np.lexsort((self.c[gap] / coef, r))
            r, gap, coef = r[order], gap[order], coef[order]
            cum = np.cumsum(coef)
            first = np.searchsorted(r, np.arange(len(part)))
            before = np.concatenate([[0.0], cum])[first]
            need = self.E[part][r] - (cum - coef - before[r])        # what is still to cover when reaching the item
            take = np.clip(need / coef, 0.0, 1.0)
            out[at:at + len(part)] = np.bincount(r, weights=take * self.c[gap], minlength=len(part))
            at += len(part)
        return out

    def slack(self, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``(lhs - E_t) / E_t`` of each row at the point ``y`` (negative: violated)."""
        out = np.zeros(len(rows))
        at = 0
        for part in self.chunks(rows):
            r, gap, coef = self.build(part)
            lhs = np.bincount(r, weights=coef * y[gap], minlength=len(part))
            out[at:at + len(part)] = lhs / self.E[part] - 1.0
            at += len(part)
        return out


def cost_lower_bound(graph: Graph, budget_bytes: int, time_limit_s: float | None = None,
                     max_nonzeros: int = DEFAULT_MAX_NONZEROS, rows_per_round: int | None = None,
                     closure: bool = True, integer_y: bool = False) -> BoundResult:
    """A lower bound on the cost of every schedule of ``graph`` whose peak is within ``budget_bytes``.

    The relaxation and why it is valid: the module docstring. It needs
    ``O(n + edges)`` memory plus the LP's rows (at most ``max_nonzeros``), and
    no formulation of the MILP.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
        Total device bytes (fixed bytes included).
    time_limit_s : float, optional
        Wall-clock limit. The LP rounds stop at it (HiGHS gets what is left);
        the bound is that of the last LP solved to optimality, else the best
        single-row bound, else the sum of the costs.
    max_nonzeros : int
        Largest number of nonzeros the LP may hold; rows beyond it are not added.
    rows_per_round : int, optional
        Rows added per round (default: an eighth of the rows, at least 50 and at most 200; a short first
        round gives a valid LP bound sooner).
    closure : bool
        After the cutting planes, strengthen the rows with the largest duals by the inputs a recomputation
        needs (module docstring, *Recomputations need their inputs*); the bound is the larger of the two LPs.
    integer_y : bool
        Then solve the last LP's model again with the ``y`` columns integer (binary in the exact problem, so
        still a relaxation), within ``INTEGER_Y_NODES`` branch-and-bound nodes and the time limit, and
        take HiGHS's dual bound when it is larger (``integer`` in the result). On random layered training
        graphs of 245-2,029 nodes at 0.5-0.6 of the peak it raised the bound by 0.01-0.08% of the node costs
        in 0.2-4 s.

    Returns
    -------
    BoundResult

    Raises
    ------
    ValueError
        If ``budget_bytes``, ``time_limit_s`` or ``max_nonzeros`` is not a valid number, or ``closure``
        not a bool.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(4)                       # a chain: unit costs and sizes
    >>> cost_lower_bound(g, 10**6).value          # nothing has to be dropped
    9.0
    """
    start = time.perf_counter()
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer)) or budget_bytes < 0:
        raise ValueError(f"`budget_bytes` must be a non-negative integer; got {budget_bytes!r}")
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
                                     or not time_limit_s >= 0):
        raise ValueError(f"`time_limit_s` must be a number >= 0 or None; got {time_limit_s!r}")
    if isinstance(max_nonzeros, bool) or not isinstance(max_nonzeros, (int, np.integer)) or max_nonzeros < 1:
        raise ValueError(f"`max_nonzeros` must be a positive integer; got {max_nonzeros!r}")
    if not isinstance(closure, (bool, np.bool_)):
        raise ValueError(f"`closure` must be True or False; got {closure!r}")
    if not isinstance(integer_y, (bool, np.bool_)):
        raise ValueError(f"`integer_y` must be True or False; got {integer_y!r}")
    deadline = None if time_limit_s is None else start + float(time_limit_s)
    total = float(graph.cost.sum())
    rows = _Rows(graph, int(budget_bytes))

    def result(value: float, method: str, cuts: int = 0, converged: bool = False, knap: float = 0.0) -> BoundResult:
        return BoundResult(value=value, method=method, cuts=cuts, rows=len(rows.stages), converged=converged,
                           sum_cost=total, knapsack=total + knap, time_s=time.perf_counter() - start)

    if rows.infeasible:
        return result(math.inf, "infeasible", converged=True)
    if not len(rows.stages):
        return result(total, "sum", converged=True)
    everything = np.arange(len(rows.stages))
    knap = rows.knapsack(everything, deadline)
    best_knap = float(knap.max())
    best = result(total + best_knap * (1 - _SAFETY), "knapsack" if best_knap > 0 else "sum", knap=best_knap)
    if deadline is not None and time.perf_counter() >= deadline:
        return best
    try:
        best, lp_rows, pi, h = _cutting_planes(rows, knap, total, deadline, max_nonzeros, rows_per_round, best,
                                               result)
    except (ImportError, SolverError):
        return best
    if h is None or (deadline is not None and time.perf_counter() >= deadline):
        return best
    if closure:
        try:
            value = _closure_lp(graph, rows, h, lp_rows, pi, knap, deadline, max_nonzeros)
        except SolverError:
            return best   # HiGHS's model may be half-built: no integer solve on it either
        if value is not None and total + value * (1 - _SAFETY) > best.value:
            best = result(total + value * (1 - _SAFETY), "lp-closure", best.cuts, best.converged,
                          best.knapsack - total)
    if not integer_y or (deadline is not None and time.perf_counter() >= deadline):
        return best
    value = _integer_y(h, len(rows.a), deadline)
    if value is None or total + value * rows.cost_scale * (1 - _SAFETY) <= best.value:
        return best
    return dataclasses.replace(best, value=total + value * rows.cost_scale * (1 - _SAFETY), integer=True,
                               time_s=time.perf_counter() - start)


#: Branch-and-bound nodes of the integer solve of ``integer_y`` (a work limit, so that its bound does not
#: depend on the machine's speed when no time limit cuts it; the measured solves ended within it).
INTEGER_Y_NODES = 200


def _limit_to(h, deadline: float | None) -> bool:
    """Give HiGHS the time left until ``deadline`` (``perf_counter`` time; None: no limit); False when none is
    left, and the solve should not start."""
    if deadline is None:
        return True
    left = deadline - time.perf_counter()
    if left <= 0:
        return False
    h.setOptionValue("time_limit", h.getRunTime() + left)
    return True


def _integer_y(h, n_gaps: int, deadline: float | None) -> float | None:
    """HiGHS's dual bound (scaled units) of the model in ``h`` with its first ``n_gaps`` columns (``y``)
    integer; ``None`` when there is none (no time, or no bound found)."""
    import highspy

    kind = np.full(n_gaps, highspy.HighsVarType.kInteger, dtype=np.uint8)
    h.changeColsIntegrality(n_gaps, np.arange(n_gaps, dtype=np.int32), kind)
    h.setOptionValue("presolve", "on")
    h.setOptionValue("mip_max_nodes", INTEGER_Y_NODES)
    if not _limit_to(h, deadline):
        return None
    h.run()
    bound = float(h.getInfo().mip_dual_bound)
    return bound if np.isfinite(bound) else None


def _cutting_planes(rows: _Rows, knap: np.ndarray, total: float, deadline: float | None, max_nonzeros: int,
                    rows_per_round: int | None, best: BoundResult, result
                    ) -> tuple[BoundResult, np.ndarray, np.ndarray, object]:
    """The LP over growing subsets of the rows (module docstring); ``best`` until one is solved. Also returns
    the rows (sorted positions) and duals of the LP whose Lagrangian gave the bound (empty if none), and the
    HiGHS instance holding that LP solved to optimality (``None`` if the last solve was not)."""
    import highspy

    from ._native_io import native_output_silenced

    n_rows, n_gaps = len(rows.stages), len(rows.a)
    per_round = int(rows_per_round) if rows_per_round else max(50, min(200, n_rows // 8))
    # scaled units: each row divided by its excess (right-hand side 1, coefficients in (0, 1]), costs by the
    # largest cost in the program
    c_scale = rows.cost_scale
    cost = rows.c / c_scale
    with native_output_silenced("stdout"):   # HiGHS prints a banner when made, before any option can stop it
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "off")
    h.addVars(n_gaps, np.zeros(n_gaps), np.ones(n_gaps))
    h.changeColsCost(n_gaps, np.arange(n_gaps, dtype=np.int32), cost)
    in_lp = np.zeros(n_rows, dtype=bool)
    order_in_lp: list[np.ndarray] = []   # the rows in HiGHS's order (the duals' order)
    nonzeros = 0
    candidates = np.argsort(-knap, kind="stable")   # the first round: the strongest single rows
    value, cuts, converged = None, 0, False
    best_rows, best_pi = np.zeros(0, dtype=np.int64), np.zeros(0)
    while True:
        room = max_nonzeros - nonzeros
        take = candidates[np.cumsum(rows.size[candidates]) <= room][:per_round]
        if not len(take):
            break
        take = np.sort(take)
        r, gap, coef = rows.build(take)
        order = np.argsort(r, kind="stable")
        ptr = np.searchsorted(r[order], np.arange(len(take)))
        status = h.addRows(len(take), np.ones(len(take)), np.full(len(take), highspy.kHighsInf), len(r),
                           ptr.astype(np.int32), gap[order].astype(np.int32), coef[order] / rows.E[take][r[order]])
        if status == highspy.HighsStatus.kError:
            raise SolverError("HiGHS rejected the bound's rows")
        in_lp[take] = True
        order_in_lp.append(take)
        nonzeros += len(r)
        if not _limit_to(h, deadline):
            break
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:   # the last optimal LP stands
            log.info("cost bound: HiGHS stopped with %s after %d rows", h.modelStatusToString(h.getModelStatus()),
                     int(in_lp.sum()))
            break
        sol = h.getSolution()
        pi = np.maximum(np.asarray(sol.row_dual, dtype=np.float64), 0.0)
        lp_rows = np.concatenate(order_in_lp)
        # the Lagrangian at these duals: valid for any pi >= 0, whatever the solver's tolerances
        rr, gg, cc = rows.build(np.sort(lp_rows))
        pi = pi[np.argsort(lp_rows)]      # in sorted row order, as built
        lp_rows = np.sort(lp_rows)
        reduced = cost - np.bincount(gg, weights=pi[rr] * cc / rows.E[lp_rows][rr], minlength=n_gaps)
        lagrangian = float(pi.sum() + np.minimum(reduced, 0.0).sum()) * c_scale
        if value is None or lagrangian > value:
            value, best_rows, best_pi = lagrangian, lp_rows, pi
        cuts = len(lp_rows)
        y = np.clip(np.asarray(sol.col_value, dtype=np.float64), 0.0, 1.0)
        out = np.flatnonzero(~in_lp)
        if not len(out):
            converged = True
            break
        slack = rows.slack(out, y)
        violated = slack < -_TOL
        if not violated.any():
            converged = True
            break
        candidates = out[violated][np.argsort(slack[violated], kind="stable")]
        if deadline is not None and time.perf_counter() >= deadline:
            break
    if value is None or value * (1 - _SAFETY) < best.value - total:
        out = best if value is None else result(best.value, "knapsack", cuts, converged, best.knapsack - total)
    else:
        out = result(total + max(value, 0.0) * (1 - _SAFETY), "lp-cuts", cuts, converged, best.knapsack - total)
    return out, best_rows, best_pi, (h if value is not None and h.getModelStatus() ==
                                     highspy.HighsModelStatus.kOptimal else None)


#: Rows strengthened by :func:`_closure_lp` (those with the largest duals in the cutting-plane LP).
_CLOSURE_ROWS = 64
#: Rows strengthened per round; rounds stop when one raises the bound by less than :data:`_CLOSURE_GAIN`.
_CLOSURE_ROUND = 2
_CLOSURE_GAIN = 1e-3
#: Levels of inputs followed back from a dropped value (deeper requirements are left out: a relaxation).
_CLOSURE_DEPTH = 3


def _closure_lp(graph: Graph, rows: _Rows, h, lp_rows: np.ndarray, pi: np.ndarray, knap: np.ndarray,
                deadline: float | None, max_nonzeros: int) -> float | None:
    """Adds to the cutting-plane LP ``h`` (solved) the closure rows of the rows with the largest duals (module
    docstring, *Recomputations need their inputs*) and solves it again from its basis; returns the bound on
    the recomputation cost (the Lagrangian at the new duals), or ``None`` when the LP did not finish in time."""
    mem = graph.memory_bytes.astype(np.int64)
    cost = graph.cost.astype(np.float64)
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    count = np.diff(user_ptr)
    last_read = np.full(graph.n, -1, dtype=np.int64)
    last_read[count > 0] = user_idx[user_ptr[1:][count > 0] - 1]
    c_scale = rows.cost_scale
    # rows to strengthen, in rounds: the largest duals first, then the strongest single rows
    order = np.lexsort((-knap[lp_rows], -pi))
    chosen = lp_rows[order][pi[order] > 0][:_CLOSURE_ROWS]
    if not len(chosen):
        return None
    tail: dict[int, int] = {}                           # value -> its column "recomputed after its last reader"
    value = None
    for first in range(0, len(chosen), _CLOSURE_ROUND):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        got = _closure_round(rows, h, chosen[first:first + _CLOSURE_ROUND], tail, mem, cost / c_scale, dep_ptr,
                             dep_idx, last_read, deadline, max_nonzeros)
        if got is None:
            break
        gained = value is None or got * c_scale > value * (1 + _CLOSURE_GAIN)
        value = got * c_scale if value is None else max(value, got * c_scale)
        if not gained:
            break
    return value


def _closure_round(rows: _Rows, h, chosen: np.ndarray, tail: dict[int, int], mem: np.ndarray, cost: np.ndarray,
                   dep_ptr: np.ndarray, dep_idx: np.ndarray, last_read: np.ndarray, deadline: float | None,
                   max_nonzeros: int) -> float | None:
    """Adds the closure rows of ``chosen`` to ``h`` and solves it again; the Lagrangian (scaled units) or
    ``None``. ``tail`` (the columns "recomputed after its last reader", shared by every row) grows."""
    import highspy
    from scipy import sparse

    n_before = n_cols = h.getNumCol()
    r_i: list[int] = []
    r_j: list[int] = []
    r_v: list[float] = []
    rhs: list[float] = []
    extra_cost: list[float] = []

    def new_col(c: float = 0.0) -> int:
        nonlocal n_cols
        extra_cost.append(c)
        n_cols += 1
        return n_cols - 1

    def add_row(cols: list[int], vals: list[float], lo: float) -> None:
        row = len(rhs)
        rhs.append(lo)
        r_i.extend([row] * len(cols))
        r_j.extend(cols)
        r_v.extend(vals)

    for pos in chosen:
        if len(r_v) > max_nonzeros // 4 or (deadline is not None and time.perf_counter() >= deadline):
            break
        t = int(rows.stages[pos])
        E = float(rows.E[pos])
        _, g_row, _ = rows.build(np.array([pos]))
        local: dict[int, tuple[int, int]] = {}          # dead value -> (resident column, recomputed column)
        mem_cols: list[int] = []
        mem_vals: list[float] = []

        def need(w: int, depth: int) -> tuple[int, int]:
            """The columns saying ``w`` (dead at ``t``) is resident at ``t`` or computed after it."""
            if w in local:
                return local[w]
            res, rec = new_col(), new_col()
            local[w] = (res, rec)
            mem_cols.append(res)
            mem_vals.append(-float(mem[w]))
            if w not in tail:
                tail[w] = new_col(float(cost[w]))
            add_row([tail[w], rec], [1.0, -1.0], 0.0)
            if depth < _CLOSURE_DEPTH:              # w computed after t needs its own dead inputs then
                for x in dep_idx[dep_ptr[w]:dep_ptr[w + 1]]:
                    if mem[x] > 0 and last_read[x] < t:
                        got = need(int(x), depth + 1)
                        add_row([got[0], got[1], rec], [1.0, 1.0, -1.0], 0.0)
            return res, rec

        for g in g_row:
            v = int(rows.owner[g])
            dead = [int(x) for x in dep_idx[dep_ptr[v]:dep_ptr[v + 1]] if mem[x] > 0 and last_read[x] < t]
            if not dead:
                mem_cols.append(int(g))
                mem_vals.append(float(mem[v]))
                continue
            d = new_col()
            add_row([int(g), d], [1.0, -1.0], 0.0)     # dropped at t only if dropped in its gap
            mem_cols.append(d)
            mem_vals.append(float(mem[v]))
            for w in dead:
                res, rec = need(w, 1)
                add_row([res, rec, d], [1.0, 1.0, -1.0], 0.0)
        # a coefficient above the excess plus every dead byte that may be counted against it is capped there
        cap = E - sum(x for x in mem_vals if x < 0)
        add_row(mem_cols, [min(x, cap) / E if x > 0 else x / E for x in mem_vals], 1.0)
    if not rhs:
        return None
    new = n_cols - n_before
    h.addVars(new, np.zeros(new), np.ones(new))
    h.changeColsCost(new, np.arange(n_before, n_cols, dtype=np.int32), np.asarray(extra_cost, dtype=np.float64))
    A = sparse.csr_matrix((np.asarray(r_v), (np.asarray(r_i), np.asarray(r_j))), shape=(len(rhs), n_cols))
    status = h.addRows(len(rhs), np.asarray(rhs), np.full(len(rhs), highspy.kHighsInf), A.nnz,
                       A.indptr[:-1].astype(np.int32), A.indices.astype(np.int32), A.data)
    if status == highspy.HighsStatus.kError:
        raise SolverError("HiGHS rejected the closure rows")
    if not _limit_to(h, deadline):
        return None
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    # the Lagrangian of the whole LP at its duals: valid for any multipliers >= 0, whatever the tolerances
    lp = h.getLp()
    mat = lp.a_matrix_
    A = sparse.csc_matrix((np.asarray(mat.value_), np.asarray(mat.index_), np.asarray(mat.start_)),
                          shape=(lp.num_row_, lp.num_col_))
    y = np.maximum(np.asarray(h.getSolution().row_dual, dtype=np.float64), 0.0)
    reduced = np.asarray(lp.col_cost_, dtype=np.float64) - A.T @ y
    return float(y @ np.asarray(lp.row_lower_, dtype=np.float64) + np.minimum(reduced, 0.0).sum())
