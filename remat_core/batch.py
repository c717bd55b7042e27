"""Maximum batch size under a memory budget (Checkmate section 6.4, eq. 10).

The paper finds the largest batch with a dedicated quadratic program. Here the
batch size is searched over instead, solving the ordinary (linear) problem at
each candidate with any registered method: the largest batch size ``B`` whose
training graph has a schedule within ``budget_bytes`` costing at most the
*cost cap* — by default one extra forward pass (eq. 10: the cost of computing
every node once plus the cost of the forward nodes once more).

The search assumes feasibility is monotone in the batch size (if ``B`` fits,
every smaller batch fits). This holds for graphs whose activations and costs
scale linearly with ``B`` and a method that is optimal or monotone in the
budget; for a heuristic it holds in practice, not in theory. The search first
doubles ``B`` until a batch does not fit, then bisects between the last
batch that fitted and the first that did not.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .graph import Graph
from .schedule import RematResult
from .solvers import get_method, solve, validate_budget

__all__ = ["max_batch_size", "MaxBatchResult", "forward_pass_cost_cap", "batch_size_upper_bound"]

log = logging.getLogger(__name__)


def forward_pass_cost_cap(graph: Graph) -> float:
    """The paper's eq. (10) cap: cost of every node once plus one more forward pass.

    Forward nodes are the non-backward nodes other than the loss
    (``graph.meta["loss"]`` when present).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> forward_pass_cost_cap(linear_graph(3))  # 7 nodes once + 3 forward layers
    10.0
    """
    fwd = ~np.asarray(graph.is_backward)
    loss = graph.meta.get("loss")
    if isinstance(loss, int) and 0 <= loss < graph.n:
        fwd = fwd.copy()
        fwd[loss] = False
    return float(graph.cost.sum() + graph.cost[fwd].sum())


@dataclass
class MaxBatchResult:
    """Outcome of :func:`max_batch_size`.

    Attributes
    ----------
    batch_size : int
        Largest batch that fits (``0`` if even batch 1 does not).
    result : RematResult or None
        The solve at ``batch_size`` (its schedule has been simulated within
        the budget and at most ``cost_cap``).
    graph : Graph or None
        The graph at ``batch_size``.
    cost_cap : float or None
        The cap that applied at ``batch_size``.
    overhead : float or None
        ``result.objective`` over the cost of computing every node once.
    budget_bytes : int
    method : str
    hit_max_batch : bool
        True when ``max_batch`` itself fits (the true maximum may be larger).
    trace : list of dict
        One entry per probed batch size, in probing order: ``batch_size``,
        ``fits``, ``status``, ``objective``, ``cost_lower_bound`` (the
        method's proven lower bound on the cost, if it reports one), ``cost_cap``,
        ``lower_bound_bytes`` (the graph's
        :meth:`~remat_core.Graph.min_budget_lower_bound_bytes`), ``reason``,
        ``time_s``.
    time_s : float
    """

    batch_size: int
    result: RematResult | None
    graph: Graph | None
    cost_cap: float | None
    overhead: float | None
    budget_bytes: int
    method: str
    hit_max_batch: bool = False
    trace: list[dict[str, Any]] = field(default_factory=list)
    time_s: float = 0.0

    @property
    def limited_by_lower_bound(self) -> bool:
        """True when ``batch_size + 1`` was rejected by the graph's hard lower bound.

        Then no schedule of *any* method fits the next batch (computing its
        largest node alone exceeds the budget), so ``batch_size`` is the true
        maximum, whatever the method.
        """
        nxt = self.batch_size + 1
        return any(t["batch_size"] == nxt and not t["fits"] and t.get("lower_bound_bytes") is not None
                   and t["lower_bound_bytes"] > self.budget_bytes for t in self.trace)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the schedule)."""
        return {
            "batch_size": self.batch_size, "method": self.method, "budget_bytes": self.budget_bytes,
            "cost_cap": self.cost_cap, "overhead": self.overhead, "hit_max_batch": self.hit_max_batch,
            "limited_by_lower_bound": self.limited_by_lower_bound,
            "result": self.result.to_dict() if self.result is not None else None,
            "trace": self.trace, "time_s": self.time_s,
        }


def _cap_fn(cost_cap: Any) -> Callable[[Graph], float]:
    if cost_cap is None:
        return forward_pass_cost_cap
    if callable(cost_cap):
        return lambda g: float(cost_cap(g))
    if isinstance(cost_cap, bool) or not isinstance(cost_cap, numbers.Real) or not cost_cap > 0:
        raise ValueError(f"`cost_cap` must be None, a positive factor or a callable; got {cost_cap!r}")
    factor = float(cost_cap)
    return lambda g: factor * float(g.cost.sum())


def max_batch_size(
    graph_fn: Callable[[int], Graph],
    budget_bytes: int,
    method: str = "checkpoint-all",
    cost_cap: Any = None,
    max_batch: int = 1 << 16,
    min_batch: int = 1,
    **solve_options: Any,
) -> MaxBatchResult:
    """The largest batch size whose training step fits ``budget_bytes`` at bounded cost.

    Parameters
    ----------
    graph_fn : callable
        ``graph_fn(batch_size) -> Graph`` (for example
        ``functools.partial(zoo_graph, "vgg19")``).
    budget_bytes : int
        Total device bytes (parameters and inputs included).
    method : str
        Any registered method (``"ilp"``, ``"lp-rounding"``, ``"chen-greedy"``, ...).
    cost_cap : None, float or callable
        ``None``: eq. (10), one extra forward pass
        (:func:`forward_pass_cost_cap`). A number ``f``: cost at most ``f``
        times the cost of computing every node once (``math.inf``: no cap). A
        callable: ``cost_cap(graph) -> float``, an absolute cap.
    max_batch, min_batch : int
        Search range.
    **solve_options
        Passed to :func:`remat_core.solve` (for example ``time_limit_s``).

    Returns
    -------
    MaxBatchResult

    Raises
    ------
    TypeError, ValueError
        On a bad argument (naming it).
    UnknownMethodError
        On an unknown ``method``.

    Notes
    -----
    A method that stops without proving a cost (for example an ILP at its
    time limit returning a schedule above the cap) counts as "does not fit";
    the trace records why. See the module docstring for the monotonicity
    assumption.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> r = max_batch_size(lambda b: linear_graph(4, memory_bytes=b), 30)
    >>> r.batch_size, r.result.peak_memory_bytes
    (5, 30)
    """
    if not callable(graph_fn):
        raise TypeError(f"`graph_fn` must be callable (batch_size -> Graph); got {type(graph_fn).__name__}")
    budget = validate_budget(budget_bytes)
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a string; got {method!r}")
    get_method(method)
    for nm, v in (("max_batch", max_batch), ("min_batch", min_batch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"`{nm}` must be an integer >= 1; got {v!r}")
    if min_batch > max_batch:
        raise ValueError(f"`min_batch` ({min_batch}) must be <= `max_batch` ({max_batch})")
    cap_of = _cap_fn(cost_cap)
    start = time.perf_counter()
    trace: list[dict[str, Any]] = []
    found: dict[int, tuple[RematResult, Graph, float]] = {}

    def fits(b: int) -> bool:
        t0 = time.perf_counter()
        g = graph_fn(b)
        if not isinstance(g, Graph):
            raise TypeError(f"`graph_fn({b})` must return a Graph; got {type(g).__name__}")
        cap = cap_of(g)
        entry: dict[str, Any] = {"batch_size": b, "cost_cap": cap, "status": None, "objective": None,
                                 "cost_lower_bound": None}
        lb = g.min_budget_lower_bound_bytes()
        entry["lower_bound_bytes"] = lb
        if lb > budget:
            entry.update(fits=False, reason=f"budget below the graph's lower bound {lb} bytes")
        else:
            res = solve(g, budget, method=method, **solve_options)
            entry.update(status=res.status.value, objective=res.objective, cost_lower_bound=res.lower_bound)
            if not res.success:
                entry.update(fits=False, reason=res.message or res.status.value)
            elif res.objective > cap * (1 + 1e-9):
                entry.update(fits=False, reason=f"cost {res.objective:.6g} above the cap {cap:.6g}")
            else:
                entry.update(fits=True, reason="")
                found[b] = (res, g, cap)
        entry["time_s"] = time.perf_counter() - t0
        trace.append(entry)
        log.info("max_batch_size(%s): batch %d %s %s", method, b, "fits" if entry["fits"] else "does not fit",
                 entry["reason"])
        return entry["fits"]

    lo = _largest_passing(fits, int(min_batch), int(max_batch))
    elapsed = time.perf_counter() - start
    if lo == 0:
        return MaxBatchResult(0, None, None, None, None, budget, method, False, trace, elapsed)
    res, g, cap = found[lo]
    base = float(g.cost.sum())
    return MaxBatchResult(lo, res, g, cap, (res.objective / base) if base > 0 else None, budget, method,
                          lo >= max_batch, trace, elapsed)


def _largest_passing(passes: Callable[[int], bool], start: int, max_batch: int) -> int:
    """The largest batch in ``[start, max_batch]`` that ``passes``, assuming it passes up to a point.

    Doubles from ``start`` until a batch fails (or ``max_batch`` passes), then bisects between the last
    batch that passed and the first that failed. Returns 0 if ``start`` fails.
    """
    lo, hi, b = 0, None, start
    while hi is None:
        if not passes(b):
            hi = b
        elif b >= max_batch:
            return b
        else:
            lo, b = b, min(2 * b, max_batch)
    if lo == 0:
        return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return lo


def batch_size_upper_bound(graph_fn: Callable[[int], Graph], budget_bytes: int, max_batch: int = 1 << 16) -> int:
    """The largest batch whose graph passes the hard lower bound; no method fits a larger one.

    The bound is :meth:`Graph.min_budget_lower_bound_bytes` (fixed bytes plus
    the largest single computation: a node's inputs, output and workspace).
    A batch above the returned value cannot fit ``budget_bytes`` with any
    schedule, so :func:`max_batch_size` can never return more, whatever the
    method; a method that reaches it has found the true maximum. Assumes the
    bound grows with the batch size (as it does for graphs whose sizes
    scale with it); searched by doubling, then bisection.

    Parameters
    ----------
    graph_fn : callable
        ``graph_fn(batch_size) -> Graph``.
    budget_bytes : int
    max_batch : int
        Search limit (returned when even it passes the bound).

    Returns
    -------
    int
        ``0`` when batch 1 already exceeds the bound.

    Raises
    ------
    TypeError, ValueError
        On a bad argument (naming it).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> # the largest computation (a backward node) needs 3 values of b bytes
    >>> batch_size_upper_bound(lambda b: linear_graph(4, memory_bytes=b), 30)
    10
    """
    if not callable(graph_fn):
        raise TypeError(f"`graph_fn` must be callable (batch_size -> Graph); got {type(graph_fn).__name__}")
    budget = validate_budget(budget_bytes)
    if isinstance(max_batch, bool) or not isinstance(max_batch, (int, np.integer)) or max_batch < 1:
        raise ValueError(f"`max_batch` must be an integer >= 1; got {max_batch!r}")

    def passes(b: int) -> bool:
        g = graph_fn(b)
        if not isinstance(g, Graph):
            raise TypeError(f"`graph_fn({b})` must return a Graph; got {type(g).__name__}")
        return g.min_budget_lower_bound_bytes() <= budget

    return _largest_passing(passes, 1, int(max_batch))
