"""``auto``: the best schedule found within a time limit, the method chosen by problem size.

The size rule
-------------
The size that decides is the strong MILP's estimated number of nonzeros
(:func:`~remat_core.formulation.size.estimate_milp_size`, computed in
milliseconds without building anything), not the node count: it grows with
the values alive across each stage, so a wide 200-node graph can be larger
than a 400-node chain.

* up to :data:`ILP_MAX_NONZEROS` (about 80 nodes of a random training graph
  or of a U-Net): ``ilp``, the exact MILP;
* up to :data:`LP_MAX_NONZEROS` (about 270 nodes of ResNet-32): ``lp-rounding``
  (one LP relaxation, rounded), which also gives a lower bound;
* beyond, when the estimated model would not fit ``memory_limit_bytes``, or
  when it has more than :data:`NONZEROS_PER_SECOND` times ``time_limit_s``
  nonzeros (its LP would not finish in time):
  the large-graph path, no formulation at all (the baselines, ``dtr`` when it
  is registered, and ``segments`` when it is registered).

With a time limit, the exact method of those two paths runs in a child
process started first (:mod:`~remat_core.solvers._deadline`), beside the
heuristics, and is stopped at the limit. Whatever the path, the applicable
baselines (``dtr`` included; milliseconds to a few seconds, a family skipped
when its simulations would not fit the time left) run and the cheapest of
them is the incumbent, so ``auto`` is never worse than the best baseline it
ran. An incumbent that is not proven optimal is improved by
:func:`~remat_core.solvers.segments.polish` (keep recomputed values where
the memory profile leaves room, the simulator judging) while time is left.
The result's lower bound is the best one computed: the MILP's or LP's where
one ran; on the large path (and where the exact method was stopped before
giving one), the relaxation of :func:`~remat_core.bounds.cost_lower_bound`,
given at most 15% of the limit; at least the sum of the node
costs (every node is computed at least once).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ..errors import GraphValidationError
from ..formulation.size import DEFAULT_MODEL_BYTES_LIMIT, estimate_milp_size
from ..graph import Graph
from ..schedule import RematResult, SolveStatus
from .anytime import KEEP_DEAD_SLOWDOWN

__all__ = ["solve_auto", "ILP_MAX_NONZEROS", "LP_MAX_NONZEROS", "BASELINES", "choose_path", "NONZEROS_PER_SECOND"]

log = logging.getLogger(__name__)

#: Largest estimated MILP (nonzeros) that ``auto`` gives to the exact ``ilp``.
ILP_MAX_NONZEROS = 600_000
#: Largest estimated MILP (nonzeros) whose LP relaxation ``auto`` solves and rounds (``lp-rounding``).
LP_MAX_NONZEROS = 20_000_000
#: Estimated nonzeros whose program ``auto`` expects to build, solve as an LP and round per second of its
#: limit: lp-rounding took about 39 s a budget on U-Net_6 (7.1 M estimated nonzeros, section lp-rounding of
#: benchmarks/README.md), 180 k a second, and the machine may be shared; a program larger than this times the
#: limit takes the large-graph path.
NONZEROS_PER_SECOND = 120_000
#: The heuristics ``auto`` always runs first, cheapest result kept. Methods that apply to chains only raise
#: GraphValidationError elsewhere and are skipped.
BASELINES = ("checkpoint-all", "dtr", "rotor", "chen-greedy", "chen-sqrtn", "griewank-logn", "ap-greedy", "ap-sqrtn",
             "linearized-greedy", "linearized-sqrtn")
#: Methods ``auto`` runs on the large-graph path when they are registered.
LARGE_GRAPH_METHODS = ("segments",)
#: About how many simulations each baseline runs (its family of schedules; 2 for the others): a baseline is
#: skipped when that many times one simulation is more than half of the time left (5,000-node graphs: 0.1-0.3 s
#: a simulation on an idle core).
_SIMULATIONS = {"checkpoint-all": 1, "rotor": 3, "ap-greedy": 45, "ap-sqrtn": 45, "linearized-greedy": 45,
                "linearized-sqrtn": 45, "chen-greedy": 45, "chen-sqrtn": 45, "griewank-logn": 10}
#: Share of the limit kept back on the large path: the time of each step there (a coarse solve's child, a
#: refinement, a polish round) is an estimate from one simulation, which varies on a loaded machine.
_RESERVE_SHARE = 0.04
#: Time kept back from the limit for the final re-simulation and the result (seconds).
_RESERVE_S = 0.05
#: Largest share of the limit given to the cost bound of :mod:`remat_core.bounds` (it takes under a second on
#: the 5,239-node shared graph, so this only matters under short limits).
_BOUND_SHARE = 0.15


#: Default ``stop_gap`` of :func:`solve_auto`: once :data:`DEFAULT_PATIENCE_S` have passed, the search stops at a
#: schedule within this share of its lower bound (the most that searching longer could still save); further
#: from its bound, the search uses the whole time limit (issue 37: a longer limit must be able to pay). The
#: adapters that plan while training waits pass their own (remat_torch: 5%, with its own patience).
DEFAULT_STOP_GAP = 0.01
#: Default ``patience_s`` of :func:`solve_auto` (seconds): the search never stops on ``stop_gap`` before this.
DEFAULT_PATIENCE_S = 8.0


#: A schedule within this share of its lower bound ends the search at once, before the patience is over.
_SETTLED_AT_ONCE = 0.001
#: Between ``stop_gap`` and this share of its lower bound, the search ends once nothing has improved for
#: ``patience_s`` (issue 36: the default call on 100-200-node models returns in seconds; torch_transformer_b4 at
#: 0.3 sits 1.6% above its bound). Further from the bound (the tightest budgets, 20-50% above the relaxation's
#: bound) the search goes on to the limit whatever its pace.
STALL_GAP = 0.05
#: The stall window (how long nothing may improve within STALL_GAP before the search ends) is at least this share
#: of an explicit time limit: a caller who gives 300 s gets 30 s windows, so a longer limit pays at 0.5/0.6 of the
#: peak (issue 37), while the default 60 s keeps ``patience_s`` (8 s > 6 s; issue 36's planning time).
STALL_SHARE = 0.1
#: Up to this many nodes the feasibility phase (:func:`_min_peak`, every DTR heuristic's bisection over the whole
#: budget range, where nothing fits) runs to its end whatever the time left, so that the smallest budget reported
#: is the same at any load and ``auto`` finds a schedule at that budget and above (CPU s of the whole phase on an
#: idle core: 0.01 at 245 nodes, 0.26 at 977, 1.0 at 2,011; 16.5 on LSTM_512's 5,239 nodes and 52 on 8,053, so
#: larger graphs keep the clock's limit).
CLOCK_FREE_MIN_PEAK_NODES = 2500
#: Moves of the anytime loop without a time limit: every heuristic, freeing rule and budget share once.
_UNLIMITED_MOVES = 120
#: Window programs of the windowed-MILP search without a time limit (each with its own time cap).
_UNLIMITED_WINDOWS = 20


def choose_path(graph: Graph, time_limit_s: float | None = None,
                memory_limit_bytes: int | None = DEFAULT_MODEL_BYTES_LIMIT) -> str:
    """The path ``auto`` takes on ``graph``: ``"ilp"``, ``"lp-rounding"`` or ``"large"``.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> choose_path(linear_graph(8))
    'ilp'
    """
    size = estimate_milp_size(graph)
    if not size.fits(memory_limit_bytes):
        return "large"
    if time_limit_s is not None and size.nonzeros > NONZEROS_PER_SECOND * float(time_limit_s):
        return "large"   # its LP alone would not finish: the time goes to the large-graph methods instead
    if size.nonzeros <= ILP_MAX_NONZEROS:
        return "ilp"
    if size.nonzeros <= LP_MAX_NONZEROS:
        return "lp-rounding"
    return "large"


class _Best:
    """The cheapest verified schedule so far and the best lower bound."""

    def __init__(self, graph: Graph, budget_bytes: int):
        self.graph, self.budget = graph, budget_bytes
        self.result: RematResult | None = None
        self.method = ""
        self.lower_bound: float | None = None
        self.tried: dict[str, Any] = {}
        self.min_budget: int | None = None
        # the cheapest result with a stage schedule (the windowed MILP's start): a DTR run recorded as it ran may
        # be the best and have none
        self.staged: tuple[str, RematResult] | None = None
        self.improved_at = time.perf_counter()   # when the best result last changed
        # the stall window counts from here or from the last improvement, whichever is later (inf: the stall rule
        # is off, as for the windowed MILP under a long limit: _solve_auto)
        self.stall_from = self.improved_at

    def offer(self, name: str, res: RematResult) -> None:
        self.tried[name] = {"status": res.status.value, "objective": res.objective,
                            "lower_bound": res.lower_bound, "time_s": round(res.solve_time_s, 3)}
        if "computations" in res.stats:
            self.tried[name]["computations"] = int(res.stats["computations"])
        if res.lower_bound is not None and res.status is not SolveStatus.INFEASIBLE:
            self.lower_bound = res.lower_bound if self.lower_bound is None else max(self.lower_bound, res.lower_bound)
        mb = res.stats.get("method_min_budget_bytes")
        if mb is not None:
            self.min_budget = int(mb) if self.min_budget is None else min(self.min_budget, int(mb))
        # on a tie a stage schedule wins over a run recorded only as it ran (dtr(orders)): it can be proven optimal
        if res.success and (self.result is None or res.objective < self.result.objective or (
                res.objective == self.result.objective and self.result.schedule is None
                and res.schedule is not None)):
            self.result, self.method = res, name
            self.improved_at = time.perf_counter()
        if res.success and res.schedule is not None:
            cost = res.schedule.cost(self.graph)
            if self.staged is None or cost < self.staged[1].schedule.cost(self.graph):
                self.staged = (name, res)


def _run(name: str, graph: Graph, budget_bytes: int, **options: Any) -> RematResult | None:
    """``solve(graph, budget, name)``, or ``None`` where the method does not apply to this graph. DTR runs
    pin ``order="stages"``: every cap and estimate here is sized from the stage run's time per computation
    (the runs in other orders cost several times more per computation and ignore ``max_compute_factor``)."""
    from . import solve

    if name == "dtr":
        options.setdefault("order", "stages")
    try:
        return solve(graph, budget_bytes, method=name, **options)
    except GraphValidationError:   # chain-only methods on a general DAG
        return None


def _exact(method: str, graph: Graph, budget_bytes: int, options: dict[str, Any], deadline: float | None
           ) -> tuple[RematResult | None, str]:
    """Run a formulation-based method: in a child killed at ``deadline`` (their own limits overshoot), else here."""
    from ._deadline import call_with_deadline, in_child

    if deadline is None:
        return _run(method, graph, budget_bytes, **options), ""
    if in_child():
        left = deadline - time.perf_counter() - _RESERVE_S
        if left <= 0.1:
            return None, f"{method}: not started, {left:.2f} s left"
        return _run(method, graph, budget_bytes, time_limit_s=left, **options), ""
    return call_with_deadline(method, graph, budget_bytes, options, deadline - _RESERVE_S)


#: How much longer a computation of these heuristics takes than one of the default heuristic, for their
#: caps: their walks over evicted values grow with the evicted set (on LSTM_512 at tight budgets, about 60x
#: for h_dtr's neighbourhood and up to 25x for msps's ancestors, 4x at half the activation memory). msps's
#: factor is below its worst case so that its run fits a 10 s limit at half the memory of LSTM_512 on a
#: loaded machine; its run has no keep_dead rerun (:func:`_other_dtr_heuristics`), so at its worst it takes
#: 25/16 of its half of the time left.
_DTR_SLOWDOWN = {"h_dtr": 60.0, "msps": 16.0}
#: The computation cap (a multiple of the node count) of auto's first DTR run, before a run's time per
#: computation is known: a run that needs more is thrashing at that budget.
_FIRST_DTR_COMPUTE_FACTOR = 10.0


def _seconds_per_computation(best: _Best, name: str, slowdown: float = 1.0) -> float | None:
    """A DTR run's time per computation as recorded in ``best.tried[name]`` (times ``slowdown``), or ``None``
    if that run did not happen (time_s is rounded to ms: at least 0.5 ms)."""
    ref = best.tried.get(name, {})
    if not (ref.get("computations") and "time_s" in ref):
        return None
    return max(ref["time_s"], 5e-4) / ref["computations"] * slowdown


_dtr_warm = False
_simulator_warm = False


def _warm_simulator() -> None:
    """Simulate a 4-node chain once per process: the first simulation imports numba and loads its compiled
    kernels (1.5 s idle, 3-5 s at a load average of 10), and when that was the timed checkpoint-all run every
    later step was sized from it (random_training_graph(66, 3, seed=7) at its smallest budget with 10 s: the
    baselines skipped and the search cut to 4 s, or no schedule at all)."""
    global _simulator_warm
    if _simulator_warm:
        return
    _simulator_warm = True
    from ..schedule import Schedule
    from ..simulate import simulate
    from ..zoo import linear_graph

    g = linear_graph(4)
    simulate(g, Schedule.checkpoint_all(g), timeline=False)


def _warm_dtr() -> None:
    """Run DTR once on a 4-node chain (its run as it runs, and the stage run of the anytime search), once per
    process: the first run compiles the kernels (3-6 s at a load average of 20 since 44a60c0), and a first
    timed run that includes it made every later DTR estimate too slow (random_training_graph(12, 3, seed=7) at
    its smallest found budget: msps and the feasibility phase skipped, no schedule in 10 s; found 458 once warm)."""
    global _dtr_warm
    if _dtr_warm:
        return
    _dtr_warm = True
    from ..zoo import linear_graph
    from .dtr import dtr_run

    g = linear_graph(4)
    budget = int(g.min_budget_lower_bound_bytes())
    _run("dtr", g, budget, find_min_budget=False)
    dtr_run(g, budget, "h_dtr_eq", 0, 10.0)


def warm_kernels() -> None:
    """Load (and on a fresh install compile) the simulator's and DTR's kernels now, not inside the first
    timed call: numba compiles a kernel into its on-disk cache at its first use, several seconds that a
    first ``auto`` call with a short ``time_limit_s`` would spend past its limit. ``make`` runs this once
    after installing. (A process that finds the cache cold runs the reference kernels while a child compiles:
    :mod:`remat_core.kernels`.)"""
    from .. import kernels

    kernels.compile_numba()
    _warm_simulator()
    _warm_dtr()


def _dtr_within(best: _Best, graph: Graph, budget_bytes: int, left: Any, name: str,
                **options: Any) -> RematResult | None:
    """One DTR run that cannot outlast the time left: its computation cap is set from the time a computation
    took in the baselines' DTR run (that first run itself is capped at :data:`_FIRST_DTR_COMPUTE_FACTOR`), so
    that a thrashing run stops in time (a run is not interruptible otherwise); ``None`` (and ``skipped``) when
    even one pass does not fit."""
    _warm_dtr()   # so that the time of this run, which sizes every later DTR run, is the run's alone
    remaining = left()
    cap = None
    if remaining is not None:
        heuristic = options.get("heuristic", "")
        per = _seconds_per_computation(best, f"dtr({heuristic})") if heuristic else None   # its own run
        if per is None:
            per = _seconds_per_computation(best, "dtr", _DTR_SLOWDOWN.get(heuristic, 1.0))
        if per is not None and options.get("keep_dead"):
            per *= KEEP_DEAD_SLOWDOWN.get(heuristic, 1.0)
        if per is not None:
            # half the time left: the time per computation is a rough estimate from another run
            cap = 0.5 * remaining / max(per * graph.n, 1e-9)
        else:   # the first run: a computation costs far less than a simulation step of the dense schedule
            cap = _FIRST_DTR_COMPUTE_FACTOR if remaining > 0.5 and options.get("heuristic") not in _DTR_SLOWDOWN else 0.0
        if cap < 1.2:
            best.tried[name] = {"status": "skipped", "message": "too little time left"}
            return None
        cap = min(cap, 50.0)
    res = _run("dtr", graph, budget_bytes, find_min_budget=False,
               **({} if cap is None else {"max_compute_factor": cap}), **options)
    if res is not None:
        best.offer(name, res)
    return res


#: How many stage runs' time DTR's runs in several orders may take (``order="auto"``: two or three orders, each
#: run as it runs at 5-10x the stage run's CPU per computation): they start only when this many fit in a
#: quarter of the time left.
_ORDERS_SLOWDOWN = 30.0


def _dtr_orders(best: _Best, graph: Graph, budget_bytes: int, left: Any) -> None:
    """``solve(..., "dtr")``'s default run (``order="auto"``: the runs as they run in the graph's numbering and
    in memory-aware orders, recorded as sequences) as one more candidate, so that ``auto`` is never worse than
    plain ``dtr`` (on InceptionV4_64 at 0.5 it was 0.002% cheaper than every stage schedule auto found). Its
    cap cannot be set from the stage run, so it runs only when the time left is ample."""
    from . import _METHODS

    if "dtr" not in _METHODS or "dtr(orders)" in best.tried:
        return
    first = best.tried.get("dtr", {}).get("time_s")
    remaining = left()
    if remaining is not None and (first is None or _ORDERS_SLOWDOWN * max(first, 1e-3) > 0.25 * remaining):
        best.tried["dtr(orders)"] = {"status": "skipped", "message": "too little time left"}
        return
    res = _run("dtr", graph, budget_bytes, find_min_budget=False, order="auto")
    if res is not None:
        best.offer("dtr(orders)", res)


def _other_dtr_heuristics(best: _Best, graph: Graph, budget_bytes: int, left: Any) -> None:
    """Offer DTR's other eviction heuristics: on large graphs no single one is best or reaches the smallest
    budget everywhere (benchmarks/README.md, section dtr); each run is capped by :func:`_dtr_within`."""
    from . import _METHODS
    from .dtr import DEFAULT_HEURISTIC, HEURISTICS

    if "dtr" not in _METHODS:
        return
    # msps first: across the shared graphs it is most often the best and the one reaching the smallest budgets
    # (benchmarks/README.md, section dtr); h_dtr, the slowest, last
    order = sorted(HEURISTICS, key=lambda h: (h != "msps", h == "h_dtr"))
    for heuristic in order:
        if heuristic in (DEFAULT_HEURISTIC, "random"):
            continue
        # no keep_dead rerun on failure here: _keep_dead_runs runs those later, each with its own cap
        _dtr_within(best, graph, budget_bytes, left, f"dtr({heuristic})", heuristic=heuristic, keep_dead=False)


def _dtr_rescue(best: _Best, graph: Graph, budget_bytes: int, left: Any) -> None:
    """Where nothing fits yet: msps again, the heuristic that reaches the smallest budgets on most graphs
    (benchmarks/README.md, section dtr), with a cap from the time left. Its earlier cap came from an estimate
    (the first run's time per computation, which a load spike can inflate several times over, times
    :data:`_DTR_SLOWDOWN`), so it may have been skipped or stopped; when it ran, its own time per computation
    sizes the cap now."""
    from . import _METHODS

    remaining = left()
    if "dtr" not in _METHODS or best.result is not None or remaining is None or "dtr(msps, rescue)" in best.tried:
        return
    per = _seconds_per_computation(best, "dtr(msps)")
    done = best.tried["dtr(msps)"]["computations"] / graph.n if per is not None else 0.0
    if per is None:
        per = _seconds_per_computation(best, "dtr", _DTR_SLOWDOWN["msps"])
    if per is None:
        return
    cap = min(0.8 * remaining / max(per * graph.n, 1e-9), 50.0)
    if cap < max(1.2, 1.2 * done):
        return   # not enough time to go meaningfully further than the run that failed
    res = _run("dtr", graph, budget_bytes, find_min_budget=False, max_compute_factor=cap, heuristic="msps",
               keep_dead=False)
    if res is not None:
        best.offer("dtr(msps, rescue)", res)


def _smallest_dtr_budget(best: _Best, graph: Graph, budget_bytes: int, left: Any) -> None:
    """Where nothing fits: the smallest budget at which DTR's default run succeeds (its bisection, about a dozen
    runs), to report with the result, while time allows."""
    from . import _METHODS

    first = best.tried.get("dtr", {}).get("time_s")
    remaining = left()
    if "dtr" not in _METHODS or first is None or (remaining is not None and 12 * first > remaining):
        return
    # capped like the first run, so that no bisection step thrashes past the estimate
    res = _run("dtr", graph, budget_bytes, max_compute_factor=_FIRST_DTR_COMPUTE_FACTOR)
    if res is not None and res.stats.get("method_min_budget_bytes") is not None:
        mb = int(res.stats["method_min_budget_bytes"])
        best.min_budget = mb if best.min_budget is None else min(best.min_budget, mb)


def _relaxation_bound(best: _Best, graph: Graph, budget_bytes: int, time_limit_s: float | None, left: Any) -> None:
    """Raise ``best``'s lower bound to :func:`~remat_core.bounds.cost_lower_bound`'s, within
    :data:`_BOUND_SHARE` of the limit and half of the time left (it stops at its own limit)."""
    from ..bounds import cost_lower_bound

    remaining = left()
    limit = None
    if remaining is not None:
        limit = min(_BOUND_SHARE * float(time_limit_s), 0.5 * remaining)
        if limit < 0.05:
            best.tried["bound"] = {"status": "skipped", "message": "too little time left"}
            return
    try:
        # y integer too: a few hundredths of a percent more, in under a second at 245-497 nodes (remat_core.bounds)
        res = cost_lower_bound(graph, budget_bytes, time_limit_s=limit, integer_y=True)
    except Exception as exc:   # the sum of the costs still stands
        log.warning("auto: the cost bound failed: %s: %s", type(exc).__name__, exc)
        best.tried["bound"] = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        return
    best.tried["bound"] = {"status": res.method, "lower_bound": res.value, "rows": res.rows, "cuts": res.cuts,
                           "converged": res.converged, "integer": res.integer, "time_s": round(res.time_s, 3)}
    if np.isfinite(res.value):
        best.lower_bound = max(best.lower_bound or 0.0, res.value)


def _keep_dead_runs(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None, sim_s: float,
                    left: Any) -> None:
    """Offer DTR under its ``keep_dead`` freeing rule for each heuristic, and the polish of each such run,
    cheapest first, while time is left.

    Its schedules usually cost more than the default rule's, but their
    recomputations are shorter, so that :func:`~remat_core.solvers.segments.polish`
    can turn more of them into kept values (benchmarks/README.md, section polish)."""
    from . import _METHODS
    from .dtr import HEURISTICS

    if "dtr" not in _METHODS or best.result is None or best.result.status is SolveStatus.OPTIMAL:
        return
    found: list[tuple[str, RematResult]] = []
    # h_dtr last: its neighbourhood walks make its runs the slowest
    for heuristic in sorted((h for h in HEURISTICS if h != "random"), key=lambda h: h == "h_dtr"):
        name = f"dtr({heuristic}, keep_dead)"
        res = _dtr_within(best, graph, budget_bytes, left, name, heuristic=heuristic, keep_dead=True)
        if res is None:
            continue
        if res.success:
            found.append((name, res))
    for candidate in sorted(found, key=lambda c: c[1].objective):
        if candidate[1] is not best.result:
            _polish(best, graph, budget_bytes, deadline, sim_s, candidate=candidate)


def _polish(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None, sim_s: float,
            candidate: tuple[str, RematResult] | None = None) -> None:
    """Offer :func:`~remat_core.solvers.segments.polish` of the best schedule (or of ``candidate``, a name and
    a result), if it is not proven and time allows."""
    from . import verify_result
    from .segments import polish

    name, res = candidate if candidate is not None else (best.method, best.result)
    if res is None or res.schedule is None or res.status is SolveStatus.OPTIMAL:
        return   # (a DTR run that succeeded only as it runs has a sequence and no stage schedule to polish)
    if deadline is not None and deadline - time.perf_counter() < 8 * sim_s + 0.2:
        return   # a round is a timeline simulation, the optimal R and another simulation
    t0 = time.perf_counter()
    sched = polish(graph, res.schedule, budget_bytes, deadline=deadline)
    if sched is res.schedule:
        return
    out = RematResult(status=SolveStatus.FEASIBLE, schedule=sched, budget_bytes=budget_bytes,
                      method=f"polish({name})", message=f"{name}'s schedule, polished: {res.message}")
    verify_result(graph, out)
    out.solve_time_s = time.perf_counter() - t0
    best.offer(out.method, out)


def _settled_rule(best: _Best, start: float, stop_gap: float, patience_s: float, stall_s: float | None = None) -> Any:
    """The rule that ends the search while time is left: ``patience_s`` passed and the best schedule within
    ``stop_gap`` of the best lower bound (searching on could save at most that share), or within STALL_GAP with
    nothing improved for ``stall_s`` (default ``patience_s``)."""
    stall_s = patience_s if stall_s is None else stall_s
    def settled() -> bool:
        if best.result is None or best.lower_bound is None:
            return False
        # at once within 0.1% (the first answer is as good as any), else after the patience within stop_gap, and
        # within STALL_GAP once nothing has improved for the patience
        now = time.perf_counter()
        if best.lower_bound <= 0:   # a graph whose nodes cost nothing: any schedule at cost 0 is optimal
            gap = 0.0 if best.result.objective <= 0 else math.inf
        else:
            gap = best.result.objective / best.lower_bound - 1.0 - 1e-12
        if gap <= min(stop_gap, _SETTLED_AT_ONCE):
            return True
        if now - start < patience_s:
            return False
        stall = STALL_GAP if stop_gap > 0 else 0.0   # stop_gap=0: no early stop at all
        return gap <= stop_gap or (gap <= stall and now - max(best.improved_at, best.stall_from) >= stall_s)
    return settled


def _child_done(early: Any) -> bool:
    """Whether the exact method's child has finished (its result written, or the process gone)."""
    import os

    return early.proc is None or os.path.exists(early.out) or early.proc.poll() is not None


