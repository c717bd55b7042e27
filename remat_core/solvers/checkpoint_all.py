"""``checkpoint-all``: compute every node once and keep it until its last use."""

from __future__ import annotations

from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from ..simulate import simulate


def solve_checkpoint_all(graph: Graph, budget_bytes: int) -> RematResult:
    """No rematerialization: optimal cost (each node once) when it fits.

    Returns ``INFEASIBLE`` with ``stats["method_min_budget_bytes"]`` (the
    peak it needs) when the budget is smaller than its peak.
    """
    schedule = Schedule.checkpoint_all(graph)
    sim = simulate(graph, schedule, timeline=False)
    base = float(graph.cost.sum())
    if sim.peak_memory_bytes > budget_bytes:
        return RematResult(
            status=SolveStatus.INFEASIBLE,
            message=(f"checkpoint-all needs {sim.peak_memory_bytes} bytes; the budget is {budget_bytes} bytes"),
            stats={"method_min_budget_bytes": sim.peak_memory_bytes},
        )
    # computing each node exactly once is a lower bound for every schedule
    return RematResult(status=SolveStatus.OPTIMAL, schedule=schedule, lower_bound=base,
                       message="no rematerialization needed")


def trivial_result(graph: Graph, budget_bytes: int, backend: str, stats: dict) -> RematResult | None:
    """The answer without solving, when the budget settles it; ``None`` otherwise.

    Below :meth:`Graph.min_budget_lower_bound_bytes` nothing fits (INFEASIBLE);
    at or above checkpoint-all's peak, checkpoint-all is optimal. Shared by the
    optimizing methods (``ilp``, ``lp-rounding``); ``stats`` is updated in place.
    """
    lower = graph.min_budget_lower_bound_bytes()
    if budget_bytes < lower:
        stats["min_budget_lower_bound_bytes"] = lower
        return RematResult(status=SolveStatus.INFEASIBLE, backend=backend, stats=stats,
                           message=f"budget {budget_bytes} bytes is below {lower} bytes, which some node "
                                   "needs with its inputs, workspace and the fixed bytes")
    schedule = Schedule.checkpoint_all(graph)
    if budget_bytes >= simulate(graph, schedule, timeline=False).peak_memory_bytes:
        # computing every node once is a lower bound, and checkpoint-all attains it
        stats["shortcut"] = "checkpoint-all fits"
        return RematResult(status=SolveStatus.OPTIMAL, schedule=schedule, lower_bound=float(graph.cost.sum()),
                           backend=backend, stats=stats,
                           message="checkpoint-all fits the budget: no rematerialization")
    return None
