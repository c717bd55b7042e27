"""``ilp``: Checkmate's MILP solved exactly (or to a gap / time limit).

The formulation (:mod:`remat_core.formulation`) turns the graph into sparse
standard-form arrays; a backend (:mod:`remat_core.solvers.backends`) solves
them; the solution is decoded to a schedule and simulated. The best schedule
of the registered heuristics, of lp-rounding and of RENS warm-starts the
solver, so that ``ilp`` never returns a schedule worse than theirs.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from typing import Any

import numpy as np

from ..errors import UnknownMethodError
from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from .checkpoint_all import trivial_result
from ..simulate import simulate

__all__ = ["solve_ilp", "warm_start_schedule"]

log = logging.getLogger(__name__)

#: Methods never used to warm-start the MILP (this one, those that solve an LP themselves, and ``auto`` and
#: ``segments``, which run this one).
_NOT_FOR_WARM_START = frozenset({"ilp", "lp-rounding", "auto", "segments"})
#: Share of what is left of ``time_limit_s`` that lp-rounding may use as a warm start; the MILP gets the rest.
#: lp-rounding checks its limit between LP solves and usually stops well before it.
_LP_ROUNDING_TIME_SHARE = 0.5
#: Largest graph whose strong LP relaxation is solved on its own before lp-rounding (above this, the LP
#: takes tens of seconds, HiGHS's presolve does not stop at the time limit, and lp-rounding's first LP,
#: the same one, supplies the bound instead).
_ROOT_LP_MAX_NODES = 120
#: Local-search evaluations of lp-rounding as the warm start of a graph of up to ``_ROOT_LP_MAX_NODES``
#: nodes (its own default is 50000): none. There the MILP improves the incumbent itself within its root,
#: and a better warm start did not make it prove sooner (section *ilp-warm-start* of
#: benchmarks/experiments/README.md): the search time goes to the MILP.
_WARM_START_POLISH_EVALS = 0
#: HiGHS options the strong formulation is solved with unless ``solver_options`` says otherwise:
#: no strong branching to initialise pseudo-costs, where most of the default's LP iterations went on the
#: linear graphs (the runs are in the tuning history of benchmarks/experiments/README.md).
_HIGHS_STRONG_DEFAULTS = {"mip_pscost_minreliable": 0}
#: HiGHS options of the portfolio's MILP on top of those, while branch-and-cut runs beside it, unless
#: ``solver_options`` sets them: HiGHS's RENS and its root reduced-cost heuristic off. ``ilp`` has run RENS
#: already, at the LP point after the root rounds, and HiGHS would repeat it in sub-MIPs of its own root;
#: improving schedules still come from its RINS (around the incumbent, kept on: without it a start can stay
#: unimproved), the child's dives and its tree. Measured in the portfolio only, so HiGHS alone
#: (``search="milp"``) keeps them (section *portfolio-tuning* of benchmarks/experiments/README.md,
#: *HiGHS's RENS on*, *HiGHS's root reduced cost on*).
_HIGHS_PORTFOLIO_DEFAULTS = {"mip_heuristic_run_rens": False, "mip_heuristic_run_root_reduced_cost": False}
#: Largest graph on which path inequalities are separated (the dynamic program holds ``n**3`` numbers).
_CUTS_MAX_NODES = _ROOT_LP_MAX_NODES
#: Rounds of path-inequality separation, and rows added per round at most (the most violated).
_CUT_ROUNDS, _CUTS_PER_ROUND = 30, 500
#: Share of what is left of ``time_limit_s`` that the separation rounds may use.
_CUT_TIME_SHARE = 0.25

#: RENS (:func:`_rens`) after the root rounds: at most this many seconds, and this share of what is left
#: of ``time_limit_s``; an LP value this close to 0 or 1 counts as integral there. The cap only bounds RENS
#: where its neighbourhood is hard (most take a fraction of a second); a smaller cap cut short neighbourhoods
#: that hold the optimum, so that the search's start depended on the machine's speed (section
#: *portfolio-tuning* of benchmarks/experiments/README.md, *RENS 1.5 s*).
_RENS_TIME_S, _RENS_TIME_SHARE, _INTEGRAL_TOL = 3.0, 0.1, 1e-6
#: A *small* program has at most this many integer columns (the 5-layer random graphs of the benchmarks, not
#: the 10-layer ones). On one, (1) where RENS's first neighbourhood holds no schedule, its widened try is the
#: whole program at HiGHS's root (_RENS_WHOLE_OPTIONS) rather than the keeps the LP holds at 0: such a root is
#: cheap there, and HiGHS's root rounding, reduced-cost fixing and restart often prove the optimum in it (on
#: larger programs the whole root runs into RENS's cap); (2) the portfolio's child is not started before
#: RENS: RENS and the short search mostly end before it would be ready, and spawning it takes both this
#: process's time and the core HiGHS would use (race still starts it once the short search has run
#: _CHILD_DELAY_S without a proof). Section *portfolio-tuning* of benchmarks/experiments/README.md, *small
#: programs as large ones*, times both against the rules for large programs.
_SMALL_PROGRAM_INTEGER = 400
_RENS_WHOLE_OPTIONS = {"mip_max_nodes": 1}

#: The relative gap at which HiGHS and CBC stop when ``mip_rel_gap`` is None (their default).
_BACKEND_DEFAULT_GAP = 1e-4
#: Values of ``solve_ilp``'s ``search``.
_SEARCHES = ("auto", "milp", "branch-and-cut", "portfolio")
#: What ``solver_options`` may hold with ``search="branch-and-cut"``.
_BRANCH_AND_CUT_OPTIONS = ("node_limit", "cut_rounds", "cuts_per_round")


def _check_options(time_limit_s: Any, mip_rel_gap: Any, threads: Any) -> None:
    from . import validate_time_limit

    validate_time_limit(time_limit_s)
    if mip_rel_gap is not None and (
        isinstance(mip_rel_gap, bool) or not isinstance(mip_rel_gap, numbers.Real) or not 0 <= mip_rel_gap < 1
    ):
        raise ValueError(f"`mip_rel_gap` must be a number in [0, 1) or None; got {mip_rel_gap!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1):
        raise ValueError(f"`threads` must be a positive integer or None; got {threads!r}")


def warm_start_schedule(graph: Graph, budget_bytes: int, include_lp_rounding: bool = True,
                        lp_rounding_time_limit_s: float | None = None
                        ) -> tuple[Schedule | None, str, float | None]:
    """The cheapest schedule within budget among the registered heuristic methods.

    Every registered method except ``ilp`` is run through
    :func:`remat_core.solve`, ``lp-rounding`` last (with
    ``time_limit_s=lp_rounding_time_limit_s``) and only if
    ``include_lp_rounding``; a method that fails or finds nothing is skipped.

    Returns
    -------
    (schedule or None, method name, simulated cost or None)
    """
    best = _warm_start(graph, budget_bytes, include_lp_rounding, lp_rounding_time_limit_s)
    return best.schedule, best.method, best.cost


class _WarmStart:
    """The cheapest schedule within budget found so far, with its method and cost."""

    def __init__(self) -> None:
        self.schedule: Schedule | None = None
        self.method = ""
        self.cost: float | None = None
        self.lp_bound: float | None = None

    def offer(self, res: RematResult, name: str) -> None:
        cost = res.stats.get("schedule_cost", res.objective)   # a result with a sequence: its stage form's cost
        if res.success and res.schedule is not None and (self.cost is None or cost < self.cost):
            self.schedule, self.method, self.cost = res.schedule, name, cost
        if name == "lp-rounding" and res.lower_bound is not None:
            self.lp_bound = res.lower_bound   # the strong LP relaxation at the full budget


def _warm_start(graph: Graph, budget_bytes: int, include_lp_rounding: bool,
                lp_rounding_time_limit_s: float | None, best: _WarmStart | None = None,
                heuristics: bool = True, relaxation: tuple | None = None,
                polish_evals: int | None = None) -> _WarmStart:
    from . import available_methods, solve

    best = _WarmStart() if best is None else best
    names = [m for m in available_methods() if m not in _NOT_FOR_WARM_START] if heuristics else []
    if include_lp_rounding and "lp-rounding" in available_methods():
        names.append("lp-rounding")   # last: the most expensive, and it may use what is left of a limit
    for name in names:
        options: dict[str, Any] = {"order": "stages"} if name == "dtr" else {}   # a warm start is a stage schedule
        if name == "lp-rounding":
            if lp_rounding_time_limit_s is not None:
                options["time_limit_s"] = lp_rounding_time_limit_s
            if relaxation is not None:
                options["_relaxation"] = relaxation   # the root LP, solved already: not solved twice
            if polish_evals is not None:
                options["polish_evals"] = polish_evals
        try:
            res = solve(graph, budget_bytes, method=name, **options)
        except Exception as exc:  # a broken heuristic must not break the exact solver
            log.debug("warm start: method %s failed: %s", name, exc)
            continue
        best.offer(res, name)
    return best


def _root_lp_bound(graph: Graph, budget_bytes: int, backend: str, time_limit_s: float | None = None,
                   verbose: bool = False
                   ) -> tuple[float | None, tuple | None]:
    """The optimum of the strong formulation's LP relaxation (a lower bound on every schedule's cost).

    Returns ``(bound, (StandardForm, BackendResult, LP sequence))``, the second
    for lp-rounding to reuse (its next LP starts from this basis);
    ``(None, None)`` if the LP is not solved to optimality (infeasible, or
    stopped by ``time_limit_s``).
    """
    from ..formulation import build_milp
    from .backends import lp_sequence

    sf = build_milp(graph, budget_bytes, "strong")
    lps = lp_sequence(backend, verbose=verbose)
    out = lps.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, time_limit_s=time_limit_s)
    if out.status is not SolveStatus.OPTIMAL or out.objective is None:
        return None, None
    return max(out.objective + sf.objective_offset, float(graph.cost.sum())), (sf, out, lps)


def _strengthen(sf, backend: str, threads: int | None, time_limit_s: float | None, lps: Any = None
                ) -> tuple[Any, float | None, dict[str, Any]]:
    """``sf`` plus the valid rows that its LP relaxation violates, separated round after round.

    Each round solves the LP (from the last basis with HiGHS), adds the most
    violated rows of :func:`remat_core.formulation.cuts.path_inequalities`
    and of :func:`remat_core.formulation.cuts.cover_inequalities`, and stops
    when none is violated, after :data:`_CUT_ROUNDS` rounds, or when
    ``time_limit_s`` runs out. The rows are valid for every schedule, so the
    program keeps its optimum; its LP bound rises.

    ``lps``: an LP sequence (:func:`~remat_core.solvers.backends.lp_sequence`)
    that last solved a program with ``sf``'s matrix, so that the first LP
    restarts from its basis (the root LP that lp-rounding went on from).

    Returns ``(program, LP bound with the rows or None, stats)``; the stats
    hold the last LP point too (``"x"``), where RENS (:func:`_rens`) starts.
    """
    import scipy.sparse as sp

    from ..formulation.cuts import cover_inequalities, path_inequalities, with_rows
    from .backends import lp_sequence

    t0 = time.perf_counter()
    left = lambda: None if time_limit_s is None else float(time_limit_s) - (time.perf_counter() - t0)  # noqa: E731
    lps = lp_sequence(backend, threads=threads) if lps is None else lps
    warm_before = lps.warm_solves
    out = lps.solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, time_limit_s=left())
    stats: dict[str, Any] = {"rounds": 0, "rows": 0, "path_rows": 0, "cover_rows": 0,
                             "first_lp_warm": lps.warm_solves > warm_before}
    if out.status is not SolveStatus.OPTIMAL:
        stats["time_s"] = time.perf_counter() - t0
        return sf, None, stats
    stats["lp_bound_before"] = bound = out.objective + sf.objective_offset
    x = out.x
    paths, covers, cover_rhs = [], [], []
    for _ in range(_CUT_ROUNDS):
        if time_limit_s is not None and left() <= 0:
            break
        p_rows, _viol = path_inequalities(sf, x, _CUTS_PER_ROUND)
        c_rows, c_rhs, _viol = cover_inequalities(sf, x, _CUTS_PER_ROUND)
        if p_rows.shape[0] + c_rows.shape[0] == 0:
            break
        paths.append(p_rows)
        covers.append(c_rows)
        cover_rhs.append(c_rhs)
        stats["rounds"] += 1
        stats["path_rows"] += p_rows.shape[0]
        stats["cover_rows"] += c_rows.shape[0]
        stats["rows"] += p_rows.shape[0] + c_rows.shape[0]
        out = lps.add_rows(sp.vstack([p_rows, c_rows]).tocsr(),
                           np.concatenate([np.ones(p_rows.shape[0]), np.full(c_rows.shape[0], -np.inf)]),
                           np.concatenate([np.full(p_rows.shape[0], np.inf), c_rhs]), time_limit_s=left())
        if out.status is not SolveStatus.OPTIMAL:
            break   # cut short: the rows stay (they are valid), the bound is the last one solved
        bound, x = out.objective + sf.objective_offset, out.x
    if stats["rows"]:
        if stats["path_rows"]:
            rows = sp.vstack(paths).tocsr()
            sf = with_rows(sf, rows, np.ones(rows.shape[0]), np.full(rows.shape[0], np.inf), "path_inequalities")
        if stats["cover_rows"]:
            rows = sp.vstack(covers).tocsr()
            sf = with_rows(sf, rows, np.full(rows.shape[0], -np.inf), np.concatenate(cover_rhs), "cover_inequalities")
    stats["lp_bound_after"] = bound
    stats["x"] = x
    stats["time_s"] = time.perf_counter() - t0
    return sf, bound, stats


def _decoded(graph: Graph, sf, x: np.ndarray, budget_bytes: int) -> tuple[Schedule | None, float | None]:
    """The schedule a solver's point encodes, simulated: ``(schedule, cost)``, or ``(None, None)`` if it does
    not fit (only possible within the solver's feasibility tolerance; its canonical form is tried first,
    which never uses more memory)."""
    from ..formulation import canonical_schedule

    schedule = sf.decode(x)
    sim = simulate(graph, schedule, timeline=False)
    if sim.peak_memory_bytes > budget_bytes:
        schedule = Schedule(*canonical_schedule(graph, schedule.S))
        sim = simulate(graph, schedule, timeline=False)
        if sim.peak_memory_bytes > budget_bytes:
            log.warning("ilp: solver solution needs %d bytes > budget %d (tolerance); discarded",
                        sim.peak_memory_bytes, budget_bytes)
            return None, None
    return schedule, sim.total_cost


def _rens(graph: Graph, sf, x: np.ndarray, budget_bytes: int, time_limit_s: float, threads: int | None,
          whole: bool = False) -> tuple[Schedule | None, float | None, dict[str, Any]]:
    """RENS (relaxation enforced neighbourhood search): the MILP with every keep ``S`` that the LP point ``x``
    holds at 0 or 1 fixed there, solved by HiGHS within ``time_limit_s``.

    After the root rounds most keeps are integral in the LP, so the MILP left
    is small (tens of free binaries on 30-50-node graphs) and HiGHS solves it
    in a fraction of a second; its best schedule is often the optimum or
    close to it, and a better start lets the search that follows cut off
    more and fix more by reduced cost. At tight budgets the keeps the LP
    holds at 1 may admit no schedule; the neighbourhood is then widened to
    the keeps it holds at 0 only, within what is left of the time (on some
    benchmark instances only that one holds any schedule at all), or with
    ``whole`` (a small program, :data:`_SMALL_PROGRAM_INTEGER`) to the whole
    program at HiGHS's root, whose dual bound, a bound on every schedule, is
    then ``stats["bound"]``.
    Returns ``(schedule or None, cost, stats)``; the schedule is simulated
    and within budget.
    """
    from .backends.highs import solve as highs_solve

    t0 = time.perf_counter()
    s_cols = np.asarray(sf.s_col)
    xs = x[s_cols]
    stats: dict[str, Any] = {"tries": []}
    schedule, cost = None, None
    wide = ("nothing: the whole program, at its root", np.zeros(len(xs), dtype=bool)) if whole else \
        ("keeps at 0", xs < _INTEGRAL_TOL)
    for name, fix in (("keeps at 0 and 1", (xs < _INTEGRAL_TOL) | (xs > 1.0 - _INTEGRAL_TOL)), wide):
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0:
            break
        fixed = s_cols[fix]
        lo, hi = sf.col_lo.astype(np.float64), sf.col_hi.astype(np.float64)
        lo[fixed] = hi[fixed] = np.round(x[fixed])
        out = highs_solve(sf.c, sf.A, sf.row_lo, sf.row_hi, lo, hi, sf.integrality, time_limit_s=left,
                          mip_rel_gap=1e-4, threads=threads,
                          options=_RENS_WHOLE_OPTIONS if not fix.any() else None)
        if out.x is not None:
            schedule, cost = _decoded(graph, sf, out.x, budget_bytes)
        stats["tries"].append({"fixed": name, "free_keeps": int(len(s_cols) - len(fixed)),
                               "status": out.stats.get("backend_status"), "cost": cost})
        if not fix.any() and out.bound is not None:   # nothing fixed: a bound on every schedule
            stats["bound"] = float(out.bound) + sf.objective_offset
        if out.status is not SolveStatus.INFEASIBLE:
            break
    stats.update(cost=cost, time_s=time.perf_counter() - t0)
    return schedule, cost, stats


def _rounded(graph: Graph, sf, x: np.ndarray, budget_bytes: int) -> tuple[Schedule | None, float | None]:
    """The cheapest rounding of the keeps of LP point ``x`` that fits (lp-rounding's candidates: a threshold
    sweep and 32 seeded samples, each with the optimal recomputation), simulated: ``(schedule, cost)`` or
    ``(None, None)``. No LP is solved: a few milliseconds, tried on the root rounds' point before RENS."""
    from ..formulation import canonical_schedule
    from .lp_rounding import _Evaluator, cheapest_rounding

    best = cheapest_rounding(_Evaluator(graph), sf.fractional(x)[1], budget_bytes, 32, seed=0)
    if best is None:
        return None, None
    schedule = Schedule(*canonical_schedule(graph, best[1]))
    sim = simulate(graph, schedule, timeline=False)
    if sim.peak_memory_bytes > budget_bytes:   # canonical form never uses more memory: a bug, not a schedule
        log.warning("ilp: rounded schedule needs %d bytes > budget %d; discarded", sim.peak_memory_bytes, budget_bytes)
        return None, None
    return schedule, sim.total_cost


