"""Checkmate's MILP and its LP relaxation as sparse standard-form arrays.

:func:`build_milp` turns a graph and a budget into a
:class:`~remat_core.formulation.standard_form.StandardForm` (``c``, ``A`` in
CSR, row and column bounds, integrality) plus the map from a solution vector
back to a :class:`~remat_core.Schedule`. Two formulations share one memory
accounting (the simulator's) and so one optimum:

* ``"paper"``: problem (9) of Jain et al. (2020) as published, full ``n x n``
  matrices and the hazard linearization of ``FREE``;
* ``"strong"``: fewer columns, tight ``FREE`` rows and dominance rows that
  keep only canonical schedules (see ``docs/formulation.rst``).

``remat_core.formulation.cuts`` separates the valid inequalities that
``ilp`` adds at the root and branch-and-cut at its nodes.

This package imports the graph, schedules, the simulator (for the minimal
recomputation) and the kernels of the core, numpy and scipy; never a solver or
a solver library: a backend receives the arrays, and the program knows
nothing of who solves it.

Examples
--------
>>> from remat_core.zoo import linear_graph
>>> from remat_core.formulation import build_milp
>>> sf = build_milp(linear_graph(2), 4)
>>> sf.formulation, sf.n_cols > 0, sf.A.shape[1] == sf.n_cols
('strong', True, True)
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnknownMethodError
from ..graph import Graph
from .paper import build_paper
from .standard_form import StandardForm, canonical_schedule, exact_free, exact_memory
from .strong import STRONG_OPTIONS, build_strong

__all__ = [
    "build_milp", "available_formulations", "FORMULATIONS", "StandardForm",
    "canonical_schedule", "exact_free", "exact_memory", "build_paper", "build_strong", "STRONG_OPTIONS",
]

#: name -> builder ``fn(graph, budget_bytes, **options) -> StandardForm``, preferred first
FORMULATIONS: dict[str, Callable[..., StandardForm]] = {
    "strong": build_strong,
    "paper": build_paper,
}


def available_formulations() -> list[str]:
    """Formulation names, preferred first."""
    return list(FORMULATIONS)


def build_milp(graph: Graph, budget_bytes: int, formulation: str = "strong", **options: Any) -> StandardForm:
    """The MILP for ``graph`` under ``budget_bytes`` in standard form.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
        Total device bytes (``graph.fixed_bytes`` included).
    formulation : str
        A name from :func:`available_formulations`.
    **options
        Passed to the builder (``memory_unit`` for both; ``memory_rows``, ``disable`` for ``"strong"``).

    Raises
    ------
    UnknownMethodError
        If ``formulation`` is unknown (listing the known ones).
    """
    if formulation not in FORMULATIONS:
        raise UnknownMethodError(
            f"unknown `formulation` {formulation!r}; available: {', '.join(available_formulations())}"
        )
    return FORMULATIONS[formulation](graph, int(budget_bytes), **options)
