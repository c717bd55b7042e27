"""``segments``: hierarchical rematerialization for graphs too large for the MILP.

The MILP's size grows with the cube of the values alive per stage
(:mod:`~remat_core.formulation.size`): 1.3e9 nonzeros for InceptionV4_64
(1,170 nodes), 1.7e11 for LSTM_512 (5,239). ``segments`` solves a smaller
problem exactly and maps its plan back, in the manner of Rockmate over rotor:

1. **Coarsen.** Cut the topological order into ``k`` contiguous segments (a
   contiguous range of a topological order is convex, so the segments form a
   DAG in the same order), placing each cut, within half a segment of the
   even split, where the fewest bytes of values cross it. A segment becomes
   one coarse node: its cost is the sum of its nodes' costs, its value is the
   set of its outputs read by the next segment, and its workspace is the most
   memory its internal values need while it runs, its nodes computed in
   order and each value freed after its last use inside. Outputs read
   further away (the activations a forward segment leaves for the backward
   pass) become up to two coarse nodes that follow the segment, grouped by
   their first far reader, so that a backward segment is charged for the
   groups it reads rather than for every output of the forward segments it
   touches. A group is recomputed from the segment's inputs: its cost is
   that of its values' ancestors inside the segment (the first computation
   is then counted twice, a constant the coarse optimum does not depend on).
2. **Solve coarse.** The coarse graph (60 to 250 nodes) goes to ``ilp`` or
   ``lp-rounding`` (by its estimated size, as in ``auto``) within the time
   left. A graph whose own program is small enough for ``ilp``
   (:data:`~remat_core.solvers.auto.ILP_MAX_NONZEROS`) is solved as it is,
   exactly, first.
3. **Refine.** The coarse ``S`` says which segments' outputs are kept into
   which coarse stage. The fine checkpoint matrix keeps, at each fine stage,
   exactly the values of the segments available in that coarse stage (kept or
   recomputed there) that are still read at or after it; the fine ``R`` is
   then the cheapest one for that ``S`` (:func:`~remat_core.optimal_r_given_s`):
   a recomputed segment recomputes only what is read, not the whole segment.
4. **Judge.** The simulator measures the fine schedule. Over the budget (the
   coarse model's memory is close to, not exactly, the fine one), the coarse
   budget is lowered by the excess and the coarse problem solved again;
   infeasible coarse problems are retried with more, smaller segments.

5. **Polish.** :func:`polish` drops kept values that are never read before
   they are dropped (:func:`trim_keeps`) and keeps recomputed values instead
   where the memory profile then leaves room (the simulator judging), while
   time is left.

The cheapest verified schedule among the refined plans and ``warm_start``
(``auto`` passes the best baseline or ``dtr`` schedule) is returned, so the
method is never worse than its warm start. The lower bound is the sum of
the node costs (every node is computed at least once), valid at every size;
the coarse program's bound is not one (coarsening restricts the schedules).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from ..simulate import optimal_r_given_s, simulate

__all__ = ["solve_segments", "coarsen", "refine", "Coarsening", "polish", "trim_keeps"]

log = logging.getLogger(__name__)

#: Segment counts tried, in order, until the time runs out (more segments: a finer, larger coarse program).
_SEGMENT_COUNTS = (30, 60, 100)
#: Fine-budget misses tolerated before moving to the next segment count.
_MAX_BUDGET_RETRIES = 3


@dataclass(frozen=True)
class Coarsening:
    """A graph cut into contiguous segments of its topological order, and its coarse graph.

    Attributes
    ----------
    bounds : numpy.ndarray
        ``k + 1`` increasing positions; segment ``s`` is ``bounds[s]..bounds[s+1]-1``.
    segment_of : numpy.ndarray
        The segment of each fine node.
    node_of : numpy.ndarray
        The coarse node holding each fine value: its segment's node, or one of
        the segment's *far-output* nodes.
    coarse_segment : numpy.ndarray
        The segment of each coarse node.
    segment_node : numpy.ndarray
        The coarse node of each segment (its far-output nodes follow it).
    graph : Graph
        The coarse graph.
    last_user : numpy.ndarray
        The last reader of each fine value (itself for a value nothing reads).
    """

    bounds: np.ndarray
    segment_of: np.ndarray
    node_of: np.ndarray
    coarse_segment: np.ndarray
    segment_node: np.ndarray
    graph: Graph
    last_user: np.ndarray


def _last_user(graph: Graph) -> np.ndarray:
    dep_ptr, dep_idx, _, _ = graph.csr
    last = np.arange(graph.n, dtype=np.int64)
    consumers = np.repeat(np.arange(graph.n, dtype=np.int64), np.diff(dep_ptr))
    np.maximum.at(last, dep_idx, consumers)
    return last


def _cut_positions(graph: Graph, k: int, last: np.ndarray) -> np.ndarray:
    """``k + 1`` segment bounds: each cut where the fewest bytes cross, within half a segment of the even split."""
    n = graph.n
    k = max(1, min(k, n))
    # crossing[c]: bytes of values i < c read at or after c (what a cut before position c keeps alive)
    delta = np.zeros(n + 2, dtype=np.float64)
    idx = np.arange(n)
    live = last > idx
    np.add.at(delta, idx[live] + 1, graph.memory_bytes[live])
    np.add.at(delta, last[live] + 1, -graph.memory_bytes[live])
    crossing = np.cumsum(delta)[: n + 1]
    length = n / k
    bounds = [0]
    while True:
        p = bounds[-1]
        left_over = n - p
        if left_over <= 1.5 * length:
            break
        lo, hi = p + max(1, int(length / 2)), min(n - 1, p + int(math.ceil(1.5 * length)))
        if lo > hi:
            break
        window = np.arange(lo, hi + 1)
        # fewest crossing bytes; among equals the one nearest the even split
        key = crossing[window] + 1e-9 * np.abs(window - (p + length)) * (1.0 + crossing[window].max())
        bounds.append(int(window[np.argmin(key)]))
    bounds.append(n)
    return np.asarray(bounds, dtype=np.int64)


def coarsen(graph: Graph, k: int, far_groups: int = 2, near: int = 1) -> Coarsening:
    """Cut ``graph`` into about ``k`` segments and build the coarse graph (see the module docstring).

    A segment's outputs read only by the next ``near`` segments are its coarse
    node's value. Outputs read further away (a forward segment's values read
    by the backward pass) go to up to ``far_groups`` zero-cost coarse nodes
    that follow it and depend on it, grouped by their first far reader: a
    backward segment then depends on (and is charged for) the groups it reads,
    not on every output of the forward segments it touches.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> c = coarsen(linear_graph(8), 4)
    >>> len(c.bounds) - 1, float(c.graph.cost[c.segment_node].sum()) == float(linear_graph(8).cost.sum())
    (5, True)
    """
    n = graph.n
    last = _last_user(graph)
    bounds = _cut_positions(graph, k, last)
    kk = len(bounds) - 1
    seg = np.repeat(np.arange(kk, dtype=np.int64), np.diff(bounds))
    mem, ws, cost = graph.memory_bytes, graph.workspace_bytes, graph.cost
    edges = graph.edges
    src, dst = (edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)) if len(edges) else (
        np.zeros(0, np.int64), np.zeros(0, np.int64))
    # the first reader beyond the near segments, per value (n: none)
    far_edge = seg[dst] > seg[src] + near
    first_far = np.full(n, n, dtype=np.int64)
    np.minimum.at(first_far, src[far_edge], dst[far_edge])
    is_far = first_far < n
    # group of each far value inside its segment: quantiles of its first far reader's segment
    group = np.zeros(n, dtype=np.int64)
    n_groups = np.zeros(kk, dtype=np.int64)
    for s in range(kk):
        a, b = int(bounds[s]), int(bounds[s + 1])
        f = np.flatnonzero(is_far[a:b]) + a
        if not len(f):
            continue
        readers = seg[first_far[f]]
        levels = np.unique(readers)
        g = min(far_groups, len(levels))
        cuts = levels[np.linspace(0, len(levels), g + 1).astype(int)[1:-1]] if g > 1 else np.zeros(0, np.int64)
        group[f] = np.searchsorted(cuts, readers, side="right")
        n_groups[s] = g
    # coarse nodes: segment s, then its groups
    segment_node = np.zeros(kk, dtype=np.int64)
    segment_node[1:] = np.cumsum(1 + n_groups)[:-1]
    n_coarse = int(np.sum(1 + n_groups))
    coarse_segment = np.repeat(np.arange(kk, dtype=np.int64), 1 + n_groups)
    node_of = np.where(is_far, segment_node[seg] + 1 + group, segment_node[seg])
    seg_end = bounds[1:][seg]
    is_out = last >= seg_end
    near_out = is_out & ~is_far
    c_mem = np.bincount(node_of, weights=np.where(is_out, mem, 0), minlength=n_coarse).astype(np.int64)
    c_cost = np.zeros(n_coarse)
    c_cost[segment_node] = np.bincount(seg, weights=cost, minlength=kk)
    # workspace of a segment's node: at each compute instant, its internal values alive and its far outputs
    # computed so far (both allocated in the coarse model only after the node), plus the node's own workspace
    c_ws = np.zeros(n_coarse, dtype=np.int64)
    internal = np.where(is_out, 0, mem).astype(np.int64)
    far_mem = np.where(is_far, mem, 0).astype(np.int64)
    for s in range(kk):
        a, b = int(bounds[s]), int(bounds[s + 1])
        d = np.zeros(b - a + 1, dtype=np.int64)
        np.add.at(d, np.arange(b - a), internal[a:b])
        np.add.at(d, np.minimum(last[a:b], b - 1) - a + 1, -internal[a:b])
        alive = np.cumsum(d)[: b - a] + np.cumsum(far_mem[a:b])
        c_ws[segment_node[s]] = int(np.max(alive + ws[a:b]))
    del near_out
    deps: list[set[int]] = [set() for _ in range(n_coarse)]
    cross = node_of[src] != segment_node[seg[dst]]
    for i_node, u_seg in set(zip(node_of[src[cross]].tolist(), seg[dst[cross]].tolist())):
        if coarse_segment[i_node] != u_seg:
            deps[int(segment_node[u_seg])].add(int(i_node))
    # a far-output node is recomputed from the segment's inputs, not from the segment's node: its cost is that
    # of its values' ancestors inside the segment, its inputs what those ancestors read from outside
    node_deps = graph.deps
    for s in range(kk):
        a, b = int(bounds[s]), int(bounds[s + 1])
        for j in range(int(n_groups[s])):
            gnode = int(segment_node[s]) + 1 + j
            need = np.zeros(b - a, dtype=bool)
            need[np.flatnonzero(node_of[a:b] == gnode)] = True
            for v in range(b - 1, a - 1, -1):
                if need[v - a]:
                    for u in node_deps[v]:
                        if u >= a:
                            need[u - a] = True
                        elif coarse_segment[node_of[u]] != s:
                            deps[gnode].add(int(node_of[u]))
            c_cost[gnode] = float(cost[a:b][need].sum())
            c_ws[gnode] = c_ws[segment_node[s]]
    bwd = np.zeros(n_coarse, dtype=bool)
    if graph.is_backward.any():
        frac = np.bincount(seg, weights=graph.is_backward.astype(float), minlength=kk) / np.diff(bounds)
        bwd = (frac >= 0.5)[coarse_segment]
    coarse = Graph.from_arrays([sorted(d) for d in deps], cost=c_cost, memory_bytes=c_mem, workspace_bytes=c_ws,
                               is_backward=bwd, fixed_bytes=graph.fixed_bytes, name=f"{graph.name}/segments-{kk}")
    return Coarsening(bounds=bounds, segment_of=seg, node_of=node_of, coarse_segment=coarse_segment,
                      segment_node=segment_node, graph=coarse, last_user=last)


def _reads_by_segment(graph: Graph, seg: np.ndarray, kk: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each segment ``T``: the values read by its nodes and, for each, its last reader inside ``T``."""
    edges = graph.edges
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64), np.zeros(0, np.int64))] * kk
    if not len(edges):
        return out
    src, dst = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    key_seg = seg[dst]
    order = np.lexsort((dst, src, key_seg))          # by segment, value, reader
    key_seg, src, dst = key_seg[order], src[order], dst[order]
    last_of_group = np.ones(len(src), dtype=bool)
    last_of_group[:-1] = (key_seg[1:] != key_seg[:-1]) | (src[1:] != src[:-1])
    key_seg, src, dst = key_seg[last_of_group], src[last_of_group], dst[last_of_group]
    starts = np.searchsorted(key_seg, np.arange(kk + 1))
    return [(src[starts[T]:starts[T + 1]], dst[starts[T]:starts[T + 1]]) for T in range(kk)]