def _rens_skipped(graph: Graph, start_cost: float | None, bound: float | None) -> bool:
    """Whether RENS is left out: with integer costs and the start one unit above the rounded ``bound``, only a
    schedule at the bound beats it, and the search that follows (the portfolio's short branch-and-cut first)
    looks for one with a proof attached (section *portfolio-tuning* of ``benchmarks/experiments/README.md``)."""
    return (start_cost is not None and bound is not None and _integer_costs(graph)
            and start_cost <= bound + 1 + 1e-9)


def _small_program(sf) -> bool:
    """Whether ``sf`` is small: at most :data:`_SMALL_PROGRAM_INTEGER` integer columns."""
    return int(np.count_nonzero(sf.integrality)) <= _SMALL_PROGRAM_INTEGER


def _integer_costs(graph: Graph) -> bool:
    """Every cost is a finite integer (then so is every schedule's cost)."""
    cost = graph.cost
    return bool(np.all(np.isfinite(cost)) and np.all(cost == np.round(cost)))


def _proven_bound(graph: Graph, lp_bound: float) -> float:
    """``lp_bound`` rounded up when every cost is an integer (then so is every schedule's cost)."""
    if _integer_costs(graph):
        return float(math.ceil(lp_bound - 1e-6 * max(1.0, abs(lp_bound))))
    return lp_bound


