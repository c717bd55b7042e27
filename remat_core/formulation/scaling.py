"""Cost scaling: the MILP and its LP relaxation see costs of a size their solver handles.

HiGHS treats coefficients of 1e15 and more as huge and stopped with "model
status Unknown" (or "Solve error") on graphs whose costs were 1e18 or more
(valid per the file schema; profiled costs in femtoseconds reach that). A
method that hands costs to a solver divides them by :func:`cost_scale` (a power
of two, so the division and the multiplication back are exact), solves the
scaled graph, and :func:`unscale_result` multiplies the objective and the bound
back. Schedules do not depend on the scale, and the registry re-simulates every
returned schedule on the original graph anyway.

This module imports the graph and the result types only.
"""

from __future__ import annotations

import math

from ..graph import Graph
from ..schedule import RematResult

__all__ = ["cost_scale", "scaled_graph", "unscale_result", "MAX_UNSCALED_COST"]

#: Graphs whose largest cost is above this are scaled (integer costs up to it keep their exact integer bounds).
MAX_UNSCALED_COST = 1e9
#: Scaled costs lie in [2**10, 2**11): far from both ends of the solver's tolerances.
_TARGET_EXPONENT = 10


def cost_scale(graph: Graph) -> float:
    """The power of two that ``graph``'s costs are divided by before a MILP or LP (1.0: none needed).

    Examples
    --------
    >>> import math
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> s = cost_scale(g.replace(cost=g.cost * 1e18))
    >>> cost_scale(g), math.log2(s).is_integer(), bool(2**10 <= (g.cost * 1e18).max() / s < 2**11)
    (1.0, True, True)
    """
    top = float(graph.cost.max()) if graph.n else 0.0
    if not (top > MAX_UNSCALED_COST and math.isfinite(top)):
        return 1.0
    return math.ldexp(1.0, math.frexp(top)[1] - 1 - _TARGET_EXPONENT)


def scaled_graph(graph: Graph, scale: float) -> Graph:
    """``graph`` with every cost divided by ``scale`` (same name, sizes and structure)."""
    return graph if scale == 1.0 else graph.replace(cost=graph.cost / scale)


def unscale_result(result: RematResult, scale: float) -> RematResult:
    """``result`` of a solve on :func:`scaled_graph` in the original graph's cost units (in place).

    The objective and the lower bound are multiplied back; ``stats["cost_scale"]``
    records the scale (the other cost-valued entries of ``stats`` stay in scaled
    units).
    """
    if scale == 1.0:
        return result
    if result.objective is not None:
        result.objective = result.objective * scale
    if result.lower_bound is not None:
        result.lower_bound = result.lower_bound * scale
    result.stats["cost_scale"] = scale
    return result