def refine(graph: Graph, coarsening: Coarsening, coarse_schedule: Schedule) -> Schedule:
    """The fine schedule of a coarse one (step 3 of the module docstring).

    The coarse stages of segment ``T`` (its node's and its far-output nodes')
    map to the fine stages ``a..b-1`` of ``T``. Fine stage ``t`` keeps a value
    ``c < t`` whose coarse node is available there (kept into or computed in
    one of those coarse stages, or ``T``'s own) when a node of ``T`` at or
    after ``t`` reads it, or when its coarse node is kept into the next
    segment's stage and a node after ``b`` reads it. The first fine stage
    keeps only values whose coarse node is kept into ``T``'s first coarse
    stage; the rest are recomputed there by the optimal ``R``.
    """
    n = graph.n
    bounds, seg, last = coarsening.bounds, coarsening.segment_of, coarsening.last_user
    node_of, segment_node, cseg = coarsening.node_of, coarsening.segment_node, coarsening.coarse_segment
    kk, nc = len(bounds) - 1, coarsening.graph.n
    R_ptr, R_idx, S_ptr, S_idx = coarse_schedule.csr
    reads = _reads_by_segment(graph, seg, kk)
    rows: list[np.ndarray] = []
    idx = np.arange(n)
    for T in range(kk):
        a, b = int(bounds[T]), int(bounds[T + 1])
        c0 = int(segment_node[T])
        c1 = int(segment_node[T + 1]) if T + 1 < kk else nc
        kept_first = np.zeros(nc, dtype=bool)
        kept_first[S_idx[S_ptr[c0]:S_ptr[c0 + 1]]] = True
        avail = kept_first.copy()
        avail[S_idx[S_ptr[c0]:S_ptr[c1]]] = True
        avail[R_idx[R_ptr[c0]:R_ptr[c1]]] = True
        avail[cseg == T] = True
        kept_next = np.zeros(nc, dtype=bool)
        if c1 < nc:
            kept_next[S_idx[S_ptr[c1]:S_ptr[c1 + 1]]] = True
        rc, ru = reads[T]
        ok = avail[node_of[rc]]
        rc, ru = rc[ok], ru[ok]
        carry = idx[:b][avail[node_of[:b]] & kept_next[node_of[:b]] & (last[:b] >= b)]
        first_read = rc[(rc < a) & kept_first[node_of[rc]]]
        first_carry = carry[(carry < a) & kept_first[node_of[carry]]]
        rows.append(np.union1d(first_read, first_carry))
        for t in range(a + 1, b):
            rows.append(np.union1d(rc[(rc < t) & (ru >= t)], carry[carry < t]))
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    S_ptr_f = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=S_ptr_f[1:])
    S_idx_f = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    S_fine = Schedule.from_csr(n, *_r_placeholder(n), S_ptr_f, S_idx_f)
    return optimal_r_given_s(graph, S_fine)


