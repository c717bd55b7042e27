"""A MILP over recomputation, offloading and prefetching for small general graphs.

Checkmate's stages (stage ``t`` computes node ``t`` for the first time) with,
for each stage ``t`` and value ``i``, binaries

* ``R[t,i]`` computed in stage ``t`` (``R[t,t] = 1``);
* ``S[t,i]`` on the device at the start of stage ``t``, kept from ``t-1``;
* ``P[t,i]`` prefetched for stage ``t``: copied back during stage ``t-1``
  (its buffer counts from the start of stage ``t-1``);
* ``Q[t,i]`` copied to the host during stage ``t``;
* ``H[t,i]`` a host copy exists at the start of stage ``t``;

and one continuous stall per stage, added to Checkmate's program with its
exact memory accounting (:func:`remat_core.formulation.paper.build_paper`:
``U[t,k]``, the memory after allocating ``k`` in stage ``t``, and the ``FREE``
binaries that free an input after its last reader of the stage). Rows: an
input of a computation is computed earlier in the stage, kept or prefetched;
a prefetched value may be kept into the next stage; an offloaded value is on
the device in that stage; a prefetch needs a host copy made before the stage
that copies it; a host copy comes from an offload. Memory: ``U[t,0]`` also
holds the values prefetched for stage ``t`` and those being prefetched for
stage ``t+1`` (allocated when their copy starts, at the start of stage ``t``);
an offload frees nothing by itself (the value leaves the device where
Checkmate's accounting frees it, and the copy back is a new buffer). So without
copies the program is Checkmate's, and with a bandwidth of 0 its optimum is
the ``ilp`` method's. Time: the stall of stage ``t`` is at least the copy time
issued in it (its offloads and the next stage's prefetches, ``bytes /
bandwidth``) minus its compute; the objective is compute plus stalls (an
estimate: the simulator's copy stream also runs across stage boundaries). The decoded plan frees where ``FREE`` does and is judged by
:func:`~remat_core.host.simulate_host`. Solved with ``scipy.optimize.milp``
(HiGHS); meant for graphs of a few dozen nodes. :func:`offload_lp_rounding_plan`
rounds its LP relaxation (the copy and keep decisions at a threshold, then the
cheapest computations for them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Compute, Free
from .plan import HostPlan, Offload, Prefetch
from .simulate import cost_per_second, validate_bandwidth

__all__ = ["offload_milp_plan", "offload_lp_rounding_plan"]


def offload_milp_plan(graph: Graph, budget_bytes: int, host_bandwidth: Any, cost_per_s: float | None = None,
                      time_limit_s: float = 30.0) -> tuple[HostPlan | None, dict]:
    """Solve the MILP of the module docstring and decode its plan.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    host_bandwidth : float or str
        Bytes per second; ``0``: no copies (Checkmate's MILP).
    cost_per_s : float, optional
    time_limit_s : float
        HiGHS's time limit.

    Returns
    -------
    plan : HostPlan or None
        ``None`` when the MILP found no solution (infeasible or out of time).
    info : dict
        ``status`` (scipy's message), ``objective`` (the MILP's time), ``mip_gap``.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> from remat_core.host import simulate_host
    >>> g = linear_graph(4).replace(meta={"cost_unit": "s"})
    >>> plan, info = offload_milp_plan(g, 5, host_bandwidth=4.0)
    >>> simulate_host(g, plan, 4.0).peak_device_bytes <= 5
    True
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    c, A, lo, hi, integrality, lb, ub, index = _build(graph, budget_bytes, host_bandwidth, cost_per_s, time_limit_s)
    res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=integrality, bounds=Bounds(lb, ub),
               options={"time_limit": float(time_limit_s)})
    info = {"status": res.message, "objective": None if res.x is None else float(res.fun),
            "mip_gap": getattr(res, "mip_gap", None)}
    if res.x is None:
        return None, info
    x = np.round(res.x).astype(int)
    return _decode(graph, x, index), info



