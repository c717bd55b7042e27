"""A MILP over recomputation, offloading and prefetching for small general graphs.

Checkmate's stages (stage ``t`` computes node ``t`` for the first time) with,
for each stage ``t`` and value ``i``, binaries

* ``R[t,i]`` computed in stage ``t`` (``R[t,t] = 1``);
* ``S[t,i]`` on the device at the start of stage ``t``, kept from ``t-1``;
* ``P[t,i]`` prefetched for stage ``t``: copied back during stage ``t-1``
  (its buffer counts from the start of stage ``t-1``);
* ``Q[t,i]`` copied to the host during stage ``t``;
* ``H[t,i]`` a host copy exists at the start of stage ``t``;

and one continuous stall per stage. Rows: an input of a computation is
computed earlier in the stage, kept or prefetched; a kept or offloaded value is
on the device in that stage; a prefetch needs a host copy made before the stage
that copies it; a host copy comes from an offload. Memory is counted
*conservatively*: everything on the device or computed during a stage counts
for the whole stage (plus the largest workspace of the stage's candidates), so
the MILP is weaker than Checkmate's U recurrence but every plan it returns
fits. Time: the stall of stage ``t`` is at least the copy time issued in it
(its offloads and the next stage's prefetches, ``bytes / bandwidth``) minus its
compute; the objective is compute plus stalls. The decoded plan is judged by
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

    c, A, lo, hi, integrality, ub, index = _build(graph, budget_bytes, host_bandwidth, cost_per_s, time_limit_s)
    res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=integrality, bounds=Bounds(0, ub),
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

    c, A, lo, hi, integrality, ub, index = _build(graph, budget_bytes, host_bandwidth, cost_per_s, time_limit_s)
    cons = LinearConstraint(A, lo, hi)
    lp = milp(c, constraints=cons, integrality=np.zeros_like(integrality), bounds=Bounds(0, ub),
              options={"time_limit": float(time_limit_s)})
    info: dict[str, Any] = {"lp_bound": None if lp.x is None else float(lp.fun), "threshold": None, "time": None}
    if lp.x is None:
        return None, info
    fixed = np.array([key[0] in ("S", "P", "Q", "H") for key in index])
    best: tuple[float, HostPlan, float] | None = None
    for th in thresholds:
        lo_b, hi_b = np.zeros(len(c)), ub.copy()
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
    """The MILP's arrays: objective, constraint matrix and row bounds, integrality, upper bounds, column index."""
    from scipy.sparse import coo_array

    bw = validate_bandwidth(host_bandwidth)
    if bw is None:
        raise ValueError("`host_bandwidth` must be a positive number of bytes/s for the offloading MILP")
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise ValueError(f"`time_limit_s` must be a positive number of seconds; got {time_limit_s!r}")
    cps = 1.0 if bw == math.inf else cost_per_second(graph, cost_per_s)
    n = graph.n
    mem = graph.memory_bytes.astype(float)
    ws = graph.workspace_bytes.astype(float)
    cost = graph.cost.astype(float)
    deps = graph.deps
    copy = np.zeros(n) if bw == math.inf else mem / bw * cps
    scale = max(1.0, float(mem.max()) if n else 1.0)   # memory rows in units of the largest value

    index: dict[tuple, int] = {}

    def var(*key: Any) -> int:
        if key not in index:
            index[key] = len(index)
        return index[key]

    for t in range(n):
        for i in range(t + 1):
            var("R", t, i)
            var("Q", t, i)
        for i in range(t):
            var("S", t, i)
            var("P", t, i)
            var("H", t, i)
    for t in range(n):
        var("stall", t)
    nv = len(index)
    rows: list[tuple[dict[int, float], float, float]] = []

    def row(coefs: dict[int, float], lo: float, hi: float) -> None:
        rows.append((coefs, lo, hi))

    def on_device(t: int, i: int) -> dict[int, float]:
        d = {index["R", t, i]: 1.0}
        if i < t:
            d[index["S", t, i]] = 1.0
            d[index["P", t, i]] = 1.0
        return d

    for t in range(n):
        row({index["R", t, t]: 1.0}, 1.0, 1.0)
        for k in range(t + 1):
            for i in deps[k]:   # an input is computed earlier in the stage, kept or prefetched
                d = {key: -c for key, c in on_device(t, i).items()}
                d[index["R", t, k]] = d.get(index["R", t, k], 0.0) + 1.0
                row(d, -np.inf, 0.0)
        for i in range(t):
            row({index["S", t, i]: 1.0, index["P", t, i]: 1.0}, -np.inf, 1.0)
            # kept into t: on the device in t-1
            d = {key: -c for key, c in on_device(t - 1, i).items()}
            d[index["S", t, i]] = d.get(index["S", t, i], 0.0) + 1.0
            row(d, -np.inf, 0.0)
            # a host copy at the start of t comes from one at t-1 or an offload during t-1
            d = {index["H", t, i]: 1.0, index["Q", t - 1, i]: -1.0}
            if i < t - 1:
                d[index["H", t - 1, i]] = -1.0
            row(d, -np.inf, 0.0)
            # a prefetch for t is copied during t-1, from a host copy made before t-1
            if i < t - 1:
                row({index["P", t, i]: 1.0, index["H", t - 1, i]: -1.0}, -np.inf, 0.0)
            else:
                row({index["P", t, i]: 1.0}, 0.0, 0.0)
        for i in range(t + 1):   # an offload copies a value on the device
            d = {key: -c for key, c in on_device(t, i).items()}
            d[index["Q", t, i]] = 1.0
            row(d, -np.inf, 0.0)
        # memory: everything on the device in stage t, the next stage's prefetches, the largest workspace
        d: dict[int, float] = {}
        for i in range(t):
            d[index["S", t, i]] = mem[i] / scale
            d[index["P", t, i]] = mem[i] / scale
        for k in range(t + 1):
            d[index["R", t, k]] = d.get(index["R", t, k], 0.0) + mem[k] / scale
        if t + 1 < n:
            for i in range(t + 1):
                d[index["P", t + 1, i]] = d.get(index["P", t + 1, i], 0.0) + mem[i] / scale
        wmax = float(ws[: t + 1].max()) if t + 1 else 0.0
        row(d, -np.inf, (budget_bytes - graph.fixed_bytes - wmax) / scale)
        # stall >= copies issued in the stage - its compute
        d = {index["stall", t]: 1.0}
        for i in range(t + 1):
            d[index["Q", t, i]] = -copy[i]
            d[index["R", t, i]] = d.get(index["R", t, i], 0.0) + cost[i]
        if t + 1 < n:
            for i in range(t + 1):
                d[index["P", t + 1, i]] = d.get(index["P", t + 1, i], 0.0) - copy[i]
        row(d, 0.0, np.inf)
    c = np.zeros(nv)
    for (kind, *rest), j in index.items():
        if kind == "R":
            c[j] = cost[rest[1]]
        elif kind == "stall":
            c[j] = 1.0
        elif kind in ("Q", "P"):
            c[j] = 1e-9 * (1 + cost.sum())   # no copy without a reason
    r_idx, c_idx, vals, lo, hi = [], [], [], [], []
    for k, (coefs, a, b) in enumerate(rows):
        for j, v in coefs.items():
            r_idx.append(k)
            c_idx.append(j)
            vals.append(v)
        lo.append(a)
        hi.append(b)
    A = coo_array((vals, (r_idx, c_idx)), shape=(len(rows), nv)).tocsr()
    integrality = np.ones(nv)
    ub = np.ones(nv)
    for t in range(n):
        integrality[index["stall", t]] = 0
        ub[index["stall", t]] = np.inf
    return c, A, lo, hi, integrality, ub, index


