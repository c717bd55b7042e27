"""One entry point, :func:`solve`, over a registry of methods.

A method is a function ``fn(graph, budget_bytes, **options) -> RematResult``
registered under a name. It fills ``status``, ``schedule`` (when it found
one), ``lower_bound``, ``backend``, ``message`` and ``stats``; :func:`solve`
validates the input once, times the call, re-simulates every schedule and
fills ``objective`` and ``peak_memory_bytes`` from the simulator (the method's
own word is never trusted). A schedule over its budget raises
:class:`~remat_core.errors.ScheduleVerificationError`: it is a bug.

Methods live in ``_METHODS`` (name -> ``"module:function"``, imported on first
use) so that importing :mod:`remat_core` loads no solver library.

The package holds one module per method (``checkpoint_all``, ``baselines``,
``griewank``, ``rotor``, ``dtr``, ``lp_rounding``, ``ilp``, ``auto``),
``ilp``'s own searches (``branch_and_cut``; ``portfolio`` with its child
process, ``_portfolio_worker``) and ``backends`` (one module per MILP
library). A solver may import any core module below it (graph, schedule,
simulate, plan, units, formulation, kernels, chain) and imports its solver
library inside the function that uses it; no module below imports a solver.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import numbers
import time
from typing import Any, Callable

from ..errors import RematError, ScheduleVerificationError, UnknownMethodError
from ..graph import Graph
from ..schedule import RematResult, SolveStatus
from ..simulate import simulate

__all__ = ["solve", "available_methods", "register_method", "get_method", "validate_budget"]

log = logging.getLogger(__name__)

MethodFn = Callable[..., RematResult]

#: The relative gap within which an ``OPTIMAL`` result's cost must lie above its lower bound when the method
#: does not say (``stats["mip_rel_gap"]``): the MILP solvers' default.
DEFAULT_OPTIMAL_GAP = 1e-4

# name -> "module:function" or a callable; preference order for listings
_METHODS: dict[str, str | MethodFn] = {
    "ilp": "remat_core.solvers.ilp:solve_ilp",
    "lp-rounding": "remat_core.solvers.lp_rounding:solve_lp_rounding",
    "checkpoint-all": "remat_core.solvers.checkpoint_all:solve_checkpoint_all",
    "chen-sqrtn": "remat_core.solvers.baselines:solve_chen_sqrtn",
    "chen-greedy": "remat_core.solvers.baselines:solve_chen_greedy",
    "griewank-logn": "remat_core.solvers.griewank:solve_griewank_logn",
    "ap-sqrtn": "remat_core.solvers.baselines:solve_ap_sqrtn",
    "ap-greedy": "remat_core.solvers.baselines:solve_ap_greedy",
    "linearized-sqrtn": "remat_core.solvers.baselines:solve_linearized_sqrtn",
    "linearized-greedy": "remat_core.solvers.baselines:solve_linearized_greedy",
    "rotor": "remat_core.solvers.rotor:solve_rotor",
    "auto": "remat_core.solvers.auto:solve_auto",
    "segments": "remat_core.solvers.segments:solve_segments",
    "dtr": "remat_core.solvers.dtr:solve_dtr",
}


#: The module behind ``solve(..., host_bandwidth=...)`` (offloading to host memory with remat).
_HOST_TIER = "remat_core.host"


def register_method(name: str, fn: str | MethodFn, *, overwrite: bool = False) -> None:
    """Register a method under ``name`` (a callable or ``"module:function"``).

    Raises
    ------
    ValueError
        If ``name`` is taken and ``overwrite`` is false.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string; got {name!r}")
    if name in _METHODS and not overwrite:
        raise ValueError(f"method {name!r} is already registered (pass overwrite=True to replace it)")
    _METHODS[name] = fn


def available_methods() -> list[str]:
    """Registered method names, in preference order."""
    return list(_METHODS)


