"""remat: training neural networks in less memory by rematerialization.

``remat_core`` is framework-agnostic: it imports numpy and scipy only (numba
and solver libraries are imported where used).
"""

from .errors import (
    BudgetInfeasibleError,
    GraphValidationError,
    InvalidScheduleError,
    RematError,
    ScheduleVerificationError,
    SolverError,
    UnknownMethodError,
)
from .graph import Graph, Node, infer_loss_index, load_dtr_dag
from .plan import Compute, ExecutionPlan, Free, InvalidPlanError, make_plan, replay
from .schedule import RematResult, Schedule, SolveStatus
from .simulate import SimulationResult, checkpoint_all_peak_bytes, optimal_r_given_s, simulate
from .solvers import available_methods, register_method, solve
from .batch import MaxBatchResult, batch_size_upper_bound, forward_pass_cost_cap, max_batch_size
from .sweep import SweepResult, sweep
from .units import format_bytes, parse_bytes, resolve_budget

__version__ = "0.1.0"

__all__ = [
    "Graph", "Node", "load_dtr_dag", "infer_loss_index",
    "Schedule", "SolveStatus", "RematResult",
    "simulate", "SimulationResult", "optimal_r_given_s", "checkpoint_all_peak_bytes",
    "make_plan", "replay", "ExecutionPlan", "Compute", "Free",
    "solve", "available_methods", "register_method",
    "max_batch_size", "MaxBatchResult", "batch_size_upper_bound", "forward_pass_cost_cap", "sweep", "SweepResult",
    "RematError", "GraphValidationError", "InvalidScheduleError", "InvalidPlanError",
    "UnknownMethodError", "SolverError", "ScheduleVerificationError", "BudgetInfeasibleError",
    "parse_bytes", "format_bytes", "resolve_budget",
]