def _wait_exact(early: Any, settled: Any) -> tuple[RematResult | None, str]:
    """The exact child's result, unless the search settles first (see :func:`_settled_rule`): then the child is
    stopped and ``None`` returned with why."""
    while not _child_done(early) and time.perf_counter() < early.deadline:
        if settled():
            early.close()
            return None, f"{early.method}: stopped once the schedule was within stop_gap of the lower bound"
        time.sleep(0.05)
    return early.wait()


#: The largest program (estimated nonzeros) :func:`_feasibility_milp` solves in this process: what ``ilp``
#: itself solves in-process under a limit (_deadline.guard's threshold); HiGHS stops its search, not its root
#: work, at a limit, which stays short on such programs.
FEASIBILITY_MAX_NONZEROS = 150_000


def _feasibility_milp(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None,
                      interrupt: Any = None) -> bool:
    """Where no heuristic schedule fits: the MILP with no objective (is there any schedule within the budget?),
    HiGHS without presolve, for half of the time to ``deadline`` (the anytime restarts get the rest) or until
    ``interrupt()``. Returns ``True`` when it proves that none fits; a schedule it finds is offered (then the
    search improves on it).

    It answers about three times sooner than the cost MILP: on a 36-node torch MLP at 0.5 of its activation
    memory 3.2 CPU s against 10 for ``ilp`` (the cost MILP with presolve: 8; benchmarks/README.md, section
    torch-planning), where ``auto`` at its default limit had said "does not prove there is none" under load."""
    if best.result is not None or budget_bytes < graph.min_budget_lower_bound_bytes() or "feasibility" in best.tried:
        return False
    remaining = None if deadline is None else deadline - time.perf_counter()
    if (remaining is not None and remaining < 0.5) or estimate_milp_size(graph).nonzeros > FEASIBILITY_MAX_NONZEROS:
        return False
    try:
        from .backends.highs import solve as highs_solve
    except ImportError:   # HiGHS is optional
        return False
    from ..formulation import build_milp
    from .ilp import _decoded

    t0 = time.perf_counter()
    sf = build_milp(graph, budget_bytes, "strong")
    out = highs_solve(np.zeros_like(sf.c), sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                      time_limit_s=None if deadline is None else max(0.1, 0.5 * (deadline - time.perf_counter())),
                      options={"presolve": "off"}, interrupt=interrupt)
    entry: dict[str, Any] = {"status": out.status.value, "nodes": out.stats.get("nodes"),
                             "time_s": round(time.perf_counter() - t0, 3)}
    best.tried["feasibility"] = entry
    if out.status is SolveStatus.INFEASIBLE:
        return True
    if out.x is not None:
        schedule, _ = _decoded(graph, sf, np.asarray(out.x), budget_bytes)
        if schedule is not None:
            from . import verify_result

            best.offer("feasibility", verify_result(graph, RematResult(
                status=SolveStatus.FEASIBLE, schedule=schedule, budget_bytes=int(budget_bytes), method="feasibility",
                message="a schedule of the MILP without objective")))
            best.tried["feasibility"].update(nodes=entry["nodes"], time_s=entry["time_s"])
    return False


