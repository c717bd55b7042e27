"""``dtr``: Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021), simulated over the graph.

DTR needs no plan: it runs the operators in their order as an online cache
under the budget, evicts the resident value with the lowest heuristic score
when an allocation does not fit, and recomputes evicted values when they are
read, recursively. Two simulations of that run live here, and ``solve(...,
method="dtr")`` keeps the cheapest of them (``order="auto"``, the default;
``order="stages"`` runs the stage form alone, as ``auto`` and the exact
solvers' warm starts ask for):

* **As it runs** (:func:`dtr_sequence_run`, kernel
  :func:`remat_core.kernels.dtr_sequence`): the DTR authors' simulator's
  semantics (simrd) -- recomputation depth first, just before the read, only
  the inputs of what is being computed locked, staleness in compute time,
  the paper's equivalence classes, a thrashing cutoff as a compute ratio
  (``max_overhead``) -- recorded as an :class:`~remat_core.sequence.OpSequence`
  of compute and free events. It runs over any topological order: the
  graph's numbering and a memory-aware order (:mod:`remat_core.order`), so
  that a graph numbered in a poor order (values computed long before they
  are read) is planned in a better one.
* **As stages** (:func:`dtr_run`, kernel :func:`remat_core.kernels.dtr`):
  the run recorded as a Checkmate schedule ``(R, S)`` in the graph's
  numbering, which the stage executors run.

:func:`remat_core.solve` re-simulates both forms (the sequence with
:func:`~remat_core.sequence.simulate_sequence`); ``objective`` is the
sequence's, ``stats["schedule_cost"]`` the stage form's.

The same evictor runs live in PyTorch, on models that cannot be traced:
:func:`remat_torch.dtr`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kernels
from ..graph import Graph
from ..errors import ScheduleVerificationError
from ..kernels import _reference as _ref
from ..order import candidate_orders, check_order, liveness_area_bytes, renumbered, sequence_in_original_numbering
from ..schedule import RematResult, Schedule, SolveStatus
from ..sequence import OpSequence, from_schedule, simulate_sequence
from ..units import format_bytes

__all__ = ["HEURISTICS", "solve_dtr", "dtr_run", "dtr_sequence_run"]

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
#: a run as it runs stops as thrashing when its compute exceeds this multiple of one pass (simrd's papers: 2)
DEFAULT_MAX_OVERHEAD = 2.0
#: the heuristic of the runs as they run (full e*: cheaper than the classes on the recorded graphs at 0.5)
DEFAULT_SEQUENCE_HEURISTIC = "h_dtr"


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


def dtr_sequence_run(graph: Graph, budget_bytes: int, heuristic: str = DEFAULT_SEQUENCE_HEURISTIC, seed: int = 0,
                     max_overhead: float = DEFAULT_MAX_OVERHEAD, order: Any = None, hold: bool = True,
                     kernel: str | None = None) -> dict[str, Any]:
    """One DTR run as it runs (simrd's semantics) over ``order``; the kernel's outputs as a dict.

    ``order`` is a topological order of the nodes (default: the graph's
    numbering). With ``hold`` (default), a value whose last reader has run
    is kept, as an eviction candidate, while an evicted value still read
    later would be recomputed through it; without, it is freed at once
    (simrd's eager eviction). The run stops as thrashing when the compute
    exceeds ``max_overhead`` times one pass (``graph.cost.sum()``).

    Keys: ``ok``, ``code`` (0 ok, 1 no fit, 2 thrashing), ``fail_position``,
    ``fail_node``, ``fail_need_bytes``, ``peak_bytes``, ``computations``,
    ``evictions``, ``total_cost``, ``overhead`` (``total_cost`` over one
    pass), and ``sequence`` (an :class:`~remat_core.sequence.OpSequence`,
    when ``ok``; re-simulated here within ``budget_bytes``).

    Raises
    ------
    ScheduleVerificationError
        If the sequence of a successful run is over the budget (a bug).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> run = dtr_sequence_run(linear_graph(8), 6)
    >>> run["ok"], run["computations"] > linear_graph(8).n
    (True, True)
    """
    _check_options(heuristic, seed, 1)
    if (isinstance(max_overhead, bool) or not isinstance(max_overhead, (int, float, np.number))
            or not max_overhead >= 1 or not math.isfinite(max_overhead)):
        raise ValueError(f"`max_overhead` must be a finite number >= 1; got {max_overhead!r}")
    order = np.arange(graph.n, dtype=np.int64) if order is None else check_order(graph, order)
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    one_pass = float(graph.cost.sum())
    info, kind, node, total = kernels.dtr_sequence(
        graph.n, dep_ptr, dep_idx, user_ptr, user_idx, graph.memory_bytes, graph.workspace_bytes, graph.cost,
        graph.fixed_bytes, int(budget_bytes), order, HEURISTICS[heuristic], int(seed),
        float(max_overhead) * one_pass, hold=hold, kernel=kernel)
    code, fail_pos, fail_node, need, peak, computations, evictions = (int(x) for x in info)
    out = dict(ok=code == _ref.DTR_OK, code=code, fail_position=fail_pos, fail_node=fail_node,
               fail_need_bytes=need, peak_bytes=peak, computations=computations, evictions=evictions,
               total_cost=float(total), overhead=float(total) / one_pass if one_pass > 0 else 1.0, sequence=None)
    if out["ok"]:
        seq = OpSequence(kind, node)
        sim = simulate_sequence(graph, seq, timeline=False)
        if sim.peak_memory_bytes > budget_bytes:
            raise ScheduleVerificationError(f"DTR's run as a sequence peaks at {sim.peak_memory_bytes} bytes, over "
                                            f"its budget {budget_bytes} (event {sim.peak_stage})")
        out["sequence"], out["total_cost"] = seq, float(sim.total_cost)
    return out


def _sequence_runs(graph: Graph, budget_bytes: int, heuristic: str, seed: int, max_overhead: float,
                   orders: dict[str, np.ndarray], bound: float | None = None) -> dict[str, dict[str, Any]]:
    """The runs as they run in ``orders``, the order with the least liveness area first (the likeliest to be
    cheapest: on the recordings the area follows DTR's cost). A run stops once its compute exceeds ``bound`` (the
    cheapest run so far, when given): it can no longer win, and is marked ``pruned`` (results are unchanged; a
    losing order no longer thrashes to the cutoff)."""
    one_pass = float(graph.cost.sum())
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(orders, key=lambda nm: (liveness_area_bytes(graph, orders[nm]), nm)):
        cap = float(max_overhead)
        if bound is not None and one_pass > 0:
            cap = max(1.0, min(cap, bound * (1 + 1e-9) / one_pass))
        r = dtr_sequence_run(graph, budget_bytes, heuristic, seed, cap, orders[name])
        r["pruned"] = r["code"] == _ref.DTR_THRASH and cap < max_overhead
        if r["ok"]:
            bound = r["total_cost"] if bound is None else min(bound, r["total_cost"])
        out[name] = r
    return {name: out[name] for name in orders}


def _stage_runs_in_orders(graph: Graph, budget_bytes: int, heuristic: str, seed: int, max_compute_factor: float,
                          keep_dead: bool | None, orders: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """The stage run on the graph renumbered in each order other than the given one, as sequences in the graph's
    numbering (``"stages <order>"``)."""
    out = {}
    for name, order in orders.items():
        if name == "given":
            continue
        other = renumbered(graph, order)
        r = _run_with_fallback(other, budget_bytes, heuristic, seed, max_compute_factor, keep_dead)
        r["total_cost"] = r["schedule"].cost(other) if r["ok"] else None
        r["sequence"] = (sequence_in_original_numbering(from_schedule(other, r["schedule"]), order) if r["ok"]
                         else None)
        out[f"stages {name}"] = r
    return out


def _orders(graph: Graph, order: Any) -> dict[str, np.ndarray]:
    if isinstance(order, str):
        if order == "auto":
            return candidate_orders(graph)
        if order == "given":
            return {"given": np.arange(graph.n, dtype=np.int64)}
        if order == "stages":
            return {}
        raise ValueError(f"`order` must be 'auto', 'given', 'stages' or a topological order of the nodes; "
                         f"got {order!r}")
    return {"custom": check_order(graph, order)}


def solve_dtr(graph: Graph, budget_bytes: int, heuristic: str | None = None, seed: int = 0,
              max_compute_factor: float = DEFAULT_MAX_COMPUTE_FACTOR, find_min_budget: bool = True,
              keep_dead: bool | None = None, order: Any = "auto",
              max_overhead: float = DEFAULT_MAX_OVERHEAD) -> RematResult:
    """DTR's online evictor under ``budget_bytes``: the cheapest of its runs, as a sequence and a schedule.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    heuristic : str or None
        ``"h_dtr_eq"``, ``"h_dtr"``, ``"h_dtr_local"``, ``"lru"``,
        ``"largest"``, ``"msps"`` or ``"random"``; ``None`` (default): the
        equivalence classes (``h_dtr_eq``) for the stage run and the full
        evicted neighbourhood (``h_dtr``) for the runs as they run.
    seed : int
        Seed of the ``random`` heuristic.
    max_compute_factor : float
        A stage run that makes more than ``max_compute_factor * n``
        computations is stopped as thrashing.
    find_min_budget : bool
        When every run fails, bisect for the smallest budget at which one
        succeeds (``stats["method_min_budget_bytes"]``).
    keep_dead : bool or None
        The stage run's freeing rule: ``None`` (default) runs the default rule
        and, when it fails, the ``keep_dead`` rule (see Notes); ``True`` or
        ``False`` runs only that one.
    order : "auto", "stages", "given" or sequence of int
        The orders the other runs follow: ``"auto"`` (default) the runs as
        they run in the graph's numbering and in the orders of
        :func:`remat_core.order.candidate_orders`, and the stage run in those
        orders too (robust to the numbering; a few seconds on a 5,000-node
        graph); ``"stages"`` none, the stage run alone (its sequence is
        ``from_schedule`` of its schedule: ``objective`` is the schedule's
        cost, which solvers that size their work from the stage run, such as
        ``auto``, ask for); ``"given"`` the run as it runs in the numbering
        only; or one topological order of the nodes.
    max_overhead : float
        A run as it runs stops as thrashing when its compute exceeds
        ``max_overhead`` times one pass (default 2, as in the DTR authors'
        simulations); stated in ``stats["max_overhead"]``.

    Returns
    -------
    RematResult
        ``FEASIBLE`` with ``sequence`` (the cheapest run: its events as they
        ran) and ``schedule`` (the stage run, when it succeeded), or
        ``INFEASIBLE`` (never an exception) when every run fails.
        ``objective`` is the sequence's cost. ``stats``: ``heuristic``,
        ``run`` (which run won: ``"stages"`` or the name of its order),
        ``run_costs`` (each run's cost, ``None`` where it failed),
        ``thrashed`` (the runs stopped by the cutoff), ``pruned`` (runs as
        they run stopped once dearer than the cheapest run so far: they could
        not win), ``max_overhead``,
        ``computations``, ``evictions``, ``keep_dead``, ``dtr_peak_bytes``.

    Notes
    -----
    When the stage run fails, it is run again with ``keep_dead`` (values
    past their last use kept while a reader is still read later; see
    ``dtr_run``), and that run's schedule is kept if it succeeds: in the
    stage format a long recomputation holds much of its row at once. The
    runs as they run recompute depth first and need no such rule.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> res = solve(linear_graph(16), 8, method="dtr", heuristic="h_dtr", order="auto")
    >>> res.status.value, res.peak_memory_bytes <= 8, res.sequence is not None
    ('feasible', True, True)
    """
    stage_heuristic = DEFAULT_HEURISTIC if heuristic is None else heuristic
    seq_heuristic = DEFAULT_SEQUENCE_HEURISTIC if heuristic is None else heuristic
    _check_options(stage_heuristic, seed, max_compute_factor)
    if keep_dead is not None and not isinstance(keep_dead, (bool, np.bool_)):
        raise ValueError(f"`keep_dead` must be True, False or None; got {keep_dead!r}")
    keep_dead = None if keep_dead is None else bool(keep_dead)
    orders = _orders(graph, order)
    if (isinstance(max_overhead, bool) or not isinstance(max_overhead, (int, float, np.number))
            or not max_overhead >= 1 or not math.isfinite(max_overhead)):
        raise ValueError(f"`max_overhead` must be a finite number >= 1; got {max_overhead!r}")

    def all_runs(b: int) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The stage run in the numbering, and the other runs by name. The stage runs go first (they are cheap), so
        that their best cost bounds the runs as they run (:func:`_sequence_runs`)."""
        stage = _run_with_fallback(graph, b, stage_heuristic, seed, max_compute_factor, keep_dead)
        staged = _stage_runs_in_orders(graph, b, stage_heuristic, seed, max_compute_factor, keep_dead, orders)
        costs = [r["total_cost"] for r in staged.values() if r["ok"]]
        if stage["ok"]:
            costs.append(stage["schedule"].cost(graph))
        others = _sequence_runs(graph, b, seq_heuristic, seed, max_overhead, orders, min(costs) if costs else None)
        others.update(staged)
        return stage, others

    run, seq_runs = all_runs(budget_bytes)
    costs: dict[str, float | None] = {"stages": run["schedule"].cost(graph) if run["ok"] else None}
    costs.update({name: (r["total_cost"] if r["ok"] else None) for name, r in seq_runs.items()})
    thrashed = [name for name, r in seq_runs.items() if r["code"] == _ref.DTR_THRASH and not r.get("pruned")]
    pruned = [name for name, r in seq_runs.items() if r.get("pruned")]
    if run["code"] == _ref.DTR_THRASH:
        thrashed.insert(0, "stages")
    stats: dict[str, Any] = dict(heuristic=stage_heuristic, computations=run["computations"],
                                 evictions=run["evictions"], dtr_peak_bytes=run["peak_bytes"],
                                 keep_dead=run["keep_dead"], run_costs=costs, thrashed=thrashed, pruned=pruned,
                                 max_overhead=float(max_overhead))
    won = [name for name, c in costs.items() if c is not None]
    if won:
        best = min(won, key=lambda name: (costs[name], name != "stages"))   # ties: the stage form
        if best == "stages":
            sequence = from_schedule(graph, run["schedule"])
        else:
            r = seq_runs[best]
            sequence = r["sequence"]
            stats.update(heuristic=stage_heuristic if best.startswith("stages") else seq_heuristic,
                         computations=r["computations"], evictions=r["evictions"], dtr_peak_bytes=r["peak_bytes"],
                         keep_dead=r.get("keep_dead", False))
        stats["run"] = best
        n_comp = int(stats["computations"])
        return RematResult(status=SolveStatus.FEASIBLE, schedule=run["schedule"], sequence=sequence, stats=stats,
                           message=f"DTR ({stats['heuristic']}, {best}): {n_comp} computations for {graph.n} "
                                   f"nodes, {stats['evictions']} evictions")
    why = ("thrashing: it stopped after " f"{run['computations']} computations ({max_compute_factor:g} per node)"
           if run["code"] == _ref.DTR_THRASH else
           f"node {run['fail_node']} ({graph.names[run['fail_node']]!r}) needed "
           f"{format_bytes(run['fail_need_bytes'])} with nothing left to evict")
    if orders:
        n_seq = sum(1 for name in thrashed if name in orders)
        why += (f"; as it runs, {n_seq} of {len(orders)} orders thrashed (stopped at {max_overhead:g}x the compute "
                f"of one pass)")
    msg = f"DTR ({stage_heuristic}) did not fit {format_bytes(budget_bytes)}: {why}"
    lower = graph.min_budget_lower_bound_bytes()
    stats["min_budget_lower_bound_bytes"] = lower
    if find_min_budget and graph.n:
        from ..simulate import checkpoint_all_peak_bytes

        hi = checkpoint_all_peak_bytes(graph)   # DTR never evicts there: it is checkpoint-all
        if budget_bytes < hi:
            lo = max(int(budget_bytes), lower - 1)

            def any_ok(b: int) -> bool:
                """Whether some run succeeds at ``b``: the cheap stage runs first, the runs as they run only when
                every stage run failed."""
                if _run_with_fallback(graph, b, stage_heuristic, seed, max_compute_factor, keep_dead)["ok"]:
                    return True
                staged = _stage_runs_in_orders(graph, b, stage_heuristic, seed, max_compute_factor, keep_dead,
                                               orders)
                return (any(r["ok"] for r in staged.values())
                        or any(r["ok"] for r in _sequence_runs(graph, b, seq_heuristic, seed, max_overhead,
                                                               orders).values()))

            found = _smallest_success(graph, lo, hi, any_ok)
            stats["method_min_budget_bytes"] = found
            msg += f"; the smallest budget at which it succeeds (bisection): {format_bytes(found)}"
    return RematResult(status=SolveStatus.INFEASIBLE, message=msg, stats=stats)