def get_method(name: str) -> MethodFn:
    """The function behind ``name``.

    Raises
    ------
    UnknownMethodError
        Listing the available methods.
    """
    if name not in _METHODS:
        raise UnknownMethodError(f"unknown method {name!r}; available methods: {', '.join(available_methods())}")
    entry = _METHODS[name]
    if isinstance(entry, str):
        mod_name, fn_name = entry.split(":")
        entry = getattr(importlib.import_module(mod_name), fn_name)
        _METHODS[name] = entry
    return entry


def validate_budget(budget_bytes: Any) -> int:
    """Check that ``budget_bytes`` is a positive integer and return it as ``int``."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real):
        raise TypeError(f"`budget_bytes` must be a positive integer; got {budget_bytes!r}")
    if not math.isfinite(budget_bytes):   # int(inf) would raise a bare OverflowError
        raise ValueError(f"`budget_bytes` must be a positive integer (bytes); got {budget_bytes!r}; for a fraction "
                         f"of activation memory use remat_core.resolve_budget(graph, 1.0)")
    if budget_bytes <= 0 or int(budget_bytes) != budget_bytes:
        raise ValueError(f"`budget_bytes` must be a positive integer; got {budget_bytes!r}")
    return int(budget_bytes)


def validate_time_limit(time_limit_s: Any) -> None:
    """Check that ``time_limit_s`` is ``None`` or a positive, finite number of seconds."""
    if time_limit_s is not None and (
        isinstance(time_limit_s, bool) or not isinstance(time_limit_s, numbers.Real)
        or not time_limit_s > 0 or not math.isfinite(time_limit_s)
    ):
        raise ValueError(f"`time_limit_s` must be a positive number of seconds or None; got {time_limit_s!r}")


def solve(graph: Graph, budget_bytes: int, method: str = "ilp", **options: Any) -> RematResult:
    """Find a schedule for ``graph`` within ``budget_bytes`` with ``method``.

    Parameters
    ----------
    graph : Graph
        The training graph.
    budget_bytes : int
        Total device bytes, ``graph.fixed_bytes`` included.
    method : str
        A name from :func:`available_methods`.
    **options
        Passed to the method (for example ``time_limit_s`` for ``"ilp"``).

    Returns
    -------
    RematResult
        Its schedule, when present, has been simulated within the budget.

    Raises
    ------
    TypeError, ValueError
        On a bad ``graph``, ``budget_bytes`` or option (naming it).
    UnknownMethodError
        On an unknown ``method`` (listing the available ones).
    ScheduleVerificationError
        If a method returned a schedule the simulator rejects (a bug).

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(4)
    >>> res = solve(g, 100, method="checkpoint-all")
    >>> res.status.value, res.objective, res.peak_memory_bytes
    ('optimal', 9.0, 6)
    >>> solve(g, 3, method="checkpoint-all").status.value
    'infeasible'
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    budget = validate_budget(budget_bytes)
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a string; got {method!r}")
    if options.get("host_bandwidth") is not None:
        # the host tier (remat_core.host) plans offloading with remat and verifies with its own simulator; it sits
        # above the solvers, so it is reached by name like a registered method. None or 0: no host tier.
        host = importlib.import_module(_HOST_TIER)
        if host.validate_bandwidth(options["host_bandwidth"]) is not None:
            return host.solve_offload(graph, budget, method=method, **options)
    options.pop("host_bandwidth", None)
    fn = get_method(method)
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        accepted = [p for p in list(params)[2:]]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise TypeError(f"method {method!r} got unknown options {unknown}; it accepts {accepted}")
    start = time.perf_counter()
    result = fn(graph, budget, **options)
    if not isinstance(result, RematResult):
        raise RematError(f"method {method!r} returned {type(result).__name__}, not a RematResult")
    result.method = method
    result.budget_bytes = budget
    verify_result(graph, result)
    result.solve_time_s = time.perf_counter() - start
    return result


