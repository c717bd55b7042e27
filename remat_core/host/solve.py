"""Planning with a host tier: what ``remat_core.solve(..., host_bandwidth=...)`` runs.

:func:`solve_offload` tries, at one device budget:

* remat alone: the remat method's plan at the budget (no copies);
* the joint plans: the remat method's plans at budgets from the budget up to
  checkpoint-all's peak, and checkpoint-all itself, each with offloads added
  until it fits (:func:`~remat_core.host.offload_to_budget`); on a chain
  training graph also the POFO dynamic program (:mod:`remat_core.host.pofo`),
  nested (rotor's recursion inside its recomputed runs) on chains of at most
  :data:`NESTED_MAX_STAGES` forward stages;
* DTR with swapping as an eviction choice (:mod:`remat_core.host.dtr`), on
  graphs of at most :data:`DTR_SWAP_MAX_NODES` nodes;
* offload alone: every value saved for the backward on the host, as
  ``save_on_cpu`` does (:func:`~remat_core.host.offload_all_plan`);

and returns the fastest plan that fits, judged by
:func:`~remat_core.host.simulate_host` (time = compute + stalls). So the
joint plan is never slower than remat alone or offload alone at the same
budget, when those fit. With a ``state_layout``
(:mod:`remat_core.host.state`), the offloads added to the remat plans may also
move the training state (parameters, gradients, the input batch) to the host
between its uses, which lowers the smallest budget any plan can have
(:func:`~remat_core.host.state.state_floor_bytes`). ``method="pofo"``, ``method="offload-all"``,
``method="dtr-swap"`` and ``method="offload-milp"`` (:mod:`remat_core.host.milp`)
ask for one of them only. Without a bandwidth (``None`` or ``0``) nothing
changes: the call is :func:`remat_core.solve` without the host tier.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..chain import is_chain
from ..errors import ScheduleVerificationError
from ..graph import Graph
from ..plan import ExecutionPlan, InvalidPlanError
from ..schedule import RematResult, Schedule, SolveStatus
from ..simulate import checkpoint_all_peak_bytes
from .dtr import dtr_swap_plan
from .greedy import checkpoint_all, offload_all_plan, offload_to_budget, plan_from_sequence
from .plan import HostPlan
from .pofo import pofo_nested_solve, pofo_plan, pofo_solve
from .simulate import HostSimulation, simulate_host, validate_bandwidth

__all__ = ["HostResult", "solve_offload", "host_result_from_dict", "remat_bases", "HOST_METHODS"]

log = logging.getLogger(__name__)

#: Methods that exist only with a host tier; any other name is the remat method the joint plans start from.
HOST_METHODS = ("pofo", "pofo-nested", "offload-all", "dtr-swap", "offload-milp", "offload-lp-rounding")
#: The joint search also runs nested POFO on chains of at most this many forward stages (its fronts grow fast).
NESTED_MAX_STAGES = 24
#: The joint search also runs DTR with swapping on graphs up to this many nodes (it is a Python loop).
DTR_SWAP_MAX_NODES = 600


@dataclass(repr=False)
class HostResult(RematResult):
    """A :class:`~remat_core.RematResult` with a host plan.

    ``objective`` is the simulated time (compute + stalls, in the graph's cost
    unit) and ``peak_memory_bytes`` the simulated device peak; ``schedule`` is
    the remat schedule the plan started from (``None`` for a POFO plan).

    Attributes
    ----------
    host_plan : HostPlan or None
    host_bandwidth : float
    peak_host_bytes : int or None
    simulation : HostSimulation or None
    """

    host_plan: HostPlan | None = None
    host_bandwidth: float = 0.0
    peak_host_bytes: int | None = None
    simulation: HostSimulation | None = None
    candidates: list = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.host_plan is not None

    def to_dict(self, include_schedule: bool = False) -> dict[str, Any]:
        """JSON-ready summary; with ``include_schedule`` also the host plan (its copies included) and the
        bandwidth it was planned for, which :func:`host_result_from_dict` reads back."""
        d = super().to_dict(include_schedule=include_schedule)
        d["host_bandwidth"] = self.host_bandwidth
        d["peak_host_bytes"] = self.peak_host_bytes
        if include_schedule:
            d["host_plan"] = self.host_plan.to_dict() if self.host_plan is not None else None
        return d

    def __repr__(self) -> str:
        parts = [f"status={self.status.value}", f"method={self.method!r}"]
        if self.objective is not None:
            parts += [f"time={self.objective:g}", f"peak={self.peak_memory_bytes}/{self.budget_bytes}",
                      f"host={self.peak_host_bytes}"]
        return f"HostResult({', '.join(parts)})"


def host_result_from_dict(graph: Graph, data: Mapping[str, Any], cost_per_s: float | None = None,
                          argument: str = "data") -> HostResult:
    """A saved host plan read back (``HostResult.to_dict(include_schedule=True)``, ``remat solve --out``).

    The plan is re-simulated on ``graph`` at its saved bandwidth: the result's
    time and peaks are the simulator's, never the file's.

    Parameters
    ----------
    graph : Graph
        The graph the plan was made for.
    data : mapping
        With ``host_plan``, ``host_bandwidth`` and ``budget_bytes``
        (``schedule`` too when the plan was built on one).
    cost_per_s : float, optional
        Cost units per second (see :func:`~remat_core.host.cost_per_second`).
    argument : str
        Named in errors.

    Returns
    -------
    HostResult

    Raises
    ------
    InvalidPlanError
        If the saved plan is malformed or does not run on ``graph``.
    ScheduleVerificationError
        If it peaks over its saved budget on ``graph``.

    Examples
    --------
    >>> import math
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(6).replace(meta={"cost_unit": "s"})
    >>> res = solve_offload(g, 5, method="checkpoint-all", host_bandwidth=2.0)
    >>> back = host_result_from_dict(g, res.to_dict(include_schedule=True))
    >>> back.host_plan.statements == res.host_plan.statements, back.objective == res.objective
    (True, True)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    if not isinstance(data, Mapping) or not isinstance(data.get("host_plan"), Mapping):
        raise InvalidPlanError(f"`{argument}` holds no host plan (write it with include_schedule=True or "
                               f"`remat solve --schedule --out`)")
    try:
        plan = HostPlan.from_dict(data["host_plan"], graph)
    except InvalidPlanError as exc:
        raise InvalidPlanError(f"`{argument}`: {exc}") from None
    bw = validate_bandwidth(data.get("host_bandwidth"), f"{argument}['host_bandwidth']")
    if bw is None:
        bw = math.inf if plan.num_offloads == 0 else None
    if bw is None:
        raise InvalidPlanError(f"`{argument}` has copies but no `host_bandwidth`")
    try:
        budget = int(data["budget_bytes"])
    except (KeyError, TypeError, ValueError):
        raise InvalidPlanError(f"`{argument}` has no integer `budget_bytes`") from None
    schedule = Schedule.from_dict(data["schedule"]) if data.get("schedule") else None
    try:
        sim = simulate_host(graph, plan, bw, cost_per_s)
    except InvalidPlanError as exc:
        raise InvalidPlanError(f"`{argument}`: the saved host plan does not run on this graph: {exc}") from None
    if sim.peak_device_bytes > budget:
        raise ScheduleVerificationError(f"`{argument}`: the saved host plan peaks at {sim.peak_device_bytes} bytes on "
                                        f"this graph, over its budget {budget} bytes")
    res = HostResult(status=SolveStatus.FEASIBLE, message=f"loaded ({data.get('method', '?')})", schedule=schedule,
                     objective=sim.time, peak_memory_bytes=sim.peak_device_bytes, budget_bytes=budget,
                     method="loaded", host_plan=plan, host_bandwidth=bw, peak_host_bytes=sim.peak_host_bytes,
                     simulation=sim)
    res.stats.update(saved_method=data.get("method"), compute_cost=sim.compute_cost, stall=sim.stall,
                     recomputations=sim.recompute_count, offloaded_values=len(plan.offloaded_nodes()),
                     copied_bytes=sim.copied_bytes, peak_host_bytes=sim.peak_host_bytes, host_bandwidth=bw)
    return res


