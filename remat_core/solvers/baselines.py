"""Chen et al. (2016) checkpointing and Checkmate's generalizations to DAGs.

Methods
-------
``chen-sqrtn``, ``chen-greedy``
    Chen et al., *Training deep nets with sublinear memory cost* (2016), on
    chain training graphs (see :mod:`remat_core.chain`): checkpoint every
    ``stride``-th forward layer (``stride = int(sqrt(n))`` is the classic
    sqrt(n) point), or greedily close a segment when its accumulated size
    exceeds ``b`` (Chen's Algorithm with budget ``b``).
``linearized-sqrtn``, ``linearized-greedy``, ``ap-sqrtn``, ``ap-greedy``
    The generalizations of Jain et al. (Checkmate, MLSys 2020, section 6): the
    candidates for checkpointing are all forward nodes in topological order
    (``linearized-*``) or the articulation points of the undirected forward
    graph (``ap-*``); the same sqrt(n) / greedy rules pick checkpoints among
    them.

From checkpoints to a schedule (Chen's scheme)
----------------------------------------------
The checkpoint set defines the checkpoint matrix ``S``; then ``R`` is the
optimal ``R`` given ``S`` (:func:`remat_core.optimal_r_given_s`) and the
simulator judges the result. For a training graph (one with backward nodes):

* a checkpoint, the loss, every backward node and every forward node after
  the last checkpoint (the last segment, which Chen never recomputes) is kept
  from when it is computed until its last use;
* any other forward node ``v`` belongs to the segment between the two
  checkpoints around it (by topological index). It is kept during the forward
  pass until its last forward user, then dropped; at the first backward stage
  that reads any node of its segment, the whole segment is recomputed once
  (from the previous checkpoint, by the optimal ``R``) and ``v`` is kept until
  its last use.

For a graph without backward nodes (the recorded DTR graphs do not say which
nodes are backward) the whole graph is the "forward" chain: candidates are all
nodes (``linearized-*``) or the articulation points of the whole undirected
graph (``ap-*``); a non-checkpoint value is kept until its last use or until
the next checkpoint is computed, whichever comes first, and any later read
recomputes it from the values still kept (optimal ``R`` given ``S``). This is
Chen's "keep the checkpoints plus one segment" memory rule with the
recomputation placed where it is needed.

Articulation points are computed on the undirected forward graph extended
with a virtual source joined to every forward node without forward inputs and
a virtual sink joined to every forward node without forward users, so that on
a chain every layer is a candidate and ``ap-*`` equals ``linearized-*`` and
``chen-*`` (the tests check identical ``R`` and ``S``).

Every method is budget-aware: it evaluates its family (strides, or values of
``b``), simulates every schedule and returns the cheapest that fits, or
``INFEASIBLE`` with ``stats["method_min_budget_bytes"]``, the smallest peak the
family reaches.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import kernels
from ..chain import ChainInfo, as_chain
from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from ..simulate import simulate

__all__ = [
    "TradeOffPoint", "trade_off_curve", "checkpoint_candidates", "sqrtn_checkpoints", "greedy_checkpoints",
    "chen_schedule", "chen_sqrtn_schedule", "chen_greedy_schedule", "generalized_schedule",
    "linearized_sqrtn_schedule", "linearized_greedy_schedule", "ap_sqrtn_schedule", "ap_greedy_schedule",
    "articulation_points",
    "solve_chen_sqrtn", "solve_chen_greedy", "solve_linearized_sqrtn", "solve_linearized_greedy",
    "solve_ap_sqrtn", "solve_ap_greedy",
]

log = logging.getLogger(__name__)

#: families larger than this are sampled geometrically (plus the classic point)
MAX_FAMILY = 48


@dataclass(frozen=True)
class TradeOffPoint:
    """One member of a heuristic family, simulated.

    Attributes
    ----------
    peak_memory_bytes : int
    cost : float
    param : int or float
        The family parameter (``stride``, ``b`` or ``slots``).
    schedule : Schedule
    """

    peak_memory_bytes: int
    cost: float
    param: Any
    schedule: Schedule


# ---------------------------------------------------------------- helpers
def _last_use(graph: Graph) -> np.ndarray:
    _, _, user_ptr, user_idx = graph.csr
    last = np.arange(graph.n, dtype=np.int64)
    has = np.diff(user_ptr) > 0
    last[has] = user_idx[user_ptr[1:][has] - 1]
    return last


def _schedule_from_intervals(graph: Graph, nodes: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Schedule:
    """``S[t, v] = 1`` for ``start < t <= end`` of every interval; then the optimal ``R``.

    Intervals of one node must not overlap (empty ones are ignored).
    """
    n = graph.n
    nodes = np.asarray(nodes, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.minimum(np.asarray(ends, dtype=np.int64), n - 1)
    lengths = ends - starts
    keep = lengths > 0
    nodes, starts, lengths = nodes[keep], starts[keep], lengths[keep]
    order = np.lexsort((starts, nodes))  # by node, so each S row comes out sorted
    nodes, starts, lengths = nodes[order], starts[order], lengths[order]
    total = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, np.int64)
    rows = np.arange(total, dtype=np.int64) - np.repeat(offsets - (starts + 1), lengths)
    cols = np.repeat(nodes, lengths)
    perm = np.argsort(rows, kind="stable")
    S_idx = np.ascontiguousarray(cols[perm])
    S_ptr = np.zeros(n + 1, dtype=np.int64)
    S_ptr[1:] = np.cumsum(np.bincount(rows, minlength=n))
    dep_ptr, dep_idx, _, _ = graph.csr
    R_ptr, R_idx = kernels.r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx)
    return Schedule.from_csr(n, R_ptr, R_idx, S_ptr, S_idx)


def _loss_index(graph: Graph) -> int | None:
    loss = graph.meta.get("loss")
    if isinstance(loss, int) and 0 <= loss < graph.n and not graph.is_backward[loss]:
        return loss
    return None


def _forward_mask(graph: Graph) -> np.ndarray:
    """Nodes treated as forward: the non-backward ones (all nodes if no node is backward)."""
    return ~graph.is_backward


def articulation_points(graph: Graph, nodes: np.ndarray | None = None) -> np.ndarray:
    """Articulation points of the undirected graph induced by ``nodes``.

    The induced graph is extended with a virtual source joined to every node
    without an input among ``nodes`` and a virtual sink joined to every node
    without a user among ``nodes`` (so the two ends of a chain count).

    Parameters
    ----------
    graph : Graph
    nodes : array of int, optional
        Node indices (default: all nodes).

    Returns
    -------
    numpy.ndarray
        Sorted indices of the articulation points.

    Examples
    --------
    >>> from remat_core import Graph
    >>> g = Graph.from_arrays([[], [0], [0], [1, 2], [3]])  # a diamond then a tail
    >>> articulation_points(g).tolist()
    [0, 3, 4]
    """
    if nodes is None:
        nodes = np.arange(graph.n, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    m = len(nodes)
    if m == 0:
        return np.zeros(0, np.int64)
    local = {int(v): i for i, v in enumerate(nodes)}
    src, snk = m, m + 1
    adj: list[set[int]] = [set() for _ in range(m + 2)]
    for i, v in enumerate(nodes):
        ins = [local[u] for u in graph.deps[v] if u in local]
        outs = [local[u] for u in graph.users[v] if u in local]
        for u in ins:
            adj[i].add(u)
            adj[u].add(i)
        if not ins:
            adj[i].add(src)
            adj[src].add(i)
        if not outs:
            adj[i].add(snk)
            adj[snk].add(i)
    N = m + 2
    disc = [-1] * N
    low = [0] * N
    is_ap = [False] * N
    timer = 0
    for root in range(N):
        if disc[root] != -1:
            continue
        disc[root] = low[root] = timer
        timer += 1
        children = 0
        stack = [(root, -1, iter(sorted(adj[root])))]
        while stack:
            v, parent, it = stack[-1]
            advanced = False
            for w in it:
                if disc[w] == -1:
                    disc[w] = low[w] = timer
                    timer += 1
                    if v == root:
                        children += 1
                    stack.append((w, v, iter(sorted(adj[w]))))
                    advanced = True
                    break
                if w != parent:
                    low[v] = min(low[v], disc[w])
            if not advanced:
                stack.pop()
                if stack:
                    p = stack[-1][0]
                    low[p] = min(low[p], low[v])
                    if p != root and low[v] >= disc[p]:
                        is_ap[p] = True
        if children > 1:
            is_ap[root] = True
    return np.array(sorted(int(nodes[i]) for i in range(m) if is_ap[i]), dtype=np.int64)


def checkpoint_candidates(graph: Graph, kind: str = "linearized") -> np.ndarray:
    """Nodes that may become checkpoints, in topological order.

    Parameters
    ----------
    graph : Graph
    kind : {"linearized", "ap", "chain"}
        ``"linearized"``: every forward node except the loss; ``"ap"``: the
        articulation points of the undirected forward graph (see
        :func:`articulation_points`), except the loss; ``"chain"``: the layers
        of a chain training graph (raises on other graphs). Graphs without
        backward nodes use all their nodes as the forward graph.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> checkpoint_candidates(linear_graph(3), "ap").tolist()
    [0, 1, 2]
    """
    if kind == "chain":
        return as_chain(graph).forward.copy()
    fwd = np.flatnonzero(_forward_mask(graph))
    loss = _loss_index(graph)
    if kind == "linearized":
        cand = fwd
    elif kind == "ap":
        cand = articulation_points(graph, fwd)
    else:
        raise ValueError(f"`kind` must be 'linearized', 'ap' or 'chain'; got {kind!r}")
    if loss is not None:
        cand = cand[cand != loss]
    return cand.astype(np.int64)


def sqrtn_checkpoints(candidates: Sequence[int], stride: int | None = None) -> np.ndarray:
    """Every ``stride``-th candidate (the ``stride``-th, ``2 stride``-th, ...).

    ``stride=None`` uses ``max(1, int(sqrt(len(candidates))))``, Chen's sqrt(n).

    Examples
    --------
    >>> sqrtn_checkpoints(range(9)).tolist()
    [2, 5, 8]
    """
    cand = np.asarray(candidates, dtype=np.int64)
    if stride is None:
        stride = max(1, int(math.isqrt(len(cand))))
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"`stride` must be a positive integer; got {stride!r}")
    return cand[int(stride) - 1::int(stride)]


def greedy_checkpoints(graph: Graph, candidates: Sequence[int], b: float) -> np.ndarray:
    """Chen's greedy rule: walk the forward nodes, add their sizes, checkpoint a candidate once the sum exceeds ``b``.

    The running sum restarts at each checkpoint.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(6)
    >>> greedy_checkpoints(g, range(6), 2).tolist()
    [2, 5]
    """
    if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)) or not b >= 0:
        raise ValueError(f"`b` must be a number >= 0; got {b!r}")
    is_cand = np.zeros(graph.n, dtype=bool)
    is_cand[np.asarray(candidates, dtype=np.int64)] = True
    mem = graph.memory_bytes
    out = []
    acc = 0
    for v in np.flatnonzero(_forward_mask(graph)):
        acc += int(mem[v])
        if is_cand[v] and acc > b:
            out.append(int(v))
            acc = 0
    return np.asarray(out, dtype=np.int64)


# ------------------------------------------------------- chains (Chen 2016)
def chen_schedule(graph: Graph, checkpoints: Sequence[int], info: ChainInfo | None = None) -> Schedule:
    """Chen's schedule on a chain training graph for a set of checkpointed layers.

    Written directly in terms of the chain (layers ``f_j``, loss, gradients
    ``b_j``), independently of :func:`generalized_schedule`.

    Raises
    ------
    GraphValidationError
        If ``graph`` is not a chain training graph.
    ValueError
        If a checkpoint is not a layer index ``0..n-1``.
    """
    if info is None:
        info = as_chain(graph, "chen")
    n = info.n_forward
    ck = sorted({int(c) for c in checkpoints})
    if ck and (ck[0] < 0 or ck[-1] >= n):
        raise ValueError(f"`checkpoints` must be layer indices in 0..{n - 1}; got {ck}")
    ckset = set(ck)
    bidx = lambda j: 2 * n - j  # noqa: E731  index of b_j
    reads = info.reads_input
    nodes, starts, ends = [], [], []

    def keep(v: int, a: int, b: int) -> None:
        nodes.append(v)
        starts.append(a)
        ends.append(b)

    def last_use(j: int) -> int:  # of f_j: b_j
        return bidx(j)

    last = ck[-1] if ck else -1
    for j in range(n):
        if j in ckset or j > last:
            keep(j, j, last_use(j))
    keep(n, n, bidx(n - 1))  # the loss
    for j in range(n - 1, 0, -1):
        keep(bidx(j), bidx(j), bidx(j - 1))
    # segments before the last checkpoint: kept in the forward pass until the next layer reads
    # them, recomputed at once when the backward pass first reads one of them
    bounds = [-1] + ck
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        seg = range(lo + 1, hi)
        if not seg:
            continue
        top = hi - 1
        first_read = bidx(top + 1) if reads[top + 1] else bidx(top)
        for j in seg:
            keep(j, j, j + 1)
            keep(j, first_read, last_use(j))
    return _schedule_from_intervals(graph, nodes, starts, ends)


def chen_sqrtn_schedule(graph: Graph, stride: int | None = None) -> Schedule:
    """Chen's sqrt(n) schedule on a chain: checkpoint every ``stride``-th layer.

    Parameters
    ----------
    graph : Graph
        A chain training graph (:mod:`remat_core.chain`).
    stride : int, optional
        Default ``int(sqrt(n))``: about sqrt(n) segments of sqrt(n) layers.

    Returns
    -------
    Schedule

    Raises
    ------
    GraphValidationError
        If ``graph`` is not a chain training graph.

    Examples
    --------
    >>> from remat_core import simulate
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(16)
    >>> sim = simulate(g, chen_sqrtn_schedule(g))
    >>> sim.total_cost, sim.peak_memory_bytes  # checkpoint-all: 33.0, 18
    (45.0, 8)
    """
    info = as_chain(graph, "chen-sqrtn")
    return chen_schedule(graph, sqrtn_checkpoints(info.forward, stride), info)


def chen_greedy_schedule(graph: Graph, b: float) -> Schedule:
    """Chen's greedy schedule on a chain for segment budget ``b`` bytes.

    Raises
    ------
    GraphValidationError
        If ``graph`` is not a chain training graph.

    Examples
    --------
    >>> from remat_core import simulate
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(16)
    >>> simulate(g, chen_greedy_schedule(g, 4)).peak_memory_bytes
    8
    """
    info = as_chain(graph, "chen-greedy")
    return chen_schedule(graph, greedy_checkpoints(graph, info.forward, b), info)


# ------------------------------------------------------ DAGs (Checkmate)
def generalized_schedule(graph: Graph, checkpoints: Sequence[int]) -> Schedule:
    """Chen's scheme on any DAG for a set of checkpointed nodes (module docstring).

    Parameters
    ----------
    graph : Graph
    checkpoints : sequence of int
        Forward node indices.

    Returns
    -------
    Schedule

    Raises
    ------
    ValueError
        If a checkpoint is not a forward node.

    Examples
    --------
    >>> from remat_core import simulate
    >>> from remat_core.zoo import random_training_graph
    >>> g = random_training_graph(6, seed=0)
    >>> sched = generalized_schedule(g, checkpoint_candidates(g, "ap")[::2])
    >>> simulate(g, sched).total_cost >= float(g.cost.sum())
    True
    """
    n = graph.n
    fwd = _forward_mask(graph)
    ck = np.unique(np.asarray(checkpoints, dtype=np.int64))
    if len(ck) and (ck[0] < 0 or ck[-1] >= n or not fwd[ck].all()):
        raise ValueError("`checkpoints` must be indices of forward nodes")
    last_use = _last_use(graph)
    is_ck = np.zeros(n, dtype=bool)
    is_ck[ck] = True
    idx = np.arange(n, dtype=np.int64)
    nodes: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    seg = np.searchsorted(ck, idx)  # checkpoints before each node
    tail = seg == len(ck)
    always = ~fwd | is_ck | tail
    nodes.append(idx[always])
    starts.append(idx[always])
    ends.append(last_use[always])
    rest = np.flatnonzero(~always)
    if graph.is_backward.any():
        bwd = graph.is_backward
        users = graph.users
        last_fwd = np.array([max([u for u in users[v] if not bwd[u]], default=v) for v in rest], dtype=np.int64)
        first_bwd = np.array([min([u for u in users[v] if bwd[u]], default=n) for v in rest], dtype=np.int64)
        seg_start = np.full(len(ck) + 1, n, dtype=np.int64)
        np.minimum.at(seg_start, seg[rest], first_bwd)
        b_start = seg_start[seg[rest]]
        has_bwd = first_bwd < n
        # forward phase; the backward window (b_start, last_use] merges with it if they touch
        merged = has_bwd & (b_start <= last_fwd)
        nodes += [rest, rest[has_bwd & ~merged]]
        starts += [rest, b_start[has_bwd & ~merged]]
        ends += [np.where(merged, np.maximum(last_fwd, last_use[rest]), last_fwd), last_use[rest][has_bwd & ~merged]]
    else:
        next_ck = ck[seg[rest]]
        nodes.append(rest)
        starts.append(rest)
        ends.append(np.minimum(last_use[rest], next_ck))
    return _schedule_from_intervals(graph, np.concatenate(nodes), np.concatenate(starts), np.concatenate(ends))


def linearized_sqrtn_schedule(graph: Graph, stride: int | None = None) -> Schedule:
    """``linearized-sqrtn`` for one ``stride`` (every forward node is a candidate)."""
    return generalized_schedule(graph, sqrtn_checkpoints(checkpoint_candidates(graph, "linearized"), stride))


def ap_sqrtn_schedule(graph: Graph, stride: int | None = None) -> Schedule:
    """``ap-sqrtn`` for one ``stride`` (articulation points are the candidates)."""
    return generalized_schedule(graph, sqrtn_checkpoints(checkpoint_candidates(graph, "ap"), stride))


def linearized_greedy_schedule(graph: Graph, b: float) -> Schedule:
    """``linearized-greedy`` for one segment budget ``b``."""
    return generalized_schedule(graph, greedy_checkpoints(graph, checkpoint_candidates(graph, "linearized"), b))


def ap_greedy_schedule(graph: Graph, b: float) -> Schedule:
    """``ap-greedy`` for one segment budget ``b``."""
    return generalized_schedule(graph, greedy_checkpoints(graph, checkpoint_candidates(graph, "ap"), b))


# ------------------------------------------------------------- families
def _strides(k: int) -> list[int]:
    if k == 0:
        return [1]
    classic = max(1, int(math.isqrt(k)))
    if k <= MAX_FAMILY:
        vals = set(range(1, k + 1))
    else:
        vals = {int(round(x)) for x in np.geomspace(1, k, MAX_FAMILY)}
    vals.add(classic)
    return sorted(vals)


def _b_values(graph: Graph) -> list[float]:
    mem = graph.memory_bytes[_forward_mask(graph)]
    pos = mem[mem > 0]
    if len(pos) == 0:
        return [0.0]
    lo, hi = float(pos.min()), float(mem.sum())
    vals = {0.0, hi}
    if hi > lo:
        vals.update(float(np.floor(x)) for x in np.geomspace(lo, hi, MAX_FAMILY))
    return sorted(vals)


def _family_checkpoints(graph: Graph, method: str) -> list[tuple[Any, np.ndarray, Callable[[np.ndarray], Schedule]]]:
    if method.startswith("chen-"):
        info = as_chain(graph, method)
        cand = info.forward
        build = lambda ck: chen_schedule(graph, ck, info)  # noqa: E731
    else:
        kind = method.split("-")[0]
        cand = checkpoint_candidates(graph, kind)
        build = lambda ck: generalized_schedule(graph, ck)  # noqa: E731
    if method.endswith("sqrtn"):
        return [(s, sqrtn_checkpoints(cand, s), build) for s in _strides(len(cand))]
    return [(b, greedy_checkpoints(graph, cand, b), build) for b in _b_values(graph)]


_CACHE: list[tuple[Graph, str, list[TradeOffPoint]]] = []


def _family(graph: Graph, method: str) -> list[TradeOffPoint]:
    """Every distinct member of ``method``'s family, simulated (small LRU cache by graph identity)."""
    for g, m, pts in _CACHE:
        if g is graph and m == method:
            return pts
    if method == "griewank-logn":
        from .griewank import griewank_family

        members = griewank_family(graph)
    else:
        members = []
        seen: set[tuple[int, ...]] = set()
        for param, ck, build in _family_checkpoints(graph, method):
            key = tuple(int(c) for c in ck)
            if key in seen:
                continue
            seen.add(key)
            members.append((param, build(ck)))
    pts = []
    for param, sched in members:
        sim = simulate(graph, sched, timeline=False)
        pts.append(TradeOffPoint(sim.peak_memory_bytes, sim.total_cost, param, sched))
    _CACHE.insert(0, (graph, method, pts))
    del _CACHE[8:]
    return pts


