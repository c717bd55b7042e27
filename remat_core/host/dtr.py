"""DTR with swapping: evict by recomputing or by a copy to the host, whichever is cheaper.

Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021) run over the
graph's nodes in order, as :mod:`remat_core.solvers.dtr` does, with one more
eviction choice. When memory would exceed the budget, the resident value with
the smallest ``restore cost / (bytes x staleness)`` that the running node does
not read is evicted, where the restore cost is the cheaper of

* recomputing it: its own cost (DTR's local heuristic), inputs that are gone
  are recomputed too when it is needed again;
* swapping it: copying it to the host (once; the copy stays there) and back,
  ``bytes / host_bandwidth`` each way, in cost units.

A swapped value is copied back right before its next reader (the reader waits
for the copy: no prefetch ahead of time). A value no node will read again is
freed; it stays recomputable, like every dropped value. The result is a host
plan for :func:`~remat_core.host.simulate_host`, which judges it.
"""

from __future__ import annotations

import math
from typing import Any

from ..graph import Graph
from ..plan import Compute, Free
from .plan import HostPlan, Offload, Prefetch
from .simulate import cost_per_second, validate_bandwidth

__all__ = ["dtr_swap_plan"]


def dtr_swap_plan(graph: Graph, budget_bytes: int, host_bandwidth: Any, cost_per_s: float | None = None,
                  swap: bool = True) -> HostPlan | None:
    """DTR's plan within ``budget_bytes``, evicting by recomputation or (``swap``) by a copy to the host.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
        Device bytes, fixed bytes included.
    host_bandwidth : float or str
        Bytes per second (required when ``swap``).
    cost_per_s : float, optional
        Cost units per second (see :func:`~remat_core.host.cost_per_second`).
    swap : bool
        Allow swapping (``False``: DTR with recomputation only).

    Returns
    -------
    HostPlan or None
        ``None`` when some computation cannot fit even with every other
        value evicted.

    Examples
    --------
    >>> from remat_core.host import simulate_host
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(8).replace(meta={"cost_unit": "s"})
    >>> plan = dtr_swap_plan(g, 6, host_bandwidth=4.0)      # a copy of 1 byte takes 0.25 s < 1 s of compute
    >>> sim = simulate_host(g, plan, host_bandwidth=4.0)
    >>> sim.peak_device_bytes <= 6, sim.recompute_count, plan.num_offloads > 0
    (True, 0, True)
    """
    bw = validate_bandwidth(host_bandwidth)
    if swap and bw is None:
        raise ValueError("`host_bandwidth` must be a positive number of bytes/s to swap")
    cps = 1.0 if not swap or bw == math.inf else cost_per_second(graph, cost_per_s)
    n = graph.n
    mem = [int(v) for v in graph.memory_bytes]
    ws = [int(v) for v in graph.workspace_bytes]
    cost = [float(v) for v in graph.cost]
    deps = graph.deps
    users = graph.users
    budget = int(budget_bytes)

    def copy_cost(i: int) -> float:
        return 0.0 if bw is None or bw == math.inf else mem[i] / bw * cps

    out: list = []
    reg: dict[int, int] = {}         # resident node -> device register
    host: dict[int, int] = {}        # node -> host slot (its value is on the host)
    last: dict[int, int] = {}        # node -> clock of its last access
    remaining = [len(users[i]) for i in range(n)]   # first computations of users still to come
    current = graph.fixed_bytes
    clock = 0
    next_reg = 0
    locked: set[int] = set()

    def evict_one(avoid: set[int]) -> bool:
        nonlocal current
        best = None
        for i, r in reg.items():
            if i in avoid or i in locked:
                continue
            stale = max(1, clock - last.get(i, 0))
            restore = cost[i]
            via_host = False
            if swap:
                c = copy_cost(i) + (0.0 if i in host else copy_cost(i))
                if c < restore:
                    restore, via_host = c, True
            score = restore / (max(1, mem[i]) * stale)
            if best is None or score < best[0]:
                best = (score, i, via_host)
        if best is None:
            return False
        _, i, via_host = best
        r = reg.pop(i)
        if via_host and i not in host:
            out.append(Offload(r, i))
            host[i] = r
        out.append(Free(r, i))
        current -= mem[i]
        return True

    def make_room(need: int, avoid: set[int]) -> bool:
        while current + need > budget:
            if not evict_one(avoid):
                return False
        return True

    def ensure(target: int) -> bool:
        """Make ``target`` resident (prefetch or recompute, inputs first); False if it cannot fit."""
        nonlocal current, clock, next_reg
        stack = [target]
        steps = 0
        while stack:
            steps += 1
            if steps > 20 * n + 100:   # thrashing: inputs evicted while their siblings are brought back
                return False
            i = stack[-1]
            if i in reg:
                stack.pop()
                continue
            if i in host:
                if not make_room(mem[i], set()):
                    return False
                r = next_reg
                next_reg += 1
                out.append(Prefetch(i, host[i], r))
                reg[i] = r
                current += mem[i]
                last[i] = clock
                stack.pop()
                continue
            missing = [d for d in deps[i] if d not in reg]
            if missing:
                stack.extend(missing)
                continue
            if not compute(i):
                return False
            stack.pop()
        return True

    def compute(k: int) -> bool:
        """Compute ``k`` (its inputs resident) into a new register."""
        nonlocal current, clock, next_reg
        ins = set(deps[k])
        locked.update(ins)
        ok = make_room(mem[k] + ws[k], ins)
        locked.difference_update(ins)
        if not ok or any(d not in reg for d in deps[k]):
            return False
        r = next_reg
        next_reg += 1
        out.append(Compute(k, r, tuple(reg[d] for d in deps[k]), stage))
        reg[k] = r
        current += mem[k]
        clock += 1
        last[k] = clock
        for d in deps[k]:
            last[d] = clock
        return True

    for stage in range(n):
        for d in deps[stage]:
            locked.add(d)
            if not ensure(d):
                return None
        locked.difference_update(deps[stage])
        if not compute(stage):
            return None
        for d in deps[stage]:
            remaining[d] -= 1
        # values no later node reads leave the device (they stay recomputable); so does an unread new value
        for i in set(deps[stage]) | {stage}:
            if remaining[i] == 0 and i in reg:
                out.append(Free(reg.pop(i), i))
                current -= mem[i]
    for i, r in list(reg.items()):
        out.append(Free(r, i))
    return HostPlan(out, n)