def _min_peak(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None) -> None:
    """Feasibility first (:func:`~remat_core.solvers.anytime.min_peak_schedules`): where nothing fits yet, the
    schedules of the smallest peaks DTR's heuristics reach over the whole budget range (the same runs whatever
    the budget, so what fits one budget fits every larger one); their smallest peak is the hint reported.

    Up to :data:`CLOCK_FREE_MIN_PEAK_NODES` nodes it runs to its end whatever ``deadline``: then the hint, and
    the schedule found at every budget from the hint up, do not depend on the time given or the machine's load
    (a starved search once reported 0.45 of a model's activation memory instead of 0.33)."""
    from . import _METHODS
    from .anytime import min_peak_schedules

    if "dtr" not in _METHODS or "min-peak" in best.tried:
        return
    t0 = time.perf_counter()
    clock_free = graph.n <= CLOCK_FREE_MIN_PEAK_NODES
    per = _seconds_per_computation(best, "dtr")   # the baselines' run of the default heuristic, when it ran
    peak = min_peak_schedules(graph, best.offer, budget_bytes, deadline=None if clock_free else deadline,
                              seconds_per_computation=None if per is None or clock_free else {"h_dtr_eq": per})
    best.tried["min-peak"] = {"status": "done" if peak is not None else "none found", "min_peak_bytes": peak,
                              "clock_free": clock_free, "time_s": round(time.perf_counter() - t0, 3)}
    if peak is not None:
        best.min_budget = peak if best.min_budget is None else min(best.min_budget, peak)