_FAMILY_METHODS = ("chen-sqrtn", "chen-greedy", "griewank-logn", "linearized-sqrtn", "linearized-greedy",
                   "ap-sqrtn", "ap-greedy")


def trade_off_curve(graph: Graph, method: str, pareto: bool = True) -> list[TradeOffPoint]:
    """The (peak memory, cost) points a heuristic family reaches on ``graph``.

    Parameters
    ----------
    graph : Graph
    method : str
        One of ``chen-sqrtn``, ``chen-greedy``, ``griewank-logn``,
        ``linearized-sqrtn``, ``linearized-greedy``, ``ap-sqrtn``, ``ap-greedy``.
    pareto : bool
        Keep only the points no other point beats in both peak and cost.

    Returns
    -------
    list of TradeOffPoint
        Sorted by peak memory (then cost); on the Pareto front the cost
        strictly decreases as the peak grows.

    Raises
    ------
    ValueError
        On an unknown ``method``.
    GraphValidationError
        For a chain-only method on a graph that is not a chain.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> pts = trade_off_curve(linear_graph(8), "chen-greedy")
    >>> [(p.peak_memory_bytes, p.cost) for p in pts][:2]
    [(6, 21.0), (10, 17.0)]
    """
    if method not in _FAMILY_METHODS:
        raise ValueError(f"`method` must be one of {list(_FAMILY_METHODS)}; got {method!r}")
    pts = sorted(_family(graph, method), key=lambda p: (p.peak_memory_bytes, p.cost))
    if not pareto:
        return pts
    front: list[TradeOffPoint] = []
    for p in pts:
        if not front or p.cost < front[-1].cost:
            if front and front[-1].peak_memory_bytes == p.peak_memory_bytes:
                continue
            front.append(p)
    return front