def solve_offload(graph: Graph, budget_bytes: int, method: str = "auto", host_bandwidth: Any = None,
                  cost_per_s: float | None = None, base_budgets: int = 5, bases: Any = None,
                  schedule_required: bool = False, state_layout: Any = None, partial: float | None = None,
                  **options: Any) -> RematResult:
    """The fastest plan within ``budget_bytes`` with remat, offloading, or both.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
        Device bytes, fixed bytes included.
    method : str
        ``"pofo"``, ``"pofo-nested"`` (chains), ``"offload-all"``, ``"dtr-swap"``,
        ``"offload-milp"`` or ``"offload-lp-rounding"`` (small graphs;
        ``time_limit_s`` option), or a remat
        method (default ``"auto"``) whose plans the joint search starts from.
    host_bandwidth : float or str
        Bytes per second (``"16GB/s"``, ``16e9``, ``math.inf``); ``None`` or
        ``0``: no host tier (the result of :func:`remat_core.solve`).
    cost_per_s : float, optional
        Cost units per second (default: from ``graph.meta["cost_unit"]``).
    base_budgets : int
        How many remat plans the joint search starts from: at
        ``budget_bytes * (peak / budget_bytes) ** x`` for ``x = 0, 0.01, 0.03,
        0.09, ...`` (dense near the budget; ``peak`` is checkpoint-all's).
    schedule_required : bool
        Only plans built on a remat schedule (``result.schedule`` set): the
        PyTorch adapter saves schedules. DTR with swapping, POFO and the
        MILPs are then left out.
    bases : sequence of Schedule or ExecutionPlan, optional
        Remat plans to start from instead of solving for them (a sweep reuses
        its plans this way); checkpoint-all is always added.
    partial : float, optional
        Also offload values in part (chunks): POFO may offload this fraction
        of a value, the joint search's greedy offloads the bytes a stretch
        needs (and keeps its whole-value plans as candidates, so the result
        is never slower than without); default: whole values only. Simulated
        only: the PyTorch executor does not run chunked plans.
    state_layout : StateLayout, optional
        Blocks of ``fixed_bytes`` (parameters, gradients, the input batch)
        the joint plans may keep on the host between their uses
        (:func:`~remat_core.host.zoo_state_layout` builds one for the
        zoo models). Plans that move them have ``host_plan.layout`` set
        (``remat_torch.offload.offload_training_state`` runs them in PyTorch).
    **options
        Passed to the remat method; a ``time_limit_s`` is shared among the
        ``base_budgets`` solves.

    Returns
    -------
    HostResult
        Or the plain :class:`~remat_core.RematResult` without a bandwidth.

    Raises
    ------
    TypeError, ValueError
        On a bad argument (named).
    ScheduleVerificationError
        If a plan's simulated device peak is over the budget (a bug).

    Examples
    --------
    >>> import math
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(8).replace(meta={"cost_unit": "s"})
    >>> res = solve(g, 6, method="checkpoint-all", host_bandwidth=math.inf)
    >>> res.status.value, res.objective, res.stats["recomputations"], res.peak_memory_bytes <= 6
    ('feasible', 17.0, 0, True)
    """
    from ..solvers import solve as remat_solve, validate_budget

    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    budget = validate_budget(budget_bytes)
    bw = validate_bandwidth(host_bandwidth)
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a string; got {method!r}")
    if bw is None:
        return remat_solve(graph, budget, method=method, **options)
    if partial is not None:
        from .pofo import _check_partial

        partial = _check_partial(partial)
        if schedule_required:
            raise ValueError("`partial` cannot be combined with `schedule_required` (the PyTorch executor does not "
                             "run plans that offload chunks of values)")
    pofo_opts = {"partial": partial} if partial else {}
    if isinstance(base_budgets, bool) or not isinstance(base_budgets, int) or base_budgets < 1:
        raise ValueError(f"`base_budgets` must be a positive integer; got {base_budgets!r}")
    if state_layout is not None:
        from .state import StateLayout

        if not isinstance(state_layout, StateLayout) or state_layout.num_nodes != graph.n \
                or state_layout.fixed_bytes != graph.fixed_bytes:
            raise TypeError(f"`state_layout` must be a StateLayout of this graph; got {state_layout!r}")
        if schedule_required:
            raise ValueError("`state_layout` cannot be combined with `schedule_required` (plans saved as "
                             "schedules do not move the training state; remat_torch.offload.offload_training_state "
                             "runs plans that do)")
    start = time.perf_counter()
    cands: list[tuple[str, HostPlan, Schedule | None]] = []
    if method == "pofo":
        cands += _pofo(graph, budget, bw, cost_per_s, {**options, **pofo_opts})
    elif method == "pofo-nested":
        cands += _pofo(graph, budget, bw, cost_per_s, {**options, **pofo_opts}, nested=True)
    elif method == "offload-all":
        cands.append(("offload-all", offload_all_plan(graph), Schedule.checkpoint_all(graph)))
    elif method == "dtr-swap":
        plan = dtr_swap_plan(graph, budget, bw, cost_per_s)
        if plan is not None:
            cands.append(("dtr-swap", plan, None))
    elif method == "offload-milp":
        from .milp import offload_milp_plan

        plan, info = offload_milp_plan(graph, budget, bw, cost_per_s, **options)
        if plan is not None:
            cands.append(("offload-milp", plan, None))
    elif method == "offload-lp-rounding":
        from .milp import offload_lp_rounding_plan

        plan, info = offload_lp_rounding_plan(graph, budget, bw, cost_per_s, **options)
        if plan is not None:
            cands.append(("offload-lp-rounding", plan, None))
    else:
        starts: list[tuple[str, Any]] = []
        if bases is not None:
            for i, sched in enumerate(bases):
                name = f"base {i}"
                if isinstance(sched, tuple) and len(sched) == 2 and isinstance(sched[0], str):
                    name, sched = sched
                if isinstance(sched, ExecutionPlan) and sched.num_nodes == graph.n:
                    starts.append((name, sched))
                elif isinstance(sched, Schedule) and sched.n == graph.n:
                    starts.append((name, sched))
                else:
                    raise TypeError(f"`bases` must hold Schedules or ExecutionPlans of this graph; entry {i} is "
                                    f"{sched!r}")
        else:
            starts = remat_bases(graph, budget, method, base_budgets, schedule_required, **options)
        ck_sched, ck_plan = checkpoint_all(graph)
        starts.append(("checkpoint-all", ck_sched))
        for name, sched in starts:
            # with chunks, whole values too: the greedy's chunk is not always the better choice
            for flag in ((False, True) if partial else (False,)):
                plan = offload_to_budget(graph, ck_plan if sched is ck_sched else sched, budget, bw, cost_per_s,
                                         layout=state_layout, partial=flag)
                if plan is not None and (not flag or plan.num_partial_offloads):
                    cands.append((name + (" + offload" if plan.num_offloads else "")
                                  + (" (chunks)" if flag else ""), plan, sched if isinstance(sched, Schedule) else None))
        cands.append(("offload-all", offload_all_plan(graph), ck_sched))
        if graph.n <= DTR_SWAP_MAX_NODES:
            plan = dtr_swap_plan(graph, budget, bw, cost_per_s)
            if plan is not None:
                cands.append(("dtr-swap", plan, None))
        if is_chain(graph):
            cands += _pofo(graph, budget, bw, cost_per_s, dict(pofo_opts))
            if (graph.n - 1) // 2 <= NESTED_MAX_STAGES:   # a chain training graph has 2 n_forward + 1 nodes
                cands += _pofo(graph, budget, bw, cost_per_s, dict(pofo_opts), nested=True)
    best = None
    table = []
    if schedule_required:
        cands = [c for c in cands if c[2] is not None]
    for name, plan, sched in cands:
        sim = simulate_host(graph, plan, bw, cost_per_s)
        table.append({"plan": name, "time": sim.time, "peak_device_bytes": sim.peak_device_bytes,
                      "fits": sim.peak_device_bytes <= budget})
        if sim.peak_device_bytes > budget:
            if name.startswith(("pofo", "nested pofo", "offload-all", "dtr-swap", "offload-milp",
                                "offload-lp-rounding")):
                continue   # these are not built for a budget: not fitting is an answer, not a bug
            raise ScheduleVerificationError(f"host plan {name!r} simulated at {sim.peak_device_bytes} bytes, over the "
                                            f"budget {budget} bytes")
        key = (sim.time, sim.copied_bytes, sim.recompute_count)
        if best is None or key < best[0]:
            best = (key, name, plan, sched, sim)
    log.debug("host tier at %d bytes, %g B/s: %s", budget, bw, table)
    res = HostResult(status=SolveStatus.INFEASIBLE, budget_bytes=budget, method=method, host_bandwidth=bw,
                     candidates=table)
    res.solve_time_s = time.perf_counter() - start
    if best is None:
        res.message = f"no plan with remat and offloading fits {budget} bytes"
        res.stats["candidates"] = table
        return res
    _, name, plan, sched, sim = best
    res.status = SolveStatus.FEASIBLE
    res.schedule, res.host_plan, res.simulation = sched, plan, sim
    res.objective, res.peak_memory_bytes, res.peak_host_bytes = sim.time, sim.peak_device_bytes, sim.peak_host_bytes
    res.message = f"{name}: time {sim.time:g} (compute {sim.compute_cost:g}, stalls {sim.stall:g})"
    res.stats.update(plan=name, compute_cost=sim.compute_cost, stall=sim.stall, recomputations=sim.recompute_count,
                     offloaded_values=len(plan.offloaded_nodes()), copied_bytes=sim.copied_bytes,
                     peak_host_bytes=sim.peak_host_bytes, host_bandwidth=bw, candidates=table,
                     state_blocks_moved=len(plan.dropped_blocks()) if plan.layout is not None else 0)
    return res