def _decode(graph: Graph, x: np.ndarray, index: dict) -> HostPlan:
    """Statements of a MILP solution: per stage, the next stage's prefetches, the computations (each
    offloaded right after it, or at the stage start if it was already there), then the frees."""
    n = graph.n
    deps = graph.deps

    def on(kind: str, t: int, i: int) -> bool:
        key = (kind, t, i)
        return key in index and bool(x[index[key]])

    out: list = []
    reg: dict[int, int] = {}
    host: dict[int, int] = {}
    nxt = 0
    for t in range(n):
        if t + 1 < n:
            for i in range(t + 1):
                if on("P", t + 1, i) and i not in reg:
                    out.append(Prefetch(i, host[i], nxt))
                    reg[i] = nxt
                    nxt += 1
        for i in sorted(reg):
            if on("Q", t, i) and i not in host:
                out.append(Offload(reg[i], i))
                host[i] = reg[i]
        for k in range(t + 1):
            if not on("R", t, k):
                continue
            if k in reg:   # computed again while resident: the new register replaces the old one
                out.append(Free(reg.pop(k), k))
            out.append(Compute(k, nxt, tuple(reg[i] for i in deps[k]), t))
            reg[k] = nxt
            nxt += 1
            if on("Q", t, k) and k not in host:
                out.append(Offload(reg[k], k))
                host[k] = reg[k]
        keep = {i for i in range(t + 1) if t + 1 < n and (on("S", t + 1, i) or on("P", t + 1, i))}
        for i in sorted(reg):
            if i not in keep:
                out.append(Free(reg.pop(i), i))
    for i in sorted(reg):
        out.append(Free(reg.pop(i), i))
    return HostPlan(out, n)
