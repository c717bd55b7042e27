"""The host tier: offloading values to host memory, combined with rematerialization.

A value can be copied to host memory after its producer (``Offload``), dropped
from the device, and copied back (``Prefetch``) before a later reader. Copies
run on one copy stream that overlaps compute; a copy takes ``bytes /
host_bandwidth`` seconds. What lives here:

* ``plan``: the statements of a host plan (``Compute`` and ``Free`` from
  :mod:`remat_core.plan`, plus ``Offload``, ``Prefetch`` and ``Wait``; a
  chunk of a value: ``OffloadPart``, ``DropPart``, ``RestorePart``) and
  :class:`HostPlan`;
* ``simulate``: :func:`simulate_host`, the judge of every host plan (peak
  device memory, peak host memory, time = compute + the stalls where a copy
  is not hidden);
* ``state``: :class:`StateLayout`, the parameters, gradients and input batch
  (parts of ``fixed_bytes``) that may live on the host between their uses;
* ``greedy``: offloads inserted into any remat plan until it fits a budget, and
  the offload-everything plan of ``torch.autograd.graph.save_on_cpu``;
* ``pofo``: the exact dynamic program over keep / offload / recompute on
  chains, and nested POFO (rotor's recursion inside the recomputed runs);
* ``dtr``: DTR with swapping to the host as an eviction choice;
* ``milp``: a MILP over recomputation, offloading and prefetching (small graphs);
* ``timeline``: the plot of a host plan's memory and copies;
* ``solve``: :func:`solve_offload`, what ``remat_core.solve(...,
  host_bandwidth=...)`` calls, returning a :class:`HostResult`.

Imports: numpy, and the core modules below the package namespace (graph,
chain, schedule, simulate, plan, sequence, units, errors, and ``solvers`` for the remat
plans it starts from). Never torch or tensorflow, and no module below imports
this package (``solvers.solve`` reaches it through its registry of methods).
"""

from .plan import (DropPart, DropState, FetchState, HostPlan, Offload, OffloadPart, Prefetch, RestorePart, SaveState,
                   Wait, host_plan_from_execution_plan)
from .state import StateBlock, StateLayout, state_floor_bytes, zoo_state_layout
from .simulate import (DEFAULT_FLOPS_PER_S, DEFAULT_HOST_BANDWIDTH, HostSimulation, cost_per_second,
                       simulate_host, validate_bandwidth)
from .greedy import offload_all_plan, offload_to_budget
from .pofo import pofo_nested_solve, pofo_plan, pofo_solve
from .dtr import dtr_swap_plan
from .solve import HostResult, host_result_from_dict, remat_bases, solve_offload

__all__ = [
    "HostPlan", "Offload", "Prefetch", "Wait", "OffloadPart", "DropPart", "RestorePart", "FetchState", "DropState", "SaveState", "host_plan_from_execution_plan",
    "StateBlock", "StateLayout", "state_floor_bytes", "zoo_state_layout", "remat_bases",
    "HostSimulation", "simulate_host", "cost_per_second", "validate_bandwidth",
    "DEFAULT_HOST_BANDWIDTH", "DEFAULT_FLOPS_PER_S",
    "offload_to_budget", "offload_all_plan", "pofo_plan", "pofo_solve", "pofo_nested_solve", "dtr_swap_plan",
    "HostResult", "solve_offload",
    "host_result_from_dict",
]
