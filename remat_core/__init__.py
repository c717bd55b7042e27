"""remat: training neural networks in less memory by rematerialization.

``remat_core`` is framework-agnostic: it imports numpy and scipy only (numba
and solver libraries are imported where used). It holds the graph model
(``graph``), schedules and results (``schedule``), the memory simulator that
judges every schedule (``simulate``), execution plans (``plan``), budgets in
bytes (``units``), the MILP as arrays (``formulation``), the methods behind
:func:`solve` (``solvers``), the hot loops (``kernels``), benchmark graphs
(``zoo``), and on top the maximum batch size, sweeps, plots and the ``remat``
command.

Imports run one way: a module imports only from its own layer and the
lower-numbered ones (``tests/core/test_import_direction.py`` checks every
import, function-level ones included):

1. ``errors``, ``kernels``
2. ``graph``
3. ``schedule``, ``chain``, ``zoo``
4. ``simulate``
5. ``plan``, ``units``, ``formulation``
6. ``solvers``
7. ``batch``, ``sweep``, ``plot``, ``cli`` and this package's namespace

Torch and TensorFlow are never imported here: the adapters ``remat_torch`` and
``remat_tf`` import the core, never the reverse. ``docs/architecture.rst``
draws the whole picture.
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