def _anytime(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None, stop: Any,
             moves: Any = None) -> None:
    """The anytime improvement loop (:func:`~remat_core.solvers.anytime.improve`) until ``deadline`` or
    ``stop()``; without a deadline, its moves run out. ``moves``: an iterator shared by several calls, each
    going on where the last one stopped."""
    from . import _METHODS
    from .anytime import improve, restart_moves

    if "dtr" not in _METHODS or (best.result is not None and best.result.status is SolveStatus.OPTIMAL):
        return
    t0 = time.perf_counter()
    # without a limit, the deterministic restarts only (not the random heuristic's endless seeds)
    per = {}
    for heuristic in ("h_dtr_eq", "msps", "h_dtr_local", "lru", "largest", "h_dtr"):   # the runs timed so far
        measured = _seconds_per_computation(best, "dtr" if heuristic == "h_dtr_eq" else f"dtr({heuristic})")
        if measured is not None:
            per[heuristic] = measured
    if moves is None:
        moves = restart_moves()
    info = improve(graph, budget_bytes, best.offer, lambda: best.result, lower_bound=best.lower_bound,
                   deadline=deadline, stop=stop, max_moves=None if deadline is not None else _UNLIMITED_MOVES,
                   seconds_per_computation=per, moves=moves)
    # one entry for the loop, not one per move (hundreds)
    for name in [k for k in best.tried if k.startswith("restart(")]:
        if name != best.method:
            del best.tried[name]
    done = best.tried.get("anytime", {"moves": 0, "improved": 0, "time_s": 0.0})
    best.tried["anytime"] = {"status": info["why"], "moves": done["moves"] + info["moves"],
                             "improved": done["improved"] + info["improved"],
                             "time_s": round(done["time_s"] + time.perf_counter() - t0, 3)}


