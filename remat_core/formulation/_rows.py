"""Helpers shared by the formulations: a vectorized row builder and graph facts."""

from __future__ import annotations

import math
import numbers
from functools import reduce

import numpy as np
import scipy.sparse as sp

from ..graph import Graph

__all__ = ["RowBuilder", "memory_unit", "scaled_memory", "max_descendant", "user_pairs"]


class RowBuilder:
    """Accumulates constraint rows ``lo <= A x <= hi`` as COO triplets, one family at a time.

    A family is added with arrays: ``rows`` are local row numbers ``0..count-1``
    of the family, ``cols`` and ``vals`` the entries; the builder shifts them.
    """

    def __init__(self) -> None:
        self._r: list[np.ndarray] = []
        self._c: list[np.ndarray] = []
        self._v: list[np.ndarray] = []
        self._lo: list[np.ndarray] = []
        self._hi: list[np.ndarray] = []
        self.families: dict[str, int] = {}
        self.n_rows = 0

    def add(self, name: str, count: int, rows, cols, vals, lo, hi) -> np.ndarray:
        """Add ``count`` rows; returns their global row numbers."""
        count = int(count)
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.broadcast_to(np.asarray(vals, dtype=np.float64), rows.shape)
        keep = cols >= 0
        self._r.append(rows[keep] + self.n_rows)
        self._c.append(cols[keep])
        self._v.append(vals[keep])
        self._lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (count,)).copy())
        self._hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (count,)).copy())
        out = np.arange(self.n_rows, self.n_rows + count, dtype=np.int64)
        self.families[name] = self.families.get(name, 0) + count
        self.n_rows += count
        return out

    def build(self, n_cols: int) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
        """``(A, row_lo, row_hi)``; duplicate entries are summed, zeros dropped."""
        cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
        A = sp.coo_array(
            (cat(self._v, np.float64), (cat(self._r, np.int64), cat(self._c, np.int64))),
            shape=(self.n_rows, n_cols),
        ).tocsr()
        A.sum_duplicates()
        A.eliminate_zeros()
        return A, cat(self._lo, np.float64), cat(self._hi, np.float64)


def memory_unit(graph: Graph, budget_bytes: int) -> float:
    """The byte unit the formulations count memory in.

    The greatest common divisor of every size and of the free budget (exact:
    memory stays integral), enlarged when the budget would still be more than
    ``1e6`` units, so that coefficients stay O(1)..O(1e6) for the LP solver.
    """
    free = max(int(budget_bytes) - graph.fixed_bytes, 1)
    values = [int(v) for v in np.concatenate([graph.memory_bytes, graph.workspace_bytes]) if v > 0]
    g = reduce(math.gcd, values + [free])
    unit = float(max(g, 1))
    if free / unit > 1e6:
        unit = free / 1e6
    return unit


def scaled_memory(graph: Graph, budget_bytes: int, unit: float | None = None
                  ) -> tuple[float, np.ndarray, np.ndarray, float]:
    """``(unit, memory, workspace, cap)``: sizes and the free budget in :func:`memory_unit` units.

    ``unit`` overrides the byte unit (programs for several budgets then share
    their matrix and differ only in bounds).
    """
    if unit is None:
        unit = memory_unit(graph, budget_bytes)
    elif isinstance(unit, bool) or not (isinstance(unit, numbers.Real) and math.isfinite(unit) and unit > 0):
        raise ValueError(f"`memory_unit` must be a positive number of bytes; got {unit!r}")
    unit = float(unit)
    return (unit, graph.memory_bytes / unit, graph.workspace_bytes / unit,
            (budget_bytes - graph.fixed_bytes) / unit)


def max_descendant(graph: Graph) -> np.ndarray:
    """``out[i]``: the largest index among the strict descendants of ``i`` (``-1`` for a sink)."""
    n = graph.n
    out = np.full(n, -1, dtype=np.int64)
    users = graph.users
    for i in range(n - 1, -1, -1):
        for j in users[i]:
            # users are later in topological order, so out[j] is final
            out[i] = max(out[i], j, out[j])
    return out


def user_pairs(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ``(i, j, j2)`` with ``j < j2`` both users of ``i`` (int64 arrays)."""
    a, b, c = [], [], []
    for i, us in enumerate(graph.users):
        if len(us) < 2:
            continue
        u = np.asarray(us, dtype=np.int64)
        jj, kk = np.triu_indices(len(u), 1)
        a.append(np.full(len(jj), i, dtype=np.int64))
        b.append(u[jj])
        c.append(u[kk])
    if not a:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    return np.concatenate(a), np.concatenate(b), np.concatenate(c)