def remat_bases(graph: Graph, budget_bytes: int, method: str = "auto", base_budgets: int = 5,
                schedule_required: bool = False, **options: Any) -> list:
    """The remat plans the joint search of :func:`solve_offload` starts from: ``(name, plan)`` pairs.

    ``method``'s plans at ``budget_bytes * (peak / budget_bytes) ** x`` for ``x
    = 0, 0.01, 0.03, 0.09, ...`` (``base_budgets`` of them; ``peak`` is
    checkpoint-all's), the ones that exist. They do not depend on the
    bandwidth: pass them as ``bases`` to plan one graph for several.
    """
    from ..solvers import solve as remat_solve, validate_budget

    budget = validate_budget(budget_bytes)
    top = checkpoint_all_peak_bytes(graph)
    # dense near the budget (a plan for a little more memory needs few offloads)
    ladder = sorted({int(budget * (top / budget) ** (0.01 * 3 ** (i - 1) if i else 0.0))
                     for i in range(base_budgets)} | {budget}) if budget < top else []
    opts = dict(options)
    if opts.get("time_limit_s") is not None and ladder:   # the caller's limit covers the whole ladder
        opts["time_limit_s"] = float(opts["time_limit_s"]) / len(ladder)
    starts = []
    for b in ladder:
        res = remat_solve(graph, b, method=method, **opts)
        if res.success:   # a run recorded as events (dtr) starts from that run, the schedule its stage form
            seq = getattr(res, "sequence", None)
            use_seq = seq is not None and not (schedule_required and res.schedule is not None)
            starts.append((f"{method} at {b} bytes", plan_from_sequence(graph, seq) if use_seq else res.schedule))
    return starts


def _pofo(graph: Graph, budget: int, bw: float, cost_per_s: float | None, options: dict,
          nested: bool = False) -> list:
    partial = options.get("partial")   # the labels' "P" offloads this fraction of a value
    if nested:
        labels, trees, _ = pofo_nested_solve(graph, budget, bw, cost_per_s, **options)
        if labels is None:
            return []
        return [(f"nested pofo {''.join(labels)} {trees}", pofo_plan(graph, labels, trees, partial=partial), None)]
    labels, _ = pofo_solve(graph, budget, bw, cost_per_s, **options)
    if labels is None:
        return []
    return [("pofo " + "".join(labels), pofo_plan(graph, labels, partial=partial), None)]