def _param_name(method: str) -> str:
    return {"sqrtn": "stride", "greedy": "b", "logn": "slots"}[method.rsplit("-", 1)[1]]


def solve_family(graph: Graph, budget_bytes: int, method: str) -> RematResult:
    """The cheapest member of ``method``'s family within ``budget_bytes`` (shared by all baseline methods)."""
    pts = _family(graph, method)
    name = _param_name(method)
    fit = [p for p in pts if p.peak_memory_bytes <= budget_bytes]
    stats: dict[str, Any] = {"family_size": len(pts)}
    if not fit:
        low = min(p.peak_memory_bytes for p in pts)
        stats["method_min_budget_bytes"] = int(low)
        return RematResult(status=SolveStatus.INFEASIBLE, stats=stats,
                           message=f"{method}: the smallest peak of its {len(pts)} schedules is {low} bytes; "
                                   f"the budget is {budget_bytes} bytes")
    best = min(fit, key=lambda p: (p.cost, p.peak_memory_bytes))
    stats[name] = best.param.item() if isinstance(best.param, np.generic) else best.param
    return RematResult(status=SolveStatus.FEASIBLE, schedule=best.schedule, stats=stats,
                       message=f"{method}: cheapest of {len(fit)} fitting schedules ({name}={stats[name]})")