def _lns(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None, stop: Any) -> None:
    """The windowed-MILP search (:func:`~remat_core.solvers.lns.improve_windows`) on the best schedule until
    ``deadline`` or ``stop()``; without a deadline, :data:`_UNLIMITED_WINDOWS` window programs."""
    from . import verify_result
    from .lns import WINDOW_NODES, improve_windows

    if best.staged is None or best.result.status is SolveStatus.OPTIMAL or (
            deadline is not None and deadline <= time.perf_counter()):
        return   # nothing to improve: no stage schedule (a DTR run recorded only as it ran has none), or optimal
    method, res = best.staged
    t0 = time.perf_counter()
    name = f"lns({method})" if not method.startswith("lns(") else method

    def offer(schedule: Any) -> None:
        out = RematResult(status=SolveStatus.FEASIBLE, schedule=schedule, budget_bytes=budget_bytes, method=name,
                          message=f"{method}'s schedule, re-optimized by the exact MILP on windows of stages")
        verify_result(graph, out)
        out.solve_time_s = time.perf_counter() - t0
        best.offer(name, out)

    try:
        # rounds without end (wider windows, more nodes a program as time goes on), each program limited in
        # nodes, not seconds: the same moves whatever the load, so that a longer limit is never worse
        _, info = improve_windows(graph, res.schedule, budget_bytes, offer=offer, deadline=deadline, stop=stop,
                                  lower_bound=best.lower_bound, rounds=None, window_s=None,
                                  window_nodes=WINDOW_NODES,
                                  max_windows=None if deadline is not None else _UNLIMITED_WINDOWS)
    except Exception as exc:   # the search only improves what is there: its failure must not cost the schedule
        log.warning("auto: lns failed: %s: %s", type(exc).__name__, exc)
        best.tried["lns"] = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        return
    best.tried["lns"] = {"status": info["why"], "windows": info["windows"], "improved": info["improved"],
                         "rounds": info["rounds"], "time_s": round(time.perf_counter() - t0, 3)}