def _effective_gap(mip_rel_gap: float | None) -> float:
    """The relative gap a solver stops at: ``mip_rel_gap``, or the backends' default (HiGHS's and CBC's 1e-4)."""
    return _BACKEND_DEFAULT_GAP if mip_rel_gap is None else float(mip_rel_gap)


def _meets(cost: float, bound: float, mip_rel_gap: float | None) -> bool:
    """Whether ``cost`` is within ``mip_rel_gap`` of the lower ``bound`` (HiGHS's gap: relative to the cost)."""
    return cost - bound <= (mip_rel_gap or 0.0) * abs(cost) + 1e-9


def _gap(cost: float, bound: float) -> float:
    """The relative gap ``(cost - bound) / cost`` (0 for a zero cost), never negative."""
    return 0.0 if cost == 0 else max(0.0, (cost - bound) / cost)


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
    cuts: bool = True,
    search: str = "auto",
    model_bytes_limit: int | None = None,
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
        Wall-clock limit for the whole call (imports and warm start
        included). A program of 150 k estimated nonzeros or more, or one whose
        limit is under 1e-4 s per nonzero (HiGHS does not stop its presolve
        and root work at the limit), is solved in a child process killed at
        the limit, with the cheapest heuristic schedule as the fallback
        (:mod:`remat_core.solvers._deadline`).
    mip_rel_gap : float, optional
        Relative gap at which the solver stops and reports ``OPTIMAL``.
    threads : int, optional
        Solver threads.
    verbose : bool
        Let the solver print its log.
    warm_start : bool or Schedule
        ``True``: start from the cheapest schedule of the registered
        heuristics (the result is never worse than theirs) and of
        ``lp-rounding`` (with half of what is left of ``time_limit_s``; on
        graphs of up to 120 nodes without its local search
        (:data:`_WARM_START_POLISH_EVALS`), since the search that follows
        improves it). The strong LP relaxation is solved first: when it proves the
        best heuristic schedule optimal (its bound rounded up when every
        cost is an integer), that schedule is returned as ``OPTIMAL`` and
        nothing else runs. On graphs of up to 120 nodes (HiGHS, ``cuts``),
        the root rounds come next; then the rounded strengthened LP point
        (:func:`_rounded`, milliseconds), RENS (:func:`_rens`: the MILP
        around that point, at most 3 s and a tenth of what is left of
        ``time_limit_s``), each skipped once the strengthened bound proves
        the best schedule so far; RENS is also skipped when that schedule
        costs one unit above the bound (integer costs), where only the
        search can improve on it. lp-rounding then runs only if there is no
        schedule yet (on the benchmark instances it never beat the rounded
        point or RENS). A :class:`~remat_core.Schedule`: start from it (no RENS).
        ``False``: from nothing.
    solver_options : dict, optional
        Options passed to the solver library under its own names (for
        example ``{"mip_heuristic_effort": 0.2}`` for HiGHS). With HiGHS and
        the strong formulation the default is ``{"mip_pscost_minreliable": 0}``
        (no strong branching to initialise pseudo-costs: the tuning history
        in ``benchmarks/experiments/README.md``); what is given here
        overrides it.
    cuts : bool
        Strengthen the strong formulation (graphs of up to 120 nodes) with
        the path inequalities and lifted cover inequalities its LP
        relaxation violates (:mod:`remat_core.formulation.cuts`), separated
        in rounds at the root with up to a quarter of what is left of
        ``time_limit_s``, before the MILP starts. Their LP bound alone may
        prove the warm start optimal.
    search : {"auto", "milp", "branch-and-cut", "portfolio"}
        ``"milp"``: the backend's MILP solver. ``"branch-and-cut"``: our own
        search (:func:`remat_core.solvers.branch_and_cut.branch_and_cut`,
        HiGHS for the LPs, strong formulation only), which separates the path
        inequalities at every node rather than at the root only and skips a
        general solver's root work. It proved some chains several times
        faster than HiGHS and failed to prove others HiGHS proves in 40 s
        (section *ilp* of ``benchmarks/README.md``, section *ilp-search* of
        ``benchmarks/experiments/README.md``).
        ``solver_options`` then takes its ``node_limit``, ``cut_rounds`` and
        ``cuts_per_round``. ``"portfolio"``: both at once
        (:mod:`remat_core.solvers.portfolio`), HiGHS's MILP in this process
        and branch-and-cut in a child process on another core, passing each
        other the schedules they find, after a short branch-and-cut in this
        process while the child starts; the first to prove wins and the other
        is stopped (at a time limit, the better schedule and the higher bound
        of the two); ``solver_options`` go to HiGHS. ``"auto"`` (default):
        ``"portfolio"`` with HiGHS and the strong formulation on graphs of up
        to 120 nodes when two cores are
        available (``threads`` unset and at least two CPUs, or ``threads >=
        2``, HiGHS then getting one fewer), else ``"milp"``; pass
        ``threads=1`` or ``search="milp"`` for one process and a
        reproducible choice among equally cheap schedules.
        ``search="branch-and-cut"`` starts from the warm start; without one
        (``warm_start=False``, or no heuristic schedule fits) the MILP solver
        runs alone, since it proves infeasible budgets by propagation that
        our search lacks; the portfolio then starts both searches without a
        schedule (``stats["search"]`` says which ran; ``stats["portfolio"]``
        which search won, each one's status, seconds and nodes, and how many
        schedules they passed each other).
    model_bytes_limit : int, optional
        The most memory the program may take to build and solve (estimated,
        :func:`~remat_core.formulation.size.estimate_milp_size`); default
        :data:`~remat_core.formulation.size.DEFAULT_MODEL_BYTES_LIMIT`. Over
        it nothing is built: the cheapest heuristic schedule comes back,
        ``stats["model_built"]`` is ``False``, ``stats["schedule_method"]``
        names the heuristic, the message says so, and the only bound is
        every node computed once (``stats["bound_method"]``).

    Returns
    -------
    RematResult
        ``OPTIMAL`` (proven within ``mip_rel_gap``), ``FEASIBLE`` (best
        schedule at the time limit, or a heuristic's where the program was
        not built), ``INFEASIBLE`` (proven: no schedule
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
    start = time.perf_counter()   # the limit covers the imports (scipy.sparse's first import: 0.3-0.6 s)
    from ..formulation import build_milp
    from .backends import get_backend, lp_sequence

    _check_options(time_limit_s, mip_rel_gap, threads)
    if model_bytes_limit is not None and (isinstance(model_bytes_limit, bool)
                                          or not isinstance(model_bytes_limit, numbers.Integral)
                                          or model_bytes_limit < 1):
        raise ValueError(f"`model_bytes_limit` must be a positive integer (bytes) or None; got {model_bytes_limit!r}")
    if search not in _SEARCHES:
        raise ValueError(f"`search` must be one of {list(_SEARCHES)}; got {search!r}")
    if search in ("branch-and-cut", "portfolio"):
        if backend != "highs" or formulation != "strong":
            raise ValueError(f"`search={search!r}` needs backend='highs' and formulation='strong'; "
                             f"got backend={backend!r}, formulation={formulation!r}")
    if search == "branch-and-cut":
        bad = set(solver_options or {}) - set(_BRANCH_AND_CUT_OPTIONS)
        if bad:
            raise ValueError(f"`solver_options` has entries {sorted(bad)} that branch-and-cut does not take; "
                             f"it takes {list(_BRANCH_AND_CUT_OPTIONS)}")
    if not isinstance(cuts, (bool, np.bool_)):
        raise TypeError(f"`cuts` must be True or False; got {cuts!r}")
    if backend == "highs" and search != "branch-and-cut" and solver_options:
        from .backends.highs import check_options

        check_options(solver_options)   # now, not when (or if) HiGHS's MILP starts
    if not isinstance(formulation, str):
        raise TypeError(f"`formulation` must be a string; got {formulation!r}")
    from ..formulation import FORMULATIONS, available_formulations

    if formulation not in FORMULATIONS:
        raise UnknownMethodError(
            f"unknown `formulation` {formulation!r}; available: {', '.join(available_formulations())}")
    get_backend(backend)   # an unknown or uninstalled backend is an error now, not after the warm start
    from ..formulation.scaling import cost_scale, scaled_graph, unscale_result

    scale = cost_scale(graph)
    if scale != 1.0:   # costs of 1e18 and more stopped HiGHS ("model status Unknown"): solve scaled costs
        return unscale_result(solve_ilp(
            scaled_graph(graph, scale), budget_bytes, backend=backend, formulation=formulation,
            time_limit_s=_left(time_limit_s, start), mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose,
            warm_start=warm_start, solver_options=solver_options, cuts=cuts, search=search,
            model_bytes_limit=model_bytes_limit), scale)
    from ._deadline import MILP_LIMIT_S_PER_NONZERO, guard

    # a program over the memory limit is not built; with a time limit, a large one, or one whose limit is short
    # for its size, is solved in a child killed at the limit (build and presolve cannot be interrupted here):
    # see _deadline
    guarded = guard("ilp", graph, budget_bytes, dict(
        backend=backend, formulation=formulation, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose,
        warm_start=warm_start, solver_options=solver_options, cuts=cuts, search=search,
        model_bytes_limit=model_bytes_limit), _left(time_limit_s, start), MILP_LIMIT_S_PER_NONZERO, model_bytes_limit)
    if guarded is not None:
        return guarded
    base_cost = float(graph.cost.sum())
    if search == "auto":
        from .portfolio import cpu_count

        two_cores = (threads is None and cpu_count() >= 2) or (threads is not None and threads >= 2)
        search = "portfolio" if (backend == "highs" and formulation == "strong" and two_cores
                                 and graph.n <= _CUTS_MAX_NODES) else "milp"
    stats: dict[str, Any] = {"backend": backend, "formulation": formulation, "search": search,
                             "mip_rel_gap": _effective_gap(mip_rel_gap)}   # what OPTIMAL means (verify_result)

    relaxation = None   # (program, LP result, LP sequence) of the strong root LP, once solved
    trivial = trivial_result(graph, budget_bytes, backend, stats)
    if trivial is not None:
        return trivial
    lower = graph.min_budget_lower_bound_bytes()

    # ---------------------------------------------------------------- warm start
    t0 = time.perf_counter()
    warm: Schedule | None = None
    lp_bound: float | None = None
    late_lp_rounding = False   # lp-rounding runs after RENS (below) rather than here
    if isinstance(warm_start, Schedule):
        sim = simulate(graph, warm_start, timeline=False)
        if sim.peak_memory_bytes <= budget_bytes:
            warm, stats["warm_start_method"], stats["warm_start_cost"] = warm_start, "given", sim.total_cost
        else:
            log.info("ilp: the given warm start needs %d bytes > budget; ignored", sim.peak_memory_bytes)
    elif warm_start:
        # 1. the cheap heuristics; 2. the strong LP bound: if it proves the best of them optimal, stop here;
        # 3. lp-rounding with a share of what is left of the time limit
        found = _warm_start(graph, budget_bytes, include_lp_rounding=False, lp_rounding_time_limit_s=None)
        if graph.n <= _ROOT_LP_MAX_NODES:
            left = None if time_limit_s is None else max(float(time_limit_s) - (time.perf_counter() - start), 0.05)
            root, relaxation = _root_lp_bound(graph, budget_bytes, backend, time_limit_s=left, verbose=verbose)
            if root is not None:
                lp_bound = _proven_bound(graph, root)
        # with the root rounds, the rounded root point and RENS to come (HiGHS, strong formulation, small
        # graphs), lp-rounding waits for them: their schedule often meets the strengthened bound, and
        # lp-rounding is then not needed
        late_lp_rounding = (cuts and formulation == "strong" and backend == "highs" and relaxation is not None
                            and graph.n <= _CUTS_MAX_NODES)
        if not late_lp_rounding and (found.cost is None or lp_bound is None
                                     or not _meets(found.cost, lp_bound, mip_rel_gap)):
            share = None
            if time_limit_s is not None:
                share = max(_LP_ROUNDING_TIME_SHARE * (float(time_limit_s) - (time.perf_counter() - start)), 0.05)
            found = _warm_start(graph, budget_bytes, include_lp_rounding=True, lp_rounding_time_limit_s=share,
                                best=found, heuristics=False, relaxation=relaxation,
                                polish_evals=_WARM_START_POLISH_EVALS if graph.n <= _ROOT_LP_MAX_NODES else None)
            if found.lp_bound is not None:
                bound_lp = _proven_bound(graph, found.lp_bound)
                lp_bound = bound_lp if lp_bound is None else max(lp_bound, bound_lp)
        if found.schedule is not None:
            warm, stats["warm_start_method"], stats["warm_start_cost"] = found.schedule, found.method, found.cost
        if lp_bound is not None:
            stats["lp_bound"] = lp_bound
    stats["warm_start_time_s"] = time.perf_counter() - t0

    def proven_optimal() -> RematResult | None:
        """The warm start as ``OPTIMAL`` when the LP bound (no MILP needed) proves it."""
        if warm is None or lp_bound is None or not _meets(stats["warm_start_cost"], lp_bound, mip_rel_gap):
            return None
        stats.update(milp_skipped=True, returned_warm_start=True, gap=_gap(stats["warm_start_cost"], lp_bound))
        return RematResult(status=SolveStatus.OPTIMAL, schedule=warm, backend=backend, stats=stats,
                           lower_bound=min(lp_bound, stats["warm_start_cost"]),
                           message=f"optimal: the {stats['warm_start_method']} schedule meets the "
                                   f"{stats.get('bound_source', 'LP')} bound")

    done = proven_optimal()
    if done is not None:
        return done

    # ---------------------------------------------------------------- build (+ path inequalities)
    t0 = time.perf_counter()
    reuse = relaxation is not None and formulation == "strong" and relaxation[0].budget_bytes == budget_bytes
    sf = relaxation[0] if reuse else build_milp(graph, budget_bytes, formulation)   # the root LP's program
    stats["build_time_s"] = time.perf_counter() - t0
    x_root = None   # the LP point after the root rounds, where RENS starts
    if cuts and formulation == "strong" and graph.n <= _CUTS_MAX_NODES:
        share = None
        if time_limit_s is not None:
            share = max(_CUT_TIME_SHARE * (float(time_limit_s) - (time.perf_counter() - start)), 0.05)
        sf, cut_bound, stats["cuts"] = _strengthen(sf, backend, threads, share,
                                                   lps=relaxation[2] if reuse else None)
        x_root = stats["cuts"].pop("x", None)
        if cut_bound is not None:
            proven = _proven_bound(graph, max(cut_bound, base_cost))
            lp_bound = proven if lp_bound is None else max(lp_bound, proven)
            stats["lp_bound"] = lp_bound
            done = proven_optimal()
            if done is not None:
                return done
    stats["size"] = sf.size()
    child = None   # the portfolio's branch-and-cut process, started before RENS so that the two overlap

    def offer(schedule: Schedule | None, cost: float | None, method: str) -> RematResult | None:
        """Keep ``schedule`` as the start if it is cheaper (and pass it to a running child); the result when
        the bound proves it optimal, else None."""
        nonlocal warm
        if schedule is None or (warm is not None and cost >= stats["warm_start_cost"] - 1e-9):
            return None
        warm, stats["warm_start_method"], stats["warm_start_cost"] = schedule, method, cost
        done = proven_optimal()
        if done is None and child is not None:
            child.outbox.post(cost - sf.objective_offset, sf.encode(schedule))   # taken at its next node
        return done

    try:
        if x_root is not None and backend == "highs" and not isinstance(warm_start, Schedule) and warm_start:
            # the strengthened LP point rounded (milliseconds): often the optimum on small graphs
            t0 = time.perf_counter()
            found, found_cost = _rounded(graph, sf, x_root, budget_bytes)
            stats["root_rounding"] = {"cost": found_cost, "time_s": time.perf_counter() - t0}
            done = offer(found, found_cost, "root rounding")
            if done is not None:
                return done
            skip_rens = _rens_skipped(graph, None if warm is None else stats["warm_start_cost"], lp_bound)
            small = _small_program(sf)
            if search == "portfolio" and not skip_rens and not small:
                # the child's interpreter starts while RENS runs (without RENS, or on a small program, race
                # starts it only if its short search here outlasts a few milliseconds: most small gaps are
                # closed sooner than a child spawns)
                from .portfolio import start_child

                child = start_child(sf, _start_vector(sf, warm), mip_rel_gap=mip_rel_gap,
                                    time_limit_s=None if time_limit_s is None else
                                    max(float(time_limit_s) - (time.perf_counter() - start), 0.05))
            # RENS around the strengthened LP point: a better start for the search, or the optimum itself
            if skip_rens:
                found, found_cost = None, None
                stats["rens"] = {"skipped": "the start is one unit above the bound", "cost": None}
            else:
                cap = _RENS_TIME_S
                if time_limit_s is not None:
                    left = float(time_limit_s) - (time.perf_counter() - start)
                    cap = min(cap, max(_RENS_TIME_SHARE * left, 0.05))
                found, found_cost, stats["rens"] = _rens(graph, sf, x_root, budget_bytes, cap, threads, whole=small)
                stats["rens"]["child_beside"] = child is not None
                if stats["rens"].get("bound") is not None:   # its try on the whole program proved a bound
                    proven = _proven_bound(graph, stats["rens"]["bound"])
                    if lp_bound is None or proven > lp_bound:
                        lp_bound, stats["bound_source"] = proven, "whole program's root (RENS)"
                        stats["lp_bound"] = lp_bound
            done = offer(found, found_cost, "rens") or proven_optimal()   # (the bound may prove an older start)
            if done is not None:
                return done
        if late_lp_rounding and warm is not None:
            # on the benchmark instances it never beat the rounded root point or RENS (section ilp-root-bounds)
            stats["lp_rounding"] = {"skipped": "a schedule to start from exists", "cost": None}
        elif late_lp_rounding:
            t0 = time.perf_counter()
            share = None
            if time_limit_s is not None:
                share = max(_LP_ROUNDING_TIME_SHARE * (float(time_limit_s) - (time.perf_counter() - start)), 0.05)
            # from the root LP (not the strengthened one: lp-rounding re-solves it at smaller budgets), in an LP
            # sequence of its own, since the root rounds' sequence holds the rows they added
            late = _warm_start(graph, budget_bytes, include_lp_rounding=True, lp_rounding_time_limit_s=share,
                               heuristics=False, relaxation=(relaxation[0], relaxation[1], lp_sequence(backend)),
                               polish_evals=_WARM_START_POLISH_EVALS)
            stats["lp_rounding"] = {"cost": late.cost, "time_s": time.perf_counter() - t0, "after": "rens"}
            done = offer(late.schedule, late.cost, late.method)
            if done is not None:
                return done
        return _search(graph, budget_bytes, sf, warm, lp_bound, stats, search=search, backend=backend,
                       formulation=formulation, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap,
                       threads=threads, verbose=verbose, solver_options=solver_options, start=start, lower=lower,
                       child=child)
    finally:
        if child is not None:
            child.close()


def _left(time_limit_s: float | None, start: float) -> float | None:
    """What is left of ``time_limit_s`` since ``start`` (a :func:`time.perf_counter` time), at least 1 ms."""
    return None if time_limit_s is None else max(float(time_limit_s) - (time.perf_counter() - start), 1e-3)


def _start_vector(sf, schedule: Schedule | None) -> np.ndarray | None:
    """``schedule`` encoded for the search (None without one, or if the encoding broke a row: a bug)."""
    if schedule is None:
        return None
    x0 = sf.encode(schedule)
    viol = _row_violation(sf, x0)
    if viol > 1e-6:  # would be a bug in encode(); the solve does not depend on it
        log.warning("ilp: warm start violates a row by %g; not passed to the solver", viol)
        return None
    return x0


def _search(graph: Graph, budget_bytes: int, sf, warm: Schedule | None, lp_bound: float | None,
            stats: dict[str, Any], *, search: str, backend: str, formulation: str, time_limit_s: float | None,
            mip_rel_gap: float | None, threads: int | None, verbose: bool, solver_options: dict[str, Any] | None,
            start: float, lower: int, child: Any) -> RematResult:
    """The search from the best schedule (``solve_ilp``'s last step), its result decoded and simulated."""
    from .backends import get_backend

    base_cost = float(graph.cost.sum())

    if warm is not None and time_limit_s is not None and time.perf_counter() - start >= float(time_limit_s):
        # the warm start used up the limit: return it rather than start a solver that would overrun it
        stats.update(milp_skipped=True, returned_warm_start=True)
        if lp_bound is not None:
            stats["gap"] = _gap(stats["warm_start_cost"], lp_bound)
        return RematResult(status=SolveStatus.FEASIBLE, schedule=warm, backend=backend, stats=stats,
                           lower_bound=None if lp_bound is None else min(lp_bound, stats["warm_start_cost"]),
                           message=f"time limit reached before the MILP; the {stats['warm_start_method']} schedule")

    # ---------------------------------------------------------------- solve
    x0 = _start_vector(sf, warm)
    limit = None
    if time_limit_s is not None:
        limit = max(float(time_limit_s) - (time.perf_counter() - start), 0.05)
    t0 = time.perf_counter()
    options = dict(solver_options or {})
    if search == "branch-and-cut" and x0 is None:
        # without a schedule nothing is cut off until a dive finds one, and a program whose LP is feasible
        # but that has no schedule would be enumerated: the MILP solver proves that by propagation (in the
        # portfolio it runs beside branch-and-cut, whose dives then look for a first schedule)
        log.info("ilp: no schedule to start branch-and-cut from; the MILP solver runs alone")
        stats["search"] = "milp (no schedule to start branch-and-cut from)"
        options = {}
        search = "milp"
    if search == "portfolio":
        from .portfolio import race

        beside = {k: v for k, v in _HIGHS_PORTFOLIO_DEFAULTS.items() if k not in options}
        options = {**_HIGHS_STRONG_DEFAULTS, **options}
        out, stats["portfolio"] = race(sf, x0, time_limit_s=limit, mip_rel_gap=mip_rel_gap,
                                       threads=None if threads is None else max(threads - 1, 1),
                                       verbose=verbose, milp_options=options, milp_options_beside_child=beside,
                                       child=True if child is None else child)
        stats["solver_options"] = stats["portfolio"].get("milp_options", options)
    elif search == "branch-and-cut":
        from .branch_and_cut import branch_and_cut

        stats["solver_options"] = options
        out = branch_and_cut(sf, start=x0, time_limit_s=limit, mip_rel_gap=mip_rel_gap, threads=threads,
                             verbose=verbose, **options)
        stats["branch_and_cut"] = {k: v for k, v in out.stats.items()
                                   if k in ("lp_solves", "cut_rows", "fixed_by_reduced_cost", "rejected_points")}
    else:
        if backend == "highs" and formulation == "strong":
            options = {**_HIGHS_STRONG_DEFAULTS, **options}
        stats["solver_options"] = options
        solve_fn = get_backend(backend)
        out = solve_fn(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                       time_limit_s=limit, mip_rel_gap=mip_rel_gap, threads=threads, verbose=verbose, start=x0,
                       options=options or None)
    stats["solve_time_s"] = time.perf_counter() - t0
    stats.update({k: v for k, v in out.stats.items() if k in ("backend_status", "nodes", "gap")})
    bound = None if out.bound is None else max(out.bound + sf.objective_offset, base_cost)
    if lp_bound is not None and out.status is not SolveStatus.INFEASIBLE:
        bound = lp_bound if bound is None else max(bound, lp_bound)

    if out.status is SolveStatus.INFEASIBLE:
        stats["min_budget_lower_bound_bytes"] = lower
        return RematResult(status=SolveStatus.INFEASIBLE, backend=backend, stats=stats,
                           message=f"the solver proved that no schedule fits {budget_bytes} bytes")

    # ---------------------------------------------------------------- decode and check
    schedule, cost = (None, None) if out.x is None else _decoded(graph, sf, out.x, budget_bytes)
    if warm is not None and (cost is None or stats["warm_start_cost"] < cost - 1e-9):
        schedule, cost = warm, stats["warm_start_cost"]
        stats["returned_warm_start"] = True
    if schedule is None:
        return RematResult(status=SolveStatus.NO_SOLUTION, lower_bound=bound, backend=backend, stats=stats,
                           message=f"no schedule found ({out.stats.get('backend_status', out.status.value)})")
    if bound is not None:
        bound = min(bound, cost)
        stats["gap"] = _gap(cost, bound)
    # OPTIMAL only when the simulated cost of the schedule returned is within the gap of a valid bound: the
    # solver's word alone is not enough (its status is about the objective it reports, which may not be its
    # point's; see remat_core.solvers.backends.checked)
    status = SolveStatus.OPTIMAL if bound is not None and _meets(cost, bound, _effective_gap(mip_rel_gap)) \
        else SolveStatus.FEASIBLE
    message = "optimal" if status is SolveStatus.OPTIMAL else \
        f"best schedule when the solver stopped ({out.stats.get('backend_status', out.status.value)})"
    return RematResult(status=status, schedule=schedule, lower_bound=bound, backend=backend,
                       stats=stats, message=message)
