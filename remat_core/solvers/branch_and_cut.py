"""Branch-and-cut over the strong formulation, with the path inequalities separated at every node.

A general MILP solver only sees the rows it is given: the path inequalities
(:mod:`remat_core.formulation.cuts`) that ``ilp`` separates at the root LP are
all it ever gets, although branching makes new ones violated deeper in the
tree. This search solves the LP relaxation with HiGHS (from the last basis),
separates path inequalities at every node (they are valid for every schedule,
so they stay in the LP for the rest of the search), fixes binaries by reduced
cost against the incumbent, and branches on the keep decisions ``S`` (the
recomputations follow from them), earliest stage first, depth first;
optionally it separates lifted cover inequalities at every node too and
rounds every node's LP point into a schedule (``cover_cuts``,
``node_rounding``).

It spends no time on a general solver's root work (its own cut loop, sub-MIP
heuristics), which on some chains is most of HiGHS's time; it also lacks
that solver's cuts, conflict analysis and best-bound node selection, and
loses where those matter. ``benchmarks/bench_ilp.py`` and
``benchmarks/experiments/bench_ilp_search.py`` measure both
(``docs/formulation.rst``, section *Branch-and-cut*).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from ..errors import SolverError
from ..formulation.standard_form import StandardForm
from ..schedule import Schedule, SolveStatus
from .backends import BackendResult

__all__ = ["branch_and_cut"]

log = logging.getLogger("remat_core.ilp")

_INT_TOL = 1e-6      # a binary within this of 0 or 1 is integral
_PREFER_FRAC = 0.1   # branch on the earliest S at least this fractional (any fractional S if none)
_LOG_EVERY_S = 5.0   # progress line interval


@dataclass
class _Node:
    fixings: list[tuple[int, float]]   # (column, value) on the way from the root, branching and reduced cost
    parent_bound: float                 # LP bound of the parent (a lower bound for the subtree)


@dataclass
class _Search:
    incumbent: float = np.inf           # objective (without offset) of the best schedule
    x: np.ndarray | None = None
    nodes: int = 0
    lp_solves: int = 0
    cut_rows: int = 0                   # rows separated here (path and, with cover_cuts, cover inequalities)
    cover_cut_rows: int = 0             # of which lifted cover inequalities
    fixed: int = 0
    rejected: int = 0                   # integral LP points the schedule check refused (tolerance)
    received: int = 0                   # cheaper schedules received from a search beside this one
    rounded: int = 0                    # cheaper schedules found by rounding a node's LP point
    lp_rows: int = 0                    # rows of the program in the LP (before the rows separated here)
    dropped_bound: float = np.inf       # least LP bound of a node dropped for such a point (not proven)


def branch_and_cut(sf: StandardForm, *, start: np.ndarray | None = None, time_limit_s: float | None = None,
                   mip_rel_gap: float | None = 1e-4, threads: int | None = None, verbose: bool = False,
                   node_limit: int | None = None, cut_rounds: int = 5, cuts_per_round: int = 200,
                   cover_rows: bool = False, cover_cuts: bool = False, node_rounding: bool = False,
                   rounding_samples: int = 0,
                   share: Callable[[float, np.ndarray], None] | None = None,
                   receive: Callable[[], np.ndarray | None] | None = None,
                   on_node: Callable[[int], bool | None] | None = None,
                   ) -> BackendResult:
    """Solve the strong program ``sf`` by branch-and-cut (see the module docstring).

    Parameters
    ----------
    sf : StandardForm
        A ``"strong"`` program (path inequalities already added are kept).
    start : numpy.ndarray, optional
        A feasible point (for example ``sf.encode(schedule)``): the first incumbent.
        Without one nothing is cut off until a dive reaches a schedule, and a
        program whose LP is feasible but that holds no schedule is enumerated
        node by node (``solve_ilp`` therefore runs the MILP solver when it has
        no schedule to start from).
    time_limit_s : float, optional
        Wall-clock limit.
    mip_rel_gap : float, optional
        Stop when the incumbent is within this relative gap of the bound
        (costs included in ``sf.objective_offset`` count). With integer costs
        a subtree is also cut off once its bound, rounded up, reaches the incumbent.
    threads : int, optional
        HiGHS threads for the LPs.
    verbose : bool
        Log progress at INFO level every few seconds (otherwise at DEBUG).
    node_limit : int, optional
        Stop after this many nodes.
    cut_rounds, cuts_per_round : int
        Separation rounds per node and rows per round.
    cover_rows : bool
        Keep the lifted cover rows of ``ilp``'s root rounds in the LPs. They
        tighten every node's bound, which closes small gaps in fewer nodes,
        but they also move the LP optima, and on long searches the dives go
        astray (the node counts are in the tuning history of
        ``benchmarks/experiments/README.md``); off by default, on in the
        portfolio's short first search.
    cover_cuts : bool
        Also separate lifted cover inequalities of the knapsack rows
        (:func:`~remat_core.formulation.cuts.cover_inequalities`) at every
        node, beside the path inequalities; like those they stay in the LP.
        On the small gaps of the portfolio's short first search they cut the
        tree (section *portfolio-tuning* of
        ``benchmarks/experiments/README.md``, *no cover cuts in the short
        search*); off by default, for the reason given for ``cover_rows``.
    node_rounding : bool
        At every node whose LP point is fractional (and not cut off), round
        its keeps as lp-rounding does (the threshold sweep, each candidate
        with the optimal recomputation, simulated) and take the cheapest
        that fits as the incumbent if it beats it. A depth-first search
        otherwise improves its incumbent only where a dive ends; a better one
        early cuts the rest of the tree (section *portfolio-tuning*, *no
        node rounding in the short search*). Off by default; on in the
        portfolio's short search.
    rounding_samples : int
        With ``node_rounding``, this many seeded randomized roundings per node
        besides the sweep (without a start they find schedules the sweep
        misses, at a cost per node).
    share, receive : callable, optional
        For a search running beside this one (:mod:`~remat_core.solvers.portfolio`):
        ``share(objective, x)`` is called with every cheaper schedule this
        search finds (``objective`` without ``sf.objective_offset``);
        ``receive()``, polled once per node, may return a point found
        elsewhere, which is checked like the search's own (decoded and
        simulated) and becomes the incumbent if it fits and is cheaper.
    on_node : callable, optional
        Called before each node with the number of nodes searched so far; a
        true return stops the search there (status FEASIBLE or NO_SOLUTION,
        ``backend_status`` "branch-and-cut: stopped by the caller", the open
        nodes' bound). The portfolio starts its child process from there once
        the search here has run a while, and ends its short search once the
        child is ready and a few nodes have been searched.

    Returns
    -------
    BackendResult
        As a MILP backend's: ``objective`` and ``bound`` without ``sf.objective_offset``;
        ``stats`` holds ``nodes``, ``lp_solves``, ``cut_rows`` (of which ``cover_cut_rows``),
        ``fixed_by_reduced_cost``, ``rejected_points``, ``received_incumbents``, ``rounded_incumbents`` (found by
        ``node_rounding``), ``lp_rows`` (the program's rows in the
        search's LP: all but the knapsack and cover rows), ``backend_status``, ``gap`` and ``time_s``.
    """
    import highspy

    from ..formulation.cuts import cover_inequalities, path_inequalities, without_family
    from ..simulate import simulate
    from .backends import highs as highs_backend
    from .backends.highs import _configure, _pass_model, new_highs
    from .ilp import _integer_costs

    if sf.formulation != "strong":
        raise ValueError(f"branch-and-cut runs on the 'strong' formulation; got {sf.formulation!r}")
    for name, value, least in (("cut_rounds", cut_rounds, 0), ("cuts_per_round", cuts_per_round, 1),
                               ("rounding_samples", rounding_samples, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"`{name}` must be an integer >= {least}; got {value!r}")
    if node_limit is not None and (isinstance(node_limit, bool) or not isinstance(node_limit, (int, np.integer))
                                   or node_limit < 1):
        raise ValueError(f"`node_limit` must be a positive integer or None; got {node_limit!r}")
    t_start = time.perf_counter()
    deadline = None if time_limit_s is None else t_start + float(time_limit_s)
    off = float(sf.objective_offset)
    rel = 0.0 if mip_rel_gap is None else float(mip_rel_gap)
    integral = _integer_costs(sf.graph)   # then every schedule's cost is an integer
    graph, budget = sf.graph, sf.budget_bytes
    lo0, hi0 = sf.col_lo.astype(np.float64), sf.col_hi.astype(np.float64)
    binaries = np.flatnonzero(sf.integrality)
    s_cols, s_stage = np.asarray(sf.s_col), np.asarray(sf.s_t)

    # the knapsack rows are there for a MILP solver's cover cuts; this search derives none, and with them its
    # LP optima sit on other vertices, whose dives go astray; the lifted cover rows of ilp's root rounds
    # likewise, except on the small gaps of a short search (runs: benchmarks/experiments/README.md).
    lp = without_family(sf, "knapsack")
    if not cover_rows:
        lp = without_family(lp, "cover_inequalities")
    h = new_highs()
    _configure(h, None, None, threads, False, None)
    h.setOptionValue("presolve", highs_backend._LP_PRESOLVE)   # LPs only (the first one, cold, would use it)
    _pass_model(h, lp.c, sp.csc_array(lp.A), lp.row_lo, lp.row_hi, lo0, hi0, np.zeros(sf.n_cols, np.int32))

    run = _Search(lp_rows=lp.n_rows)

    def cutoff() -> float:
        """A node whose LP bound exceeds this cannot hold a schedule cheaper than the incumbent (beyond the gap)."""
        if not np.isfinite(run.incumbent):
            return np.inf
        by_gap = run.incumbent - rel * max(abs(run.incumbent + off), 1.0)
        return min(by_gap, run.incumbent - 1.0 + 1e-6) if integral else by_gap

    def offer(x: np.ndarray, source: str = "search") -> bool:
        """An integral point: decode, simulate, keep it if it fits and is cheaper. False: it does not fit."""
        xr = x.copy()
        xr[binaries] = np.round(xr[binaries])
        sched = sf.decode(xr)
        sim = simulate(graph, sched, timeline=False)
        if sim.peak_memory_bytes > budget:
            run.rejected += 1
            return False
        value = float(sim.total_cost) - off
        if value < run.incumbent - 1e-9:
            # the caller's start is kept as given (it decodes to the schedule just simulated); the others are
            # re-encoded in canonical form (an LP vertex may carry stray values that the decoding ignores)
            run.incumbent, run.x = value, xr if source == "start" else sf.encode(sched)
            log.debug("branch-and-cut: schedule of cost %g at node %d (%s)", value + off, run.nodes, source)
            if source == "search" and share is not None:
                share(value, run.x)
            run.received += source == "received"
        return True

    if start is not None:
        start = np.asarray(start, dtype=np.float64)
        if start.shape != (sf.n_cols,):
            raise ValueError(f"`start` must have one value per column ({sf.n_cols}); got shape {start.shape}")
        offer(start, "start")

    if node_rounding:
        from ..formulation import canonical_schedule
        from .lp_rounding import _Evaluator, cheapest_rounding

        evaluate = _Evaluator(graph)

    def round_point(x: np.ndarray) -> np.ndarray | None:
        """The cheapest rounding of ``x``'s keeps that fits (the threshold sweep and ``rounding_samples`` seeded
        draws, each with the optimal recomputation), encoded, if it beats the incumbent; else None."""
        best = cheapest_rounding(evaluate, sf.fractional(x)[1], budget, rounding_samples, seed=run.nodes)
        if best is None or best[0] - off >= run.incumbent - 1e-9:
            return None
        run.rounded += 1
        return sf.encode(Schedule(*canonical_schedule(graph, best[1])))

    def solve_lp() -> tuple[str, float | None, np.ndarray | None]:
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0:
                return "time", None, None
            h.setOptionValue("time_limit", h.getRunTime() + left)   # HiGHS's clock runs over all its solves
        h.run()
        run.lp_solves += 1
        ms = h.getModelStatus()
        if ms == highspy.HighsModelStatus.kOptimal:
            return "ok", float(h.getInfo().objective_function_value), np.asarray(h.getSolution().col_value)
        if ms == highspy.HighsModelStatus.kInfeasible:
            return "infeasible", None, None
        if ms in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit):
            return "time", None, None
        raise SolverError(f"HiGHS failed on a node LP: {h.modelStatusToString(ms)}")

    changed: set[int] = set()   # columns whose bounds differ from lo0/hi0 in the LP now

    def apply(fixings: list[tuple[int, float]]) -> None:
        target = dict(fixings)
        reset = [j for j in changed if j not in target]
        if reset:
            idx = np.array(reset, dtype=np.int32)
            h.changeColsBounds(len(idx), idx, lo0[idx], hi0[idx])
        if target:
            idx = np.fromiter(target.keys(), dtype=np.int32, count=len(target))
            val = np.fromiter(target.values(), dtype=np.float64, count=len(target))
            h.changeColsBounds(len(idx), idx, val, val)
        changed.clear()
        changed.update(target.keys())

    def branch_column(x: np.ndarray) -> int | None:
        """The earliest-stage S at least ``_PREFER_FRAC`` fractional (the most fractional among those),
        else any fractional S, else the most fractional binary; None when the binaries are integral."""
        xs = x[s_cols]
        frac = np.minimum(xs - np.floor(xs), np.ceil(xs) - xs)
        for tol in (_PREFER_FRAC, _INT_TOL):
            cand = np.flatnonzero(frac > tol)
            if len(cand):
                return int(s_cols[cand[np.lexsort((-frac[cand], s_stage[cand]))[0]]])
        xb = x[binaries]
        fb = np.minimum(xb - np.floor(xb), np.ceil(xb) - xb)
        if fb.max(initial=0.0) > _INT_TOL:
            return int(binaries[int(np.argmax(fb))])
        return None

    stack = [_Node(fixings=[], parent_bound=-np.inf)]
    stopped = None          # why the search stopped early, if it did
    last_log = t_start
    while stack:
        if node_limit is not None and run.nodes >= node_limit:
            stopped = "node limit"
            break
        if on_node is not None and on_node(run.nodes):
            stopped = "stopped by the caller"
            break
        if receive is not None:
            got = receive()
            if got is not None and got.shape == (sf.n_cols,):
                offer(got, "received")
        node = stack.pop()
        if node.parent_bound > cutoff():
            continue
        run.nodes += 1
        apply(node.fixings)
        state, bound, x = solve_lp()
        if state == "time":
            stack.append(node)
            stopped = "time limit"
            break
        if state == "infeasible":
            continue
        duals_match = True      # the HiGHS model's last solution is this node's LP optimum x
        for _ in range(cut_rounds):
            if bound > cutoff():
                break
            rows, _viol = path_inequalities(sf, x, cuts_per_round)
            row_lo, row_hi = np.ones(rows.shape[0]), np.full(rows.shape[0], highspy.kHighsInf)
            if cover_cuts:
                c_rows, c_rhs, _viol = cover_inequalities(sf, x, cuts_per_round)
                if c_rows.shape[0]:
                    rows = sp.vstack([rows, c_rows])
                    row_lo = np.concatenate([row_lo, np.full(c_rows.shape[0], -highspy.kHighsInf)])
                    row_hi = np.concatenate([row_hi, np.asarray(c_rhs, np.float64)])
                    run.cover_cut_rows += c_rows.shape[0]
            if rows.shape[0] == 0:
                break
            rows = sp.csr_array(rows)
            h.addRows(rows.shape[0], row_lo, row_hi,
                      int(rows.nnz), rows.indptr.astype(np.int32), rows.indices.astype(np.int32),
                      np.ascontiguousarray(rows.data, np.float64))
            run.cut_rows += rows.shape[0]
            state, new_bound, new_x = solve_lp()
            if state != "ok":
                duals_match = False   # "time": the node keeps its last bound; the next LP stops the search
                break
            bound, x = max(bound, new_bound), new_x
        if state == "infeasible" or bound > cutoff():   # valid rows made the node's LP infeasible: no schedule
            continue
        j = branch_column(x)
        if j is not None and node_rounding:
            found = round_point(x)
            if found is not None:
                offer(found, "rounding")
                if bound > cutoff():   # the new incumbent cuts this node off
                    continue
        if j is None:
            if not offer(x):   # within the LP's tolerance only: the subtree is not searched, so not proven
                run.dropped_bound = min(run.dropped_bound, bound)
            continue
        # reduced-cost fixing for this subtree: moving a binary off its bound costs at least |d|
        fix = list(node.fixings)
        slack = cutoff() - bound
        if np.isfinite(slack) and duals_match:
            d = np.asarray(h.getSolution().col_dual)
            xb, db = x[binaries], d[binaries]
            free = (lo0[binaries] != hi0[binaries])
            have = {col for col, _v in fix}
            at0 = binaries[free & (xb < _INT_TOL) & (db > slack)]
            at1 = binaries[free & (xb > 1 - _INT_TOL) & (-db > slack)]
            new = [(int(c), 0.0) for c in at0 if int(c) not in have] + \
                  [(int(c), 1.0) for c in at1 if int(c) not in have]
            run.fixed += len(new)
            fix += new
        near = 1.0 if x[j] >= 0.5 else 0.0
        for val in (1.0 - near, near):   # the child nearer the LP value is searched first
            stack.append(_Node(fixings=fix + [(j, val)], parent_bound=bound))
        now = time.perf_counter()
        if now - last_log >= _LOG_EVERY_S:
            last_log = now
            lb = min([n.parent_bound for n in stack], default=bound)
            log.log(logging.INFO if verbose else logging.DEBUG,
                    "branch-and-cut: %d nodes, %d open, incumbent %s, bound %.4g, %d cut rows, %.1f s",
                    run.nodes, len(stack), "-" if run.x is None else f"{run.incumbent + off:.6g}",
                    lb + off, run.cut_rows, now - t_start)

    elapsed = time.perf_counter() - t_start
    have = run.x is not None
    dropped = run.dropped_bound <= cutoff()   # a dropped subtree may hold a cheaper schedule
    if stopped is None and not have:
        if not np.isfinite(run.dropped_bound):
            return BackendResult(status=SolveStatus.INFEASIBLE, stats=_stats(run, "infeasible", elapsed, None))
        stopped = "integral points refused by the schedule check"
    if stopped is None and not dropped:
        # every subtree was cut off: its bound exceeded the cutoff, which with integer costs
        # below the incumbent by less than one unit proves the incumbent itself
        by_gap = run.incumbent - rel * max(abs(run.incumbent + off), 1.0)
        bound = run.incumbent if integral and run.incumbent - 1.0 + 1e-6 <= by_gap else by_gap
        status = SolveStatus.OPTIMAL
        word = "optimal"
    else:
        bound = min([n.parent_bound for n in stack] + [run.dropped_bound], default=np.inf)
        bound = None if not np.isfinite(bound) else min(bound, run.incumbent)
        stopped = stopped or "integral points refused by the schedule check"
        status = SolveStatus.FEASIBLE if have else SolveStatus.NO_SOLUTION
        word = stopped
    gap = None
    if have and bound is not None:
        total = run.incumbent + off
        gap = max(total - (bound + off), 0.0) / max(abs(total), 1e-12)
    return BackendResult(status=status, x=run.x, objective=run.incumbent if have else None, bound=bound,
                         stats=_stats(run, word, elapsed, gap))


def _stats(run: _Search, word: str, elapsed: float, gap: float | None) -> dict:
    return {"backend_status": f"branch-and-cut: {word}", "nodes": run.nodes, "lp_solves": run.lp_solves,
            "cut_rows": run.cut_rows, "cover_cut_rows": run.cover_cut_rows, "fixed_by_reduced_cost": run.fixed, "rejected_points": run.rejected,
            "received_incumbents": run.received, "rounded_incumbents": run.rounded, "lp_rows": run.lp_rows,
            "gap": gap, "time_s": elapsed}