def _r_placeholder(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The diagonal ``R`` (a valid frontier), only to carry ``S`` into :func:`optimal_r_given_s`."""
    return np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64)


def _coarse_method(coarse: Graph) -> str:
    from ..formulation.size import estimate_milp_size
    from .auto import ILP_MAX_NONZEROS

    return "ilp" if estimate_milp_size(coarse).nonzeros <= ILP_MAX_NONZEROS else "lp-rounding"


def solve_segments(graph: Graph, budget_bytes: int, time_limit_s: float | None = 60.0,
                   segments: int | tuple[int, ...] | None = None, warm_start: Schedule | None = None,
                   verbose: bool = False) -> RematResult:
    """Hierarchical solve: coarsen into segments, solve exactly, refine, judge (see the module docstring).

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    time_limit_s : float or None
        Wall-clock limit of the whole call (default 60 s).
    segments : int or tuple of int, optional
        Segment counts to try, in order (default ``(40, 80, 120)``, each only
        while time is left).
    warm_start : Schedule, optional
        A schedule within the budget to beat (returned when nothing cheaper is found).
    verbose : bool
        Solver logs of the coarse solves.

    Returns
    -------
    RematResult
        ``FEASIBLE`` with the cheapest verified schedule and the sum of the
        costs as lower bound (``OPTIMAL`` only when that is met), else
        ``NO_SOLUTION`` (time) or ``INFEASIBLE`` (no coarse plan fits).
        ``stats["tries"]`` lists each coarse solve.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import random_training_graph
    >>> from remat_core.units import resolve_budget
    >>> g = random_training_graph(12, seed=0)
    >>> res = solve(g, resolve_budget(g, 0.6), method="segments", time_limit_s=20, segments=(20,))
    >>> res.success
    True
    """
    from . import solve, validate_time_limit

    validate_time_limit(time_limit_s)
    counts = (segments,) if isinstance(segments, (int, np.integer)) else (segments or _SEGMENT_COUNTS)
    if not counts or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1 for c in counts):
        raise ValueError(f"`segments` must be a positive integer or a tuple of them; got {segments!r}")
    if warm_start is not None and not isinstance(warm_start, Schedule):
        raise TypeError(f"`warm_start` must be a Schedule or None; got {type(warm_start).__name__}")
    start = time.perf_counter()
    left = (lambda: math.inf) if time_limit_s is None else (  # noqa: E731
        lambda: float(time_limit_s) - (time.perf_counter() - start))
    best_s: Schedule | None = None
    best_cost = math.inf
    source = ""
    t_sim = time.perf_counter()
    if warm_start is not None and warm_start.n == graph.n:
        sim = simulate(graph, warm_start, timeline=False)
        if sim.peak_memory_bytes <= budget_bytes:
            best_s, best_cost, source = warm_start, sim.total_cost, "warm start"
    else:
        simulate(graph, Schedule.checkpoint_all(graph), timeline=False)
    # one simulation's time: each refinement costs about two (the optimal R, the judge), kept back from the limit
    sim_time = time.perf_counter() - t_sim
    tries: list[dict[str, Any]] = []
    from ..formulation.size import estimate_milp_size
    from .auto import ILP_MAX_NONZEROS, NONZEROS_PER_SECOND

    if estimate_milp_size(graph).nonzeros <= ILP_MAX_NONZEROS and left() > 0.5:
        # small enough to solve exactly: the one-level hierarchy
        res = solve(graph, budget_bytes, method="ilp",
                    time_limit_s=None if math.isinf(left()) else left(), verbose=verbose)
        tries.append({"segments": graph.n, "method": "ilp", "status": res.status.value,
                      "cost": res.objective, "peak": res.peak_memory_bytes})
        if res.success and res.objective < best_cost:
            best_s, best_cost, source = res.schedule, res.objective, "the graph itself (ilp)"
        if res.status is SolveStatus.INFEASIBLE and best_s is None:
            return RematResult(status=SolveStatus.INFEASIBLE, stats={"tries": tries},
                               message="segments: the exact MILP proves that no schedule fits")
        if res.status is SolveStatus.OPTIMAL:   # the warm start cannot beat a proven optimum by more than its gap
            bound = min(res.lower_bound if res.lower_bound is not None else res.objective, best_cost)
            stats = {"tries": tries, "source": source, "mip_rel_gap": res.stats.get("mip_rel_gap", 1e-4)}
            return RematResult(status=SolveStatus.OPTIMAL, schedule=best_s, lower_bound=bound, stats=stats,
                               message=f"segments: best plan from {source}")
    for k in counts:
        if k >= graph.n:
            k = graph.n
        coarse_budget = budget_bytes
        for attempt in range(_MAX_BUDGET_RETRIES):
            # keep back time for the refinement and its simulation (measured on the previous try)
            remaining = left() - 3 * sim_time - 0.1
            if remaining <= 0.5:
                break
            t0 = time.perf_counter()
            co = coarsen(graph, k)
            if co.graph.min_budget_lower_bound_bytes() > coarse_budget:
                # some segment (with the groups it reads) needs more than the budget: finer segments may fit
                tries.append({"segments": co.graph.n, "method": "-", "coarse_budget": int(coarse_budget),
                              "status": "infeasible (a segment alone needs more)"})
                break
            method = _coarse_method(co.graph)
            if estimate_milp_size(co.graph).nonzeros > NONZEROS_PER_SECOND * remaining:
                tries.append({"segments": co.graph.n, "method": method, "status": "skipped (too little time)"})
                break
            opts: dict[str, Any] = {"time_limit_s": None if math.isinf(remaining) else remaining - (time.perf_counter() - t0)}
            if verbose:
                opts["verbose"] = True
            res = solve(co.graph, coarse_budget, method=method, **opts)
            entry: dict[str, Any] = {"segments": co.graph.n, "method": method, "coarse_budget": int(coarse_budget),
                                     "status": res.status.value, "coarse_s": round(time.perf_counter() - t0, 3)}
            tries.append(entry)
            if not res.success:
                break   # more segments may fit where these do not
            t1 = time.perf_counter()
            fine = refine(graph, co, res.schedule)
            sim = simulate(graph, fine, timeline=False)
            sim_time = time.perf_counter() - t1
            entry.update(peak=int(sim.peak_memory_bytes), cost=float(sim.total_cost))
            if sim.peak_memory_bytes <= budget_bytes:
                if sim.total_cost < best_cost:
                    best_s, best_cost, source = fine, sim.total_cost, f"{co.graph.n} segments ({method})"
                break
            # the fine plan needs more than the coarse model said: ask the coarse problem for that much less
            coarse_budget -= int(sim.peak_memory_bytes - budget_bytes)
            if coarse_budget <= graph.fixed_bytes:
                break
        if left() <= 0.5:
            break
    if best_s is not None and left() > 4 * sim_time + 0.2:
        polished = polish(graph, best_s, budget_bytes,
                          deadline=None if math.isinf(left()) else time.perf_counter() + left() - 2 * sim_time)
        if polished is not best_s:
            best_s, source = polished, source + ", polished"
            best_cost = simulate(graph, best_s, timeline=False).total_cost
    stats: dict[str, Any] = {"tries": tries, "source": source}
    bound = float(np.sum(graph.cost))
    if best_s is None:
        timed_out = left() <= 0.5
        return RematResult(status=SolveStatus.NO_SOLUTION if timed_out else SolveStatus.INFEASIBLE, stats=stats,
                           message="segments: no refined plan fits the budget"
                                   + (" before the time limit" if timed_out else ""))
    status = SolveStatus.OPTIMAL if best_cost <= bound * (1 + 1e-9) else SolveStatus.FEASIBLE
    return RematResult(status=status, schedule=best_s, lower_bound=min(bound, best_cost), stats=stats,
                       message=f"segments: best plan from {source}")


def trim_keeps(graph: Graph, schedule: Schedule) -> Schedule:
    """The same ``R`` with every kept entry that nothing reads removed from ``S``.

    ``S[t, i]`` stays only if ``i`` is read in stage ``t`` (an input of a node
    of ``R[t]``) or kept into stage ``t + 1`` for a later read without being
    computed in stage ``t``; the other entries only hold memory (an online
    evictor such as ``dtr`` leaves values resident until it needs their
    room). The cost is unchanged and every stage's memory is at most the
    input's, which leaves :func:`polish` room to keep recomputed values.

    Examples
    --------
    >>> import numpy as np
    >>> from remat_core import Schedule, simulate
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> R = np.tril(np.ones((7, 7), bool)) & np.eye(7, dtype=bool)
    >>> S = np.tril(np.ones((7, 7), bool), -1)      # keep everything to the end
    >>> trimmed = trim_keeps(g, Schedule(R, S))
    >>> int(trimmed.S.sum()) < int(S.sum()), simulate(g, trimmed).total_cost == simulate(g, Schedule(R, S)).total_cost
    (True, True)
    """
    n = graph.n
    dep_ptr, dep_idx, _, _ = graph.csr
    R_ptr, R_idx, S_ptr, S_idx = schedule.csr
    r_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(R_ptr))
    indeg = dep_ptr[R_idx + 1] - dep_ptr[R_idx]
    # the inputs of every computation, by stage: position j of R's entries reads dep_idx[dep_ptr[k] ...]
    starts = np.repeat(dep_ptr[R_idx], indeg)
    offsets = np.arange(int(indeg.sum()), dtype=np.int64) - np.repeat(np.cumsum(indeg) - indeg, indeg)
    read = np.zeros((n, n), dtype=bool)    # n**2 bytes each, as in polish
    read[np.repeat(r_rows, indeg), dep_idx[starts + offsets]] = True
    computed = np.zeros((n, n), dtype=bool)
    computed[r_rows, R_idx] = True
    kept = np.zeros((n, n), dtype=bool)
    kept[np.repeat(np.arange(n, dtype=np.int64), np.diff(S_ptr)), S_idx] = True
    needed_next = np.zeros(n, dtype=bool)
    for t in range(n - 1, -1, -1):
        row = kept[t]
        row &= read[t] | (needed_next & ~computed[t])
        needed_next = row
    del read, computed
    rows, cols = np.nonzero(kept)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return Schedule.from_csr(n, R_ptr, R_idx, ptr, cols)


def polish(graph: Graph, schedule: Schedule, budget_bytes: int, rounds: int = 30,
           deadline: float | None = None) -> Schedule:
    """Keep recomputed values instead where memory allows; the simulator judges the result.

    A *gap* is a value ``i`` present in stage ``s`` (computed or kept), absent
    from stages ``s+1..t-1`` and recomputed in stage ``t``. Keeping it
    through the gap (``S[s+1..t, i] = 1``) saves at least ``cost[i]`` and adds
    at most ``memory_bytes[i]`` to each stage ``s..t`` (an upper bound: in
    stage ``s`` it is no longer freed after its last use, in stage ``t`` it is
    there before its recomputation would have been). Gaps are filled greedily,
    most cost saved per byte-stage first, while every stage's peak (from the
    simulator's timeline) plus what was added stays within the budget; then
    ``R`` is the optimal one for the new ``S`` (which may drop ancestors that
    were recomputed only for the filled values) and the simulator measures the
    schedule. Each round starts from :func:`trim_keeps` of the incumbent (kept
    values that nothing reads before they are dropped hold memory for
    nothing; on ``dtr`` schedules they fill most stages to the budget). The
    result is returned only if it fits and is cheaper; otherwise the input
    is. ``rounds`` repeats this on the result, until a round finds nothing;
    ``deadline`` (a :func:`time.perf_counter` time) stops between rounds,
    before a round that the last one's duration says would end past it.

    Examples
    --------
    >>> from remat_core import simulate
    >>> from remat_core.zoo import linear_graph
    >>> from remat_core.simulate import optimal_r_given_s
    >>> import numpy as np
    >>> g = linear_graph(4)
    >>> none_kept = optimal_r_given_s(g, np.zeros((9, 9), bool))
    >>> better = polish(g, none_kept, 100)
    >>> simulate(g, better).total_cost < simulate(g, none_kept).total_cost
    True
    """
    sim = simulate(graph, schedule)
    if sim.peak_memory_bytes > budget_bytes:
        return schedule
    start_cost = sim.total_cost
    best = trim_keeps(graph, schedule)
    sim = simulate(graph, best)
    n = graph.n
    mem, cost = graph.memory_bytes, graph.cost
    last_round = 0.0
    for _ in range(rounds):
        if deadline is not None and time.perf_counter() + last_round >= deadline:
            break
        round_start = time.perf_counter()
        stage_max = np.zeros(n, dtype=np.int64)
        np.maximum.at(stage_max, sim.step_stage, sim.step_memory_bytes)
        R_ptr, R_idx, S_ptr, S_idx = best.csr
        r_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(R_ptr))
        s_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(S_ptr))
        # presence events (value, stage, recomputed-without-being-kept)
        vals = np.concatenate([R_idx, S_idx])
        stages = np.concatenate([r_rows, s_rows])
        is_r = np.concatenate([np.ones(len(R_idx), bool), np.zeros(len(S_idx), bool)])
        order = np.lexsort((~is_r, stages, vals))     # by value, stage; a kept entry before a computed one
        vals, stages, is_r = vals[order], stages[order], is_r[order]
        same = (vals[1:] == vals[:-1]) & (stages[1:] == stages[:-1])
        keep = np.ones(len(vals), dtype=bool)
        keep[1:] = ~same                               # one event per (value, stage); kept wins over computed
        vals, stages, is_r = vals[keep], stages[keep], is_r[keep]
        nxt_same = np.zeros(len(vals), dtype=bool)
        nxt_same[:-1] = vals[1:] == vals[:-1]
        g_idx = np.flatnonzero(nxt_same & is_r[np.minimum(np.arange(len(vals)) + 1, len(vals) - 1)])
        gi, gs, gt = vals[g_idx], stages[g_idx], stages[g_idx + 1]
        gap = gt > gs   # recomputed in a later stage than it was last present
        gi, gs, gt = gi[gap], gs[gap], gt[gap]
        if not len(gi):
            break
        score = cost[gi] / (np.maximum(mem[gi], 1) * (gt - gs + 1))
        added = np.zeros(n, dtype=np.int64)
        fills: list[tuple[int, int, int]] = []
        for k in np.argsort(-score, kind="stable"):
            i, s, t = int(gi[k]), int(gs[k]), int(gt[k])
            m = int(mem[i])
            if int(np.max(stage_max[s:t + 1] + added[s:t + 1])) + m <= budget_bytes:
                added[s:t + 1] += m
                fills.append((i, s, t))
        if not fills:
            break
        fi, fs, ft = (np.asarray(x, dtype=np.int64) for x in zip(*fills))
        length = ft - fs
        new_rows = np.repeat(fs + 1, length) + (np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length))
        dense = np.zeros((n, n), dtype=bool)   # n**2 bytes: 22 MB at 4,738 nodes, cheaper than sorting the entries
        dense[s_rows, S_idx] = True
        dense[new_rows, np.repeat(fi, length)] = True
        rows, cols = np.nonzero(dense)
        del dense
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
        cand = optimal_r_given_s(graph, Schedule.from_csr(n, *_r_placeholder(n), ptr, cols))
        cand = trim_keeps(graph, cand)
        csim = simulate(graph, cand)
        if csim.peak_memory_bytes > budget_bytes or csim.total_cost >= sim.total_cost:
            break
        best, sim = cand, csim
        last_round = time.perf_counter() - round_start
    if sim.peak_memory_bytes > budget_bytes or sim.total_cost >= start_cost:
        return schedule
    return best