def _alternate(best: _Best, graph: Graph, budget_bytes: int, deadline: float | None, settled: Any,
               moves: Any) -> None:
    """The end of the large path under a long limit (a stall window above ``patience_s``): the windowed MILP
    and the restarts take turns, each until nothing has improved for the stall window (the stall rule counts
    from the turn's start; beyond STALL_GAP it never ends a turn, so the MILP then runs to the limit as
    before). The MILP runs again only from a new best schedule (from the same one it would repeat its windows),
    and to the limit once the restarts have run out. Why: at 0.6 of the peak of the 497-node layered graph
    the MILP ran 232 s of 300 s without an improvement while the restarts it had cut short (51 moves at a load
    of 14) still held cheaper schedules (finer budget shares, ``anytime._fine_scales``); at 0.5 of the 245-node
    one, before 16707c2, the reverse: the restarts stalled and the MILP never ran."""
    lns_from = None   # the schedule the MILP last started from
    spent = {"windows": 0, "improved": 0, "time_s": 0.0}
    while deadline is None or time.perf_counter() < deadline:
        out_of_moves = best.tried.get("anytime", {}).get("status") == "moves exhausted"
        ran = False
        if best.staged is not None and (best.staged[1] is not lns_from or out_of_moves):
            lns_from = best.staged[1]
            best.stall_from = math.inf if out_of_moves else time.perf_counter()
            before = best.tried.get("lns")
            _lns(best, graph, budget_bytes, deadline, stop=settled)
            after = best.tried.get("lns")
            if after is not before and after is not None and "windows" in after:   # one entry for every turn
                ran = after["windows"] > 0
                for key in spent:
                    spent[key] += after[key]
                after.update(windows=spent["windows"], improved=spent["improved"], time_s=round(spent["time_s"], 3))
        if out_of_moves:
            return
        moves_before = best.tried.get("anytime", {}).get("moves", 0)
        best.stall_from = time.perf_counter()
        _anytime(best, graph, budget_bytes, deadline, stop=settled, moves=moves)
        if not ran and best.tried.get("anytime", {}).get("moves", 0) == moves_before:
            return   # neither turn did anything: settled within stop_gap, or nothing left to run
    best.stall_from = math.inf


