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
