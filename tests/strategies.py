"""Shared hypothesis strategies: DAGs, training graphs, schedules, budgets."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from remat_core import Graph, Schedule, optimal_r_given_s
from remat_core.zoo import random_training_graph


@st.composite
def dags(draw, min_nodes: int = 1, max_nodes: int = 12, workspace: bool = True) -> Graph:
    """General random DAGs with random costs, sizes, workspace and fixed bytes.

    Node positions are shuffled before construction, so the topological sort is exercised.
    """
    n = draw(st.integers(min_nodes, max_nodes))
    deps = []
    for k in range(n):
        if k == 0:
            deps.append([])
            continue
        d = draw(st.lists(st.integers(0, k - 1), max_size=min(k, 3), unique=True))
        deps.append(sorted(d))
    cost = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    mem = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    ws = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)) if workspace else [0] * n
    fixed = draw(st.integers(0, 5))
    perm = draw(st.permutations(range(n)))
    inv = {old: new for new, old in enumerate(perm)}
    deps_p = [None] * n
    for old in range(n):
        deps_p[inv[old]] = [inv[i] for i in deps[old]]
    names = [None] * n
    for old in range(n):
        names[inv[old]] = f"n{old}"
    arr = lambda xs: [xs[perm[p]] for p in range(n)]  # noqa: E731
    return Graph.from_arrays(deps_p, cost=arr(cost), memory_bytes=arr(mem), workspace_bytes=arr(ws),
                             names=names, fixed_bytes=fixed)


@st.composite
def training_graphs(draw, max_layers: int = 5) -> Graph:
    """Training graphs from the zoo generator (forward DAG + loss + backward)."""
    return random_training_graph(draw(st.integers(1, max_layers)), draw(st.integers(1, 3)),
                                 seed=draw(st.integers(0, 10_000)))


@st.composite
def valid_schedules(draw, graph: Graph, extra: bool = True) -> Schedule:
    """A random valid schedule: random S, its optimal R, plus (optionally) wasteful extra computations.

    Extra computations are nodes whose inputs are all available at that point of the stage,
    including nodes already kept (recomputing a resident value), which the accounting double-counts.
    """
    n = graph.n
    bits = draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    S = np.tril(np.array(bits, dtype=bool).reshape(n, n), -1)
    base = optimal_r_given_s(graph, S)
    if not extra:
        return base
    R, S = base.dense()
    add = draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    add = np.array(add, dtype=bool).reshape(n, n) & draw(st.booleans())
    for t in range(n):
        for i in range(t + 1):
            if add[t, i] and not R[t, i] and all(S[t, j] or R[t, j] for j in graph.deps[i]):
                R[t, i] = True
    return Schedule(R, S)


@st.composite
def raw_schedules(draw, graph: Graph) -> Schedule:
    """Structurally valid (frontier-advancing) schedules that may break dependency constraints."""
    n = graph.n
    R = np.tril(np.array(draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))).reshape(n, n))
    R[np.arange(n), np.arange(n)] = True
    S = np.tril(np.array(draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))).reshape(n, n), -1)
    return Schedule(R, S)