def solve_auto(graph: Graph, budget_bytes: int, time_limit_s: float | None = 60.0,
               memory_limit_bytes: int | None = DEFAULT_MODEL_BYTES_LIMIT, threads: int | None = None,
               verbose: bool = False, stop_gap: float = DEFAULT_STOP_GAP,
               patience_s: float = DEFAULT_PATIENCE_S) -> RematResult:
    """The best schedule found within ``time_limit_s``, choosing the method by problem size.

    Parameters
    ----------
    graph : Graph
    budget_bytes : int
    time_limit_s : float or None
        Wall-clock limit for the whole call (default 60 s); ``None``: no limit
        (the exact MILP then runs to its proof on small graphs).
    memory_limit_bytes : int or None
        Largest estimated model (bytes) a formulation-based method may build;
        above it the large-graph path is taken.
    threads : int, optional
        Passed to ``ilp``.
    verbose : bool
        Solver logs.
    stop_gap, patience_s : float
        The search continues only while it pays: once ``patience_s`` seconds
        have passed (default 8), it stops as soon as its schedule costs at
        most ``1 + stop_gap`` (default 1.01) times its lower bound, the exact
        method's child included; within 0.1% it stops at once; up to
        :data:`STALL_GAP` (5%) above its bound it stops once nothing has
        improved for ``patience_s`` or a tenth of ``time_limit_s``
        (:data:`STALL_SHARE`), whichever is longer (when the tenth is
        longer, such a stall ends only the large path's restarts: its
        windowed MILP then runs on). Further from its bound it uses the whole
        limit (docs/large_graphs.rst, *When it stops*). ``stop_gap=0`` uses
        the whole limit (or stops at a proof of optimality).

    Returns
    -------
    RematResult
        ``OPTIMAL`` when the MILP proved it, else ``FEASIBLE`` with the best
        schedule found and a lower bound. Without a schedule:
        ``INFEASIBLE`` when that is proven (the budget is below what one node
        needs, or the exact method proved it), else ``NO_SOLUTION``
        (``stats["min_budget_bytes"]``: the smallest peak a heuristic reached,
        when known; on graphs up to :data:`CLOCK_FREE_MIN_PEAK_NODES` nodes it
        does not depend on the time given, and a call at that budget finds a
        schedule). ``stats["path"]`` says which path ran,
        ``stats["chosen"]`` which method gave the schedule and
        ``stats["tried"]`` what each method returned.

    Examples
    --------
    >>> from remat_core import solve
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(6)
    >>> res = solve(g, 8, method="auto", time_limit_s=10)
    >>> res.status.value, res.stats["path"]
    ('optimal', 'ilp')
    """
    from . import validate_time_limit

    validate_time_limit(time_limit_s)
    for name, value in (("stop_gap", stop_gap), ("patience_s", patience_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
                value >= 0 and np.isfinite(value)):
            raise ValueError(f"`{name}` must be a finite number >= 0; got {value!r}")
    start = time.perf_counter()
    left = (lambda: None) if time_limit_s is None else (  # noqa: E731
        lambda: float(time_limit_s) - (time.perf_counter() - start) - _RESERVE_S)
    path = choose_path(graph, time_limit_s, memory_limit_bytes)
    from ._deadline import DeadlineChild, in_child

    early: DeadlineChild | None = None
    if path in ("ilp", "lp-rounding") and time_limit_s is not None and not in_child():
        # the exact method starts first, in a child killed at the limit, and runs beside the heuristics below
        # (it warm-starts itself with them); it gets the whole limit rather than what the heuristics leave
        opts0: dict[str, Any] = {"verbose": verbose}
        if path == "ilp":
            opts0["threads"] = threads
        early = DeadlineChild(path, graph, budget_bytes, opts0, start + float(time_limit_s) - _RESERVE_S)
    try:
        return _solve_auto(graph, budget_bytes, time_limit_s, threads, verbose, start, left, path, early,
                           float(stop_gap), float(patience_s))
    finally:
        if early is not None:
            early.close()


def _solve_auto(graph: Graph, budget_bytes: int, time_limit_s: float | None, threads: int | None, verbose: bool,
                start: float, left: Any, path: str, early: Any, stop_gap: float, patience_s: float) -> RematResult:
    from . import _METHODS

    best = _Best(graph, budget_bytes)
    stall_s = patience_s if time_limit_s is None else max(patience_s, STALL_SHARE * float(time_limit_s))
    settled = _settled_rule(best, start, stop_gap, patience_s, stall_s)
    sim_s = 0.0   # one simulation's time, measured on checkpoint-all (the first baseline)
    for name in BASELINES:
        if name not in _METHODS:
            continue
        remaining = left()
        if name != "dtr" and remaining is not None and _SIMULATIONS.get(name, 2) * sim_s > 0.5 * remaining:
            best.tried[name] = {"status": "skipped", "message": "too little time left for its family of schedules"}
            continue
        if name == "checkpoint-all":
            _warm_simulator()   # so that its time, which sizes every later step, is this graph's simulation alone
        t0 = time.perf_counter()
        try:
            if name == "dtr":   # one run, capped to the time left (the others' estimates come from it)
                _dtr_within(best, graph, budget_bytes, left, "dtr")
                _dtr_orders(best, graph, budget_bytes, left)
                continue
            res = _run(name, graph, budget_bytes)
        except Exception as exc:   # a broken heuristic must not cost the others' schedules
            log.warning("auto: %s failed: %s: %s", name, type(exc).__name__, exc)
            best.tried[name] = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
            continue
        if name == "checkpoint-all":
            sim_s = time.perf_counter() - t0
        if res is not None:
            best.offer(name, res)
    cost_floor = float(np.sum(graph.cost))   # every node is computed at least once
    best.lower_bound = cost_floor if best.lower_bound is None else max(best.lower_bound, cost_floor)
    # solve() re-simulates the result after this returns: keep that time back too
    deadline = None if time_limit_s is None else (
        start + (1 - _RESERVE_SHARE) * float(time_limit_s) - _RESERVE_S - 2 * sim_s)
    if path == "large":   # no formulation runs there: the relaxation of remat_core.bounds gives the bound
        _relaxation_bound(best, graph, budget_bytes, time_limit_s, left)
    elif early is not None:
        # the exact method runs in its child meanwhile, so this process's time is free: the relaxation's bound
        # (at times above the LP's: the closure rows), and DTR's other heuristics, polished, which reach
        # budgets that neither the baselines nor the rounding reach (U-Net_6 at 0.21 of its activation memory)
        _relaxation_bound(best, graph, budget_bytes, time_limit_s, left)
        _other_dtr_heuristics(best, graph, budget_bytes, left)
        _polish(best, graph, budget_bytes, deadline, sim_s)

    stopped = ""   # why the exact path gave no answer (its child was stopped at the limit)
    if path in ("ilp", "lp-rounding"):
        opts: dict[str, Any] = {"verbose": verbose}
        if path == "ilp":
            # the cheapest result with a stage schedule (a DTR result recorded only as it ran has none)
            opts.update(threads=threads, warm_start=best.staged[1].schedule if best.staged is not None else True)
        if early is not None:
            if best.result is None:
                _min_peak(best, graph, budget_bytes, deadline)
            if path == "ilp" and _feasibility_milp(best, graph, budget_bytes, deadline, lambda: _child_done(early)):
                early.close()   # proven: the exact child has nothing left to find
                res, why = None, ""
            else:
                _anytime(best, graph, budget_bytes, deadline, stop=lambda: _child_done(early) or settled())
                res, why = _wait_exact(early, settled)
        elif path == "ilp" and _feasibility_milp(best, graph, budget_bytes, deadline):
            res, why = None, ""
        else:
            if path == "ilp" and best.staged is not None:   # the feasibility MILP's schedule, where it found one
                opts["warm_start"] = best.staged[1].schedule
            res, why = _exact(path, graph, budget_bytes, opts,
                              None if time_limit_s is None else start + float(time_limit_s))
        if res is not None:
            best.offer(path, res)
        elif why:
            best.tried[path] = {"status": "stopped", "message": why}
            stopped = why
    if path != "large" and best.lower_bound <= cost_floor and "bound" not in best.tried:
        _relaxation_bound(best, graph, budget_bytes, time_limit_s, left)   # the exact method gave no bound
    hard_deadline = deadline

    def soft() -> float | None:
        """The deadline of the next step: brought forward to the end of the patience once the schedule is within
        stop_gap of the bound, to a patience after the last improvement within STALL_GAP, and to now within 0.1%
        (the rule of :func:`_settled_rule`)."""
        if hard_deadline is None or best.result is None or not best.lower_bound:
            return hard_deadline
        gap = best.result.objective / best.lower_bound - 1.0
        if gap <= min(stop_gap, _SETTLED_AT_ONCE):
            return min(hard_deadline, time.perf_counter())
        if gap <= stop_gap:
            return min(hard_deadline, start + patience_s)
        if gap <= STALL_GAP and stop_gap > 0:
            return min(hard_deadline, max(start, best.improved_at, best.stall_from) + stall_s)
        return hard_deadline

    hard_left = left if deadline is None else (lambda: deadline - time.perf_counter())  # noqa: E731
    if deadline is not None:
        left = lambda: soft() - time.perf_counter()  # noqa: E731
    if path == "large":
        _other_dtr_heuristics(best, graph, budget_bytes, hard_left)   # the strongest starts: never cut short
        if best.result is None:   # msps at this budget with a cap from the time left, then the feasibility phase
            _dtr_rescue(best, graph, budget_bytes, hard_left)
        if best.result is None:
            _min_peak(best, graph, budget_bytes, deadline)
        _polish(best, graph, budget_bytes, deadline, sim_s)   # cheap and often the best step: never cut short
        # the cheap steps before the coarse MILP, which takes all the time it is given: the keep_dead runs, then
        # the anytime restarts with half of the time left (they go on after it, where they stopped)
        _keep_dead_runs(best, graph, budget_bytes, soft(), sim_s, left)
        from .anytime import restart_moves

        moves = restart_moves()
        half = None if hard_deadline is None else time.perf_counter() + 0.5 * max(0.0, hard_deadline - time.perf_counter())
        _anytime(best, graph, budget_bytes, half, stop=settled, moves=moves)
        for name in LARGE_GRAPH_METHODS:
            remaining = left()
            if name not in _METHODS or (remaining is not None and remaining <= 0.1):
                continue
            from . import get_method
            import inspect

            # half of the time left at most: the windowed MILP after it needs time too (segments took all of it
            # on a 55-node graph at its smallest budget, and it did not improve the schedule there)
            limit = None if remaining is None else 0.5 * remaining
            opts = {"time_limit_s": limit} if "time_limit_s" in inspect.signature(get_method(name)).parameters else {}
            if name == "segments" and best.staged is not None:
                opts["warm_start"] = best.staged[1].schedule
            try:
                res = _run(name, graph, budget_bytes, **opts)
            except Exception as exc:   # an optional method's failure must not cost the baselines' schedule
                log.warning("auto: %s failed: %s: %s", name, type(exc).__name__, exc)
                best.tried[name] = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
                continue
            if res is not None:
                best.offer(name, res)

    if path == "large":
        _dtr_rescue(best, graph, budget_bytes, left)
        if best.result is None:
            _min_peak(best, graph, budget_bytes, deadline)
        _anytime(best, graph, budget_bytes, deadline, stop=settled, moves=moves)
        if stall_s > patience_s:
            # a long limit (the default limit keeps the stall rule: issue 36's planning time): the windowed MILP
            # and the restarts take turns (_alternate)
            _alternate(best, graph, budget_bytes, deadline, settled, moves)
        else:
            # the restarts ran out (or the time): the exact MILP on windows of the best schedule's stages
            _lns(best, graph, budget_bytes, deadline, stop=settled)
    _polish(best, graph, budget_bytes, deadline, sim_s)
    stats: dict[str, Any] = {"path": path, "tried": best.tried, "chosen": best.method,
                             "estimated_nonzeros": estimate_milp_size(graph).nonzeros}
    if best.result is None:   # feasibility first, if it has not run yet: it may find a schedule that fits
        _min_peak(best, graph, budget_bytes, deadline)
        stats["chosen"] = best.method
    if best.result is None:
        if best.min_budget is None:
            _smallest_dtr_budget(best, graph, budget_bytes, left)
        lower = graph.min_budget_lower_bound_bytes()
        proven = budget_bytes < lower or "infeasible" in (best.tried.get(path, {}).get("status"),
                                                          best.tried.get("feasibility", {}).get("status"))
        hint = ""
        if best.min_budget is not None:
            stats["min_budget_bytes"] = best.min_budget
            stats["min_budget_lower_bound_bytes"] = lower
            hint = f"; the smallest budget at which a schedule was found: {_budget_words(graph, best.min_budget)}"
            if not proven:
                hint += f"; none exists below {_budget_words(graph, lower)}"
        within = _budget_words(graph, budget_bytes)
        if proven:
            return RematResult(status=SolveStatus.INFEASIBLE, stats=stats,
                               message=f"auto ({path} path): no schedule fits {within} (proven){hint}")
        if stopped:   # not a proof: the exact method did not finish
            return RematResult(status=SolveStatus.NO_SOLUTION, stats=stats,
                               message=f"auto ({path} path): no heuristic schedule fits {within} "
                                       f"and {stopped}{hint}")
        # the heuristics found nothing, which proves nothing: a schedule may exist
        return RematResult(status=SolveStatus.NO_SOLUTION, stats=stats,
                           message=f"auto ({path} path): no method found a schedule within {within} in "
                                   f"the time given; that does not prove there is none{hint}")
    res = best.result
    status = res.status if best.method == "ilp" and res.status is SolveStatus.OPTIMAL else SolveStatus.FEASIBLE
    if best.method == "checkpoint-all" and res.status is SolveStatus.OPTIMAL:
        status = SolveStatus.OPTIMAL   # nothing recomputed: the sum of the costs, the least any schedule costs
    lb = best.lower_bound
    if res.schedule is None and lb is not None and lb > res.objective:
        # a DTR run in another order, as it ran: the bounds hold for stage schedules, which it beats
        lb = None
    if lb is not None and lb > res.objective:
        log.warning("auto: lower bound %s above the verified cost %s; reporting the cost", lb, res.objective)
        lb = res.objective
    if lb is not None and res.objective <= lb * (1 + 1e-9) and res.schedule is not None:
        status = SolveStatus.OPTIMAL   # a schedule at the proven bound (for example the MILP's, reached by a baseline)
    note = ""
    if status is not SolveStatus.OPTIMAL and lb:
        stats["gap"] = res.objective / lb - 1.0
        milp_lb = best.tried.get("ilp", {}).get("lower_bound") if path == "ilp" else None
        note = _gap_note(stats["gap"], best.method, milp_lb is not None and milp_lb >= lb * (1 - 1e-9))
        stats["gap_note"] = note
        note = f" ({note})"
    return RematResult(status=status, schedule=res.schedule, lower_bound=lb, backend=res.backend, stats=stats,
                       message=f"auto ({path} path): {best.method}: {res.message}{note}", sequence=res.sequence)


def _budget_words(graph: Graph, budget_bytes: int) -> str:
    """A budget in human units with its bytes and its fraction of activation memory: ``"530 KiB (542464 bytes,
    0.50 of activation memory)"``."""
    from ..units import budget_fraction, format_bytes

    f = budget_fraction(graph, budget_bytes)
    return (f"{format_bytes(budget_bytes)} ({budget_bytes} bytes"
            + (f", {f:.2f} of activation memory)" if math.isfinite(f) else ")"))


def _gap_note(gap: float, method: str, exact_bound: bool) -> str:
    """What the gap between the schedule and the bound says, in a sentence (docs/large_graphs.rst, *How far
    from optimal*, has the measurements behind it)."""
    if gap <= 0.05:
        return f"within {100 * gap:.1f}% of optimal: its cost over a proven lower bound"
    if exact_bound:
        return (f"{100 * gap:.1f}% above the MILP's proven bound: the optimum lies between the two; the MILP did "
                "not close the gap in the time given")
    from ..bounds import gap_statement

    return gap_statement(1.0 + gap, 1.0)   # which side is likely far, from the measured references