def offload_lp_rounding_plan(graph: Graph, budget_bytes: int, host_bandwidth: Any, cost_per_s: float | None = None,
                             thresholds: tuple = (0.5, 0.3, 0.7, 0.1, 0.9), time_limit_s: float = 30.0,
                             ) -> tuple[HostPlan | None, dict]:
    """The MILP's LP relaxation, rounded: keep, prefetch, offload and host decisions fixed at a threshold,
    then the cheapest computations for them (a MILP over ``R`` and the stalls only). The best plan over
    ``thresholds``, each judged by :func:`~remat_core.host.simulate_host`.

    Returns
    -------
    plan : HostPlan or None
    info : dict
        ``lp_bound`` (the relaxation's time: a lower bound in the MILP's time model, not the simulator's,
        whose copies may overlap across stages), ``threshold``, ``time`` (simulated).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(6).replace(meta={"cost_unit": "s"})
    >>> plan, info = offload_lp_rounding_plan(g, 7, host_bandwidth=4.0)
    >>> from remat_core.host import simulate_host
    >>> simulate_host(g, plan, 4.0).peak_device_bytes <= 7
    True
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    from .simulate import simulate_host

    c, A, lo, hi, integrality, lb, ub, index = _build(graph, budget_bytes, host_bandwidth, cost_per_s, time_limit_s)
    cons = LinearConstraint(A, lo, hi)
    lp = milp(c, constraints=cons, integrality=np.zeros_like(integrality), bounds=Bounds(lb, ub),
              options={"time_limit": float(time_limit_s)})
    info: dict[str, Any] = {"lp_bound": None if lp.x is None else float(lp.fun), "threshold": None, "time": None}
    if lp.x is None:
        return None, info
    fixed = np.zeros(len(c), dtype=bool)
    fixed[[j for key, j in index.items() if key[0] in ("S", "P", "Q", "H")]] = True
    best: tuple[float, HostPlan, float] | None = None
    for th in thresholds:
        lo_b, hi_b = lb.copy(), ub.copy()
        vals = (lp.x >= th).astype(float)
        lo_b[fixed], hi_b[fixed] = vals[fixed], vals[fixed]
        res = milp(c, constraints=cons, integrality=integrality, bounds=Bounds(lo_b, hi_b),
                   options={"time_limit": float(time_limit_s)})
        if res.x is None:
            continue
        plan = _decode(graph, np.round(res.x).astype(int), index)
        sim = simulate_host(graph, plan, host_bandwidth, cost_per_s)
        if sim.peak_device_bytes <= budget_bytes and (best is None or sim.time < best[0]):
            best = (sim.time, plan, th)
    if best is None:
        return None, info
    info.update(threshold=best[2], time=best[0])
    return best[1], info

def _build(graph: Graph, budget_bytes: int, host_bandwidth: Any, cost_per_s: float | None, time_limit_s: float):
    """The MILP's arrays: objective, constraint matrix, row bounds, integrality, column bounds, column index.

    Checkmate's program (:func:`remat_core.formulation.paper.build_paper`: ``R``, ``S``, the memory ``U`` after
    each allocation and the ``FREE`` binaries of its exact accounting) with the copy columns ``P``, ``Q``,
    ``H`` and the stalls appended, and the rows it has changed: an input may also be prefetched, a prefetched
    value may be kept, and a stage's memory starts with the values prefetched for it and for the next stage.
    """
    from scipy.sparse import coo_array, hstack, vstack

    from ..formulation.paper import build_paper

    if host_bandwidth is None:
        raise ValueError("`host_bandwidth` must be a number of bytes/s for the offloading MILP (0: no copies)")
    bw = validate_bandwidth(host_bandwidth)   # None here: a bandwidth of 0, no copies (Checkmate's MILP)
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ValueError(f"`time_limit_s` must be a positive number of seconds; got {time_limit_s!r}")
    cps = 1.0 if bw is None or bw == math.inf else cost_per_second(graph, cost_per_s)
    n = graph.n
    mem = graph.memory_bytes.astype(float)
    cost = graph.cost.astype(float)
    deps = graph.deps
    copy = np.zeros(n) if bw is None or bw == math.inf else mem / bw * cps
    sf = build_paper(graph, budget_bytes)
    unit = sf.memory_unit
    n0 = sf.n_cols
    index: dict[tuple, int] = {}
    for t in range(n):
        for i in range(n):
            index["R", t, i] = int(sf.r_col[t * n + i])
            index["S", t, i] = int(sf.s_col[t * n + i])
    P0, Q0, H0, T0 = n0, n0 + n * n, n0 + 2 * n * n, n0 + 3 * n * n
    for t in range(n):
        for i in range(n):
            index["P", t, i], index["Q", t, i], index["H", t, i] = P0 + t * n + i, Q0 + t * n + i, H0 + t * n + i
        index["stall", t] = T0 + t
    nv = T0 + n
    lb = np.concatenate([sf.col_lo, np.zeros(nv - n0)])
    ub = np.concatenate([sf.col_hi, np.ones(nv - n0)])
    ub[T0:] = np.inf
    for t in range(n):
        for i in range(n):
            if i > t - 2:   # a prefetch for t needs a host copy made in a stage before t - 1
                ub[index["P", t, i]] = 0.0
            if i > t:
                ub[index["Q", t, i]] = 0.0
            if i > t - 1 or bw is None:
                ub[index["H", t, i]] = 0.0   # no host copy: no prefetch either
            if bw is None:
                ub[index["Q", t, i]] = 0.0
    integrality = np.concatenate([sf.integrality.astype(float), np.ones(nv - n0)])
    integrality[T0:] = 0
    c = np.concatenate([sf.c, np.zeros(nv - n0)])
    c[T0:] = 1.0
    c[P0:H0] = 1e-9 * (1 + cost.sum())   # no copy without a reason

    # Checkmate's rows that change: entries in the new columns
    fam = sf.row_families
    E = len(graph.edges)
    dep0, keep0 = 0, fam["dependency"]
    start0 = keep0 + fam["keep"]
    er, ec, ev = [], [], []
    for t in range(n):
        for e, (i, k) in enumerate(graph.edges):   # R[t,k] <= R[t,i] + S[t,i] + P[t,i]
            er.append(dep0 + t * E + e)
            ec.append(index["P", t, int(i)])
            ev.append(-1.0)
        if t + 1 < n:
            for i in range(n):                         # S[t+1,i] <= R[t,i] + S[t,i] + P[t,i]
                er.append(keep0 + t * n + i)
                ec.append(index["P", t, i])
                ev.append(-1.0)
        for i in range(n):                             # U[t,0] also holds the prefetches for t and t+1
            er.append(start0 + t)
            ec.append(index["P", t, i])
            ev.append(-mem[i] / unit)
            if t + 1 < n:
                er.append(start0 + t)
                ec.append(index["P", t + 1, i])
                ev.append(-mem[i] / unit)
    B = coo_array((ev, (er, [x - n0 for x in ec])), shape=(sf.n_rows, nv - n0))

    rows: list[tuple[dict[int, float], float, float]] = []

    def row(coefs: dict[int, float], lo: float, hi: float) -> None:
        rows.append((coefs, lo, hi))

    def on_device(t: int, i: int) -> dict[int, float]:
        return {index["R", t, i]: 1.0, index["S", t, i]: 1.0, index["P", t, i]: 1.0}

    for t in range(n):
        for i in range(t):
            row({index["S", t, i]: 1.0, index["P", t, i]: 1.0}, -np.inf, 1.0)
            # a host copy at the start of t comes from one at t-1 or an offload during t-1
            row({index["H", t, i]: 1.0, index["Q", t - 1, i]: -1.0, index["H", t - 1, i]: -1.0}, -np.inf, 0.0)
            # a prefetch for t is copied during t-1, from a host copy made before t-1
            row({index["P", t, i]: 1.0, index["H", t - 1, i]: -1.0}, -np.inf, 0.0)
        for i in range(t + 1):   # an offload copies a value on the device
            d = {key: -v for key, v in on_device(t, i).items()}
            d[index["Q", t, i]] = 1.0
            row(d, -np.inf, 0.0)
        # stall >= copies issued in the stage - its compute
        d = {index["stall", t]: 1.0}
        for i in range(t + 1):
            d[index["Q", t, i]] = -copy[i]
            d[index["R", t, i]] = cost[i]
        if t + 1 < n:
            for i in range(t + 1):
                d[index["P", t + 1, i]] = d.get(index["P", t + 1, i], 0.0) - copy[i]
        row(d, 0.0, np.inf)
    r_idx, c_idx, vals, lo, hi = [], [], [], [], []
    for k, (coefs, a, b) in enumerate(rows):
        for j, v in coefs.items():
            r_idx.append(k)
            c_idx.append(j)
            vals.append(v)
        lo.append(a)
        hi.append(b)
    C = coo_array((vals, (r_idx, c_idx)), shape=(len(rows), nv))
    A = vstack([hstack([sf.A, B]), C]).tocsr()
    return c, A, np.concatenate([sf.row_lo, lo]), np.concatenate([sf.row_hi, hi]), integrality, lb, ub, index


def _decode(graph: Graph, x: np.ndarray, index: dict) -> HostPlan:
    """Statements of a MILP solution, freeing where Checkmate's accounting does. Per stage: the next stage's
    prefetches, the offloads of values already on the device, then each computation (offloaded right after
    it when asked), each input freed after its last reader of the stage unless kept into the next; at the
    stage's end every value not kept is freed."""
    n = graph.n
    deps = graph.deps
    users = graph.users

    def on(kind: str, t: int, i: int) -> bool:
        key = (kind, t, i)
        return key in index and bool(x[index[key]])

    out: list = []
    reg: dict[int, int] = {}       # node -> device register read by this stage
    pending: dict[int, int] = {}   # node -> register prefetched for the next stage
    host: dict[int, int] = {}
    nxt = 0

    def offload(i: int) -> None:
        if i not in host:
            out.append(Offload(reg[i], i))
            host[i] = reg[i]

    for t in range(n):
        reg.update(pending)
        pending = {}
        for i in range(n):
            if t + 1 < n and on("P", t + 1, i):
                out.append(Prefetch(i, host[i], nxt))
                pending[i] = nxt
                nxt += 1
        for i in sorted(reg):
            if on("Q", t, i):
                offload(i)
        keep = {i for i in range(n) if t + 1 < n and on("S", t + 1, i)}
        for k in range(t + 1):
            if not on("R", t, k):
                continue
            if k in reg:   # computed again while resident: the new register replaces the old one
                out.append(Free(reg.pop(k), k))
            out.append(Compute(k, nxt, tuple(reg[i] for i in deps[k]), t))
            reg[k] = nxt
            nxt += 1
            if on("Q", t, k):
                offload(k)
            for i in deps[k]:
                if i in reg and i not in keep and not any(j > k and on("R", t, j) for j in users[i]):
                    out.append(Free(reg.pop(i), i))
        for i in sorted(reg):
            if i not in keep:
                out.append(Free(reg.pop(i), i))
    for i in sorted(reg):
        out.append(Free(reg.pop(i), i))
    return HostPlan(out, n)
