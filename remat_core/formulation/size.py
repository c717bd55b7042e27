"""How large the MILP of a graph would be, estimated before building it.

The strong formulation (:mod:`~remat_core.formulation.strong`) has one
memory row per stage ``t`` and value ``k`` that stage may compute, and each
row covers the stage's kept values, the values computed so far and those
freed: with ``a_t`` the values still alive at stage ``t`` (computed before
``t`` and read at or after ``t``), the matrix has about ``1.5 * a_t**2``
nonzeros per stage, so ``O(n**3)`` on graphs whose activations stay alive
across the whole backward pass. :func:`estimate_milp_size` computes that sum in
``O(n + edges)`` without building anything, and multiplies it by
:data:`NNZ_FACTOR`, the largest ratio of the built matrix's nonzeros to the
sum seen on random training graphs and the zoo (1.5 to 2.4), so that the
estimate is an over-estimate. A method that would build the program checks
:func:`estimate_milp_size` against its memory limit first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph
from ._rows import max_descendant

__all__ = ["MilpSize", "estimate_milp_size", "NNZ_FACTOR", "BYTES_PER_NONZERO", "DEFAULT_MODEL_BYTES_LIMIT"]

#: Built nonzeros over ``sum_t (1.5 a_t**2 + 3 a_t)``: 1.5 (U-Net_6) to 2.4 (random training graph, 25 nodes).
NNZ_FACTOR = 2.5
#: Peak bytes of the solving process per nonzero: about 100 while building (the sparse triplets, CSR and
#: the index arrays), and HiGHS copies the matrix again for presolve; 200 keeps the guard on the safe side.
BYTES_PER_NONZERO = 200
#: The default model-size limit of ``ilp``, ``lp-rounding`` and ``auto``: 3 GiB (the issue's 4 GiB per solve,
#: less what the interpreter, the graph and the schedules take).
DEFAULT_MODEL_BYTES_LIMIT = 3 * 2**30


@dataclass(frozen=True)
class MilpSize:
    """An estimate of the strong MILP's size.

    Attributes
    ----------
    nonzeros : int
        Estimated nonzeros of the constraint matrix (an over-estimate).
    bytes : int
        Estimated peak memory of building and solving it.
    alive_max : int
        The most values alive at one stage.
    """

    nonzeros: int
    bytes: int
    alive_max: int

    def fits(self, limit_bytes: int | None) -> bool:
        """Whether :attr:`bytes` is within ``limit_bytes`` (``None``: no limit)."""
        return limit_bytes is None or self.bytes <= limit_bytes


def alive_counts(graph: Graph) -> np.ndarray:
    """``a[t]``: how many values ``i < t`` have a descendant at or after ``t`` (the formulation's columns of stage ``t``)."""
    n = graph.n
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    last = max_descendant(graph)
    idx = np.arange(n)
    delta = np.zeros(n + 2, dtype=np.int64)
    has = last > idx
    np.add.at(delta, idx[has] + 1, 1)          # alive from stage i+1 ...
    np.add.at(delta, last[has] + 1, -1)        # ... through stage max_descendant(i)
    return np.cumsum(delta)[:n]


def estimate_milp_size(graph: Graph) -> MilpSize:
    """Estimate the strong MILP's nonzeros and memory without building it.

    The budget does not change the matrix's shape, only its bounds, so the
    estimate holds for every budget.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> from remat_core.formulation import build_milp
    >>> g = linear_graph(8)
    >>> est = estimate_milp_size(g)
    >>> est.nonzeros >= build_milp(g, 100).A.nnz
    True
    """
    a = alive_counts(graph).astype(np.float64)
    nnz = int(NNZ_FACTOR * float(np.sum(1.5 * a * a + 3.0 * a)) + 8 * len(graph.edges) + 4 * graph.n)
    return MilpSize(nonzeros=nnz, bytes=nnz * BYTES_PER_NONZERO, alive_max=int(a.max()) if len(a) else 0)
