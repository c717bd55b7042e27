"""Canonical small problems with independently established optima.

The oracle, :func:`exhaustive_profile`, enumerates every strictly lower
triangular checkpoint matrix ``S`` of a tiny graph, takes the cheapest ``R``
for it (the shared R-given-S kernel) and simulates (the shared simulation
kernel). The optimum at a budget is the cheapest enumerated schedule whose
peak fits. Why this finds the true optimum over all valid ``(R, S)``: every
valid schedule has a *canonical* counterpart (drop kept values that nothing
reads, keep the minimal ``R``) that costs no more and needs no more memory at
any step (``docs/formulation.rst``), and a canonical schedule is
``(R_min(S), S)`` for its own ``S``, which the enumeration visits.

:data:`CASES` lists literal optima; ``tests/core/test_ilp.py`` re-derives
them with the oracle and asks every MILP backend and formulation for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from remat_core import Graph, Node, kernels
from remat_core.zoo import linear_graph

__all__ = ["exhaustive_profile", "exhaustive_optimum", "GRAPHS", "CASES", "Case"]


def exhaustive_profile(graph: Graph) -> dict[int, float]:
    """``{peak_bytes: cheapest cost among schedules with exactly that peak}`` over all ``S``."""
    n = graph.n
    rows, cols = np.tril_indices(n, -1)
    m = len(rows)
    if m > 16:
        raise ValueError(f"exhaustive search over 2**{m} checkpoint matrices is too large")
    dep_ptr, dep_idx, _, _ = graph.csr
    best: dict[int, float] = {}
    for code in range(1 << m):
        keep = np.array([(code >> b) & 1 for b in range(m)], dtype=bool)
        t, i = rows[keep], cols[keep]          # tril_indices is sorted by row then column
        S_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=n), out=S_ptr[1:])
        S_idx = i.astype(np.int64)
        R_ptr, R_idx = kernels.r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx)
        info, _ = kernels.simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx,
                                   graph.memory_bytes, graph.workspace_bytes, graph.fixed_bytes)
        assert info[0] == 0, "the minimal R for any S is valid"
        peak, cost = int(info[4]), float(graph.cost[R_idx].sum())
        if cost < best.get(peak, np.inf):
            best[peak] = cost
    return best


def exhaustive_optimum(profile: dict[int, float], budget_bytes: int) -> float | None:
    """The optimal cost within ``budget_bytes`` (``None``: no schedule fits)."""
    fits = [c for p, c in profile.items() if p <= budget_bytes]
    return min(fits) if fits else None


def _fanout() -> Graph:
    """A forward-only DAG with fan-out, a skip edge, workspace and fixed bytes."""
    return Graph([
        Node("a", cost=2, memory_bytes=2),
        Node("b", cost=1, memory_bytes=1, workspace_bytes=1, deps=("a",)),
        Node("c", cost=3, memory_bytes=3, deps=("a",)),
        Node("d", cost=1, memory_bytes=1, deps=("b", "c")),
        Node("e", cost=2, memory_bytes=2, workspace_bytes=2, deps=("d", "b")),
        Node("f", cost=1, memory_bytes=1, deps=("e", "a")),
    ], fixed_bytes=3, name="fanout6")


def _chain_with_skips() -> Graph:
    """A six-node chain with two skip edges, workspace and fixed bytes."""
    return Graph.from_arrays([[], [0], [1], [2], [3, 1], [4, 0]], cost=[1, 2, 1, 3, 1, 2],
                             memory_bytes=[3, 1, 2, 1, 2, 1], workspace_bytes=[0, 1, 0, 0, 2, 0],
                             fixed_bytes=2, name="chain6-skips")


def _fan_with_workspace() -> Graph:
    return Graph([
        Node("a", cost=1, memory_bytes=4),
        Node("b", cost=2, memory_bytes=1, deps=("a",)),
        Node("c", cost=3, memory_bytes=2, workspace_bytes=1, deps=("b",)),
        Node("d", cost=1, memory_bytes=1, deps=("c", "a")),
        Node("e", cost=2, memory_bytes=2, deps=("d", "b")),
        Node("f", cost=1, memory_bytes=1, workspace_bytes=2, deps=("e", "c")),
    ], fixed_bytes=1, name="fan6")


def _skip_heavy() -> Graph:
    """``d`` reads ``a`` and ``c``; ``c`` comes from a large ``b``. Carrying ``a`` past ``c`` needs 5
    bytes; at 4 the optimum keeps ``c`` and recomputes ``a`` in the last stage."""
    return Graph.from_arrays([[], [0], [1], [0, 2]], cost=[1, 1, 1, 1], memory_bytes=[1, 3, 1, 1], name="skip4")


def _hetero_linear() -> Graph:
    return linear_graph(2, cost=[2, 3, 1, 3, 2], memory_bytes=[2, 3, 1, 3, 2], fixed_bytes=1)


#: name -> graph factory (each graph has at most 6 nodes)
GRAPHS = {
    "linear-1": lambda: linear_graph(1),
    "linear-2": lambda: linear_graph(2),
    "hetero-linear-2": _hetero_linear,
    "fanout6": _fanout,
    "chain6-skips": _chain_with_skips,
    "fan6": _fan_with_workspace,
    "skip4": _skip_heavy,
}


@lru_cache(maxsize=None)
def graph(name: str) -> Graph:
    """The canonical graph called ``name`` (cached)."""
    return GRAPHS[name]()


@dataclass(frozen=True)
class Case:
    graph: str
    budget_bytes: int
    optimum: float | None   # None: infeasible


#: (graph, budget) -> optimum, established by :func:`exhaustive_profile` (see test_canonical_table)
_TABLE = {
    "linear-1": {2: None, 3: 3.0},
    "linear-2": {2: None, 3: 6.0, 4: 5.0},
    "hetero-linear-2": {7: None, 8: 13.0, 9: 13.0, 10: 11.0},
    "fanout6": {8: None, 9: 12.0, 10: 12.0, 11: 10.0},
    "chain6-skips": {7: None, 8: 11.0, 10: 11.0, 11: 10.0},
    "fan6": {7: None, 8: 16.0, 9: 10.0},
    "skip4": {3: None, 4: 5.0, 5: 4.0},
}

CASES = [Case(g, b, opt) for g, row in _TABLE.items() for b, opt in row.items()]