def solve_chen_sqrtn(graph: Graph, budget_bytes: int) -> RematResult:
    """``chen-sqrtn``: the cheapest stride that fits (chain training graphs only)."""
    return solve_family(graph, budget_bytes, "chen-sqrtn")


def solve_chen_greedy(graph: Graph, budget_bytes: int) -> RematResult:
    """``chen-greedy``: the cheapest segment budget ``b`` that fits (chain training graphs only)."""
    return solve_family(graph, budget_bytes, "chen-greedy")


def solve_linearized_sqrtn(graph: Graph, budget_bytes: int) -> RematResult:
    """``linearized-sqrtn``: every forward node is a candidate; cheapest stride that fits."""
    return solve_family(graph, budget_bytes, "linearized-sqrtn")


def solve_linearized_greedy(graph: Graph, budget_bytes: int) -> RematResult:
    """``linearized-greedy``: every forward node is a candidate; cheapest ``b`` that fits."""
    return solve_family(graph, budget_bytes, "linearized-greedy")


def solve_ap_sqrtn(graph: Graph, budget_bytes: int) -> RematResult:
    """``ap-sqrtn``: articulation points are the candidates; cheapest stride that fits."""
    return solve_family(graph, budget_bytes, "ap-sqrtn")


def solve_ap_greedy(graph: Graph, budget_bytes: int) -> RematResult:
    """``ap-greedy``: articulation points are the candidates; cheapest ``b`` that fits."""
    return solve_family(graph, budget_bytes, "ap-greedy")