def _verify_sequence(graph: Graph, result: RematResult) -> None:
    """Re-simulate ``result.sequence`` (:func:`remat_core.sequence.simulate_sequence`): over the budget, or with a
    status that is not a success, it is a bug; else it fills ``objective`` and ``peak_memory_bytes``."""
    from ..sequence import simulate_sequence

    if result.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        raise ScheduleVerificationError(
            f"method {result.method!r} returned a sequence with status {result.status.value}")
    sim = simulate_sequence(graph, result.sequence, timeline=False)
    if sim.peak_memory_bytes > result.budget_bytes:
        raise ScheduleVerificationError(
            f"method {result.method!r} returned a sequence whose simulated peak {sim.peak_memory_bytes} bytes "
            f"exceeds the budget {result.budget_bytes} bytes (event {sim.peak_stage}, node {sim.peak_node})")
    if result.lower_bound is not None and result.lower_bound > sim.total_cost * (1 + 1e-6) + 1e-9:
        raise ScheduleVerificationError(
            f"method {result.method!r} claims lower bound {result.lower_bound} above its own cost {sim.total_cost}")
    result.objective = sim.total_cost
    result.peak_memory_bytes = sim.peak_memory_bytes
    result.stats.setdefault("recomputations", int(sim.compute_counts.sum()) - graph.n)


def verify_result(graph: Graph, result: RematResult) -> RematResult:
    """Re-simulate ``result.schedule`` and fill ``objective`` and ``peak_memory_bytes``.

    Raises
    ------
    ScheduleVerificationError
        If the schedule is over ``result.budget_bytes``, the status does not
        match the presence of a schedule, the lower bound is above the cost,
        or the status is ``OPTIMAL`` with a cost further above the lower
        bound than the relative gap ``result.stats["mip_rel_gap"]``
        (:data:`DEFAULT_OPTIMAL_GAP` when absent).
    """
    budget = result.budget_bytes
    if result.sequence is not None:
        _verify_sequence(graph, result)
        if result.schedule is None:
            return result
    if result.schedule is None:
        if result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            raise ScheduleVerificationError(
                f"method {result.method!r} reported {result.status.value} but returned no schedule"
            )
        result.objective = None
        result.peak_memory_bytes = None
        if result.status is SolveStatus.INFEASIBLE:
            result.stats.setdefault("min_budget_lower_bound_bytes", graph.min_budget_lower_bound_bytes())
        return result
    if result.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        raise ScheduleVerificationError(
            f"method {result.method!r} returned a schedule with status {result.status.value}"
        )
    sim = simulate(graph, result.schedule, timeline=False)
    if sim.peak_memory_bytes > budget:
        raise ScheduleVerificationError(
            f"method {result.method!r} returned a schedule whose simulated peak {sim.peak_memory_bytes} bytes "
            f"exceeds the budget {budget} bytes (stage {sim.peak_stage}, node {sim.peak_node})"
        )
    if result.sequence is not None:   # the sequence is the run; the stage form is another plan within budget
        result.stats["schedule_cost"] = sim.total_cost
        return result
    if result.objective is not None and abs(result.objective - sim.total_cost) > 1e-6 * max(1.0, abs(sim.total_cost)):
        log.debug("method %s claimed cost %s; simulated %s", result.method, result.objective, sim.total_cost)
        result.stats["solver_objective"] = result.objective
    result.objective = sim.total_cost
    result.peak_memory_bytes = sim.peak_memory_bytes
    if result.lower_bound is not None and result.lower_bound > sim.total_cost * (1 + 1e-6) + 1e-9:
        raise ScheduleVerificationError(
            f"method {result.method!r} claims lower bound {result.lower_bound} above its own cost {sim.total_cost}"
        )
    gap = result.stats.get("mip_rel_gap", DEFAULT_OPTIMAL_GAP)
    if (result.status is SolveStatus.OPTIMAL and result.lower_bound is not None
            and sim.total_cost - result.lower_bound > gap * abs(sim.total_cost) + 1e-6 * max(1.0, abs(sim.total_cost))):
        raise ScheduleVerificationError(
            f"method {result.method!r} reported optimal at cost {sim.total_cost}, but its lower bound "
            f"{result.lower_bound} is further below than the relative gap {gap}"
        )
    result.stats.setdefault("recomputations", sim.recompute_count)
    return result
