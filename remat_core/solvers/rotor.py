"""``rotor``: the optimal dynamic program for heterogeneous chains.

Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, *Optimal checkpointing for
heterogeneous chains: how to train deep neural networks with limited memory*
(2019). Implemented here from the paper's model; the conversion to our
``(R, S)`` schedules and the budget search are ours.

The model (rotor's)
-------------------
A chain of stages ``j = 0 .. L``; stage ``L`` is the loss. Forward ``F_j``
reads ``a_{j-1}`` (``a_{-1}`` is the network input, always resident) and
produces ``a_j`` (``x[j]`` bytes). It runs in one of three modes:

* ``F_null``: keep nothing (the input may be freed afterwards);
* ``F_ck``: keep the input ``a_{j-1}`` as a checkpoint;
* ``F_all``: keep ``abar_j`` (``xbar[j]`` bytes), everything ``B_j`` needs;
  the input ``a_{j-1}`` then stays resident until ``B_j``.

Backward ``B_j`` (``j < L``) reads ``delta_{j+1}`` (``delta_L`` is the loss
value), ``abar_j`` and ``a_{j-1}``, and produces ``delta_j`` (``d[j]`` bytes);
it needs ``abar_j``, so it must follow an ``F_all^j``. Memory is counted as in
our simulator: when a value is computed, everything resident plus the new
value plus the operation's workspace must fit.

``opt(s, e, m)`` is the cheapest way to back-propagate stages ``s..e`` given
``a_{s-1}`` resident (paid by the caller) and ``delta_{e+1}`` resident (inside
``m``): either (leaf checkpoint) run ``F_null`` from ``s`` to ``k-1``, keep
``a_{k-1}``, solve ``k..e`` with ``m - x[k-1]`` then ``s..k-1`` with ``m``; or
(``F_all`` at ``s``) keep ``abar_s``, solve ``s+1..e`` with ``m - xbar[s]``,
then run ``B_s``. Memory is discretized into slots (``mem_slots``) and every
size is rounded *up* to whole slots, so a plan the DP accepts fits in bytes.

Mapping a chain training graph (:mod:`remat_core.chain`): stage ``j < n`` is
layer ``f_j`` with backward ``b_j``; stage ``n`` is the loss;
``x = xbar = memory_bytes`` of the layer (a node holds one value, so "all the
activations ``b_j`` needs" beyond its input is ``f_j`` itself);
``d[j] = memory_bytes`` of ``b_j``; ``delta_n`` is the loss value. Our graphs
let ``b_j`` skip ``f_{j-1}`` (``linear_graph``): rotor's model still keeps it,
which is one source of the gap to the MILP (see ``docs/baselines.rst``).

The DP's operation sequence becomes a checkpoint matrix ``S`` (what is
resident at each stage boundary), ``R`` is the optimal ``R`` given ``S``, and
the simulator judges the result. The method tries the plans of every DP
memory limit where the DP's answer changes, from above the budget (rounding
makes the DP pessimistic) down to the budget, and returns the cheapest
converted schedule whose *simulated* peak fits.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..chain import ChainInfo, as_chain
from ..graph import Graph
from ..schedule import RematResult, Schedule, SolveStatus
from ..simulate import simulate

__all__ = ["RotorChain", "rotor_chain", "rotor_table", "rotor_sequence", "rotor_schedule", "solve_rotor"]

log = logging.getLogger(__name__)

INF = math.inf


@dataclass(frozen=True)
class RotorChain:
    """Rotor's chain parameters (stages ``0..L``, stage ``L`` is the loss).

    Attributes
    ----------
    fw, bw : numpy.ndarray
        Forward / backward cost per stage (``bw[L] = 0``).
    x, xbar : numpy.ndarray
        Size of ``a_j`` and of ``abar_j`` (what ``F_all`` keeps).
    d : numpy.ndarray
        Size of ``delta_j`` for ``j = 0..L+1`` (``d[L]`` = loss size, ``d[L+1] = 0``).
    wf, wb : numpy.ndarray
        Workspace of ``F_j`` / ``B_j``.
    """

    fw: np.ndarray
    bw: np.ndarray
    x: np.ndarray
    xbar: np.ndarray
    d: np.ndarray
    wf: np.ndarray
    wb: np.ndarray

    @property
    def length(self) -> int:
        """``L``: index of the loss stage."""
        return len(self.fw) - 1


def rotor_chain(graph: Graph, info: ChainInfo | None = None) -> RotorChain:
    """Rotor's parameters for a chain training graph (sizes in bytes).

    Raises
    ------
    GraphValidationError
        If ``graph`` is not a chain training graph.
    """
    if info is None:
        info = as_chain(graph, "rotor")
    n = info.n_forward
    b = info.backward
    mem, ws, cost = graph.memory_bytes, graph.workspace_bytes, graph.cost
    fw = cost[: n + 1].astype(float)
    bw = np.concatenate([cost[b], [0.0]])
    x = mem[: n + 1].astype(np.int64)
    d = np.concatenate([mem[b], [mem[n], 0]]).astype(np.int64)
    return RotorChain(fw=fw, bw=bw, x=x, xbar=x.copy(), d=d, wf=ws[: n + 1].astype(np.int64),
                      wb=np.concatenate([ws[b], [0]]).astype(np.int64))


def _slots(a: np.ndarray, q: int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // q)


def rotor_table(chain: RotorChain, mem_limit: int, slot_bytes: int = 1) -> tuple[dict, dict]:
    """Fill rotor's table ``opt[(s, e)][m]`` for ``m = 0 .. mem_limit // slot_bytes`` slots.

    Parameters
    ----------
    chain : RotorChain
    mem_limit : int
        Bytes available to the chain (the budget minus ``fixed_bytes``).
    slot_bytes : int
        Size of one memory slot; every size is rounded up to whole slots.

    Returns
    -------
    opt, choice : dict
        ``opt[(s, e)]`` is a float array over slots (``inf`` = infeasible);
        ``choice[(s, e)]`` holds ``0`` (single stage), ``-1`` (``F_all`` at
        ``s``) or ``k > s`` (leaf checkpoint ``a_{k-1}``).
    """
    L = chain.length
    M = int(mem_limit // slot_bytes)
    x, xbar, d = _slots(chain.x, slot_bytes), _slots(chain.xbar, slot_bytes), _slots(chain.d, slot_bytes)
    wf, wb = _slots(chain.wf, slot_bytes), _slots(chain.wb, slot_bytes)
    fw, bw = chain.fw, chain.bw
    ms = np.arange(M + 1)
    opt: dict[tuple[int, int], np.ndarray] = {}
    choice: dict[tuple[int, int], np.ndarray] = {}

    def shifted(arr: np.ndarray, k: int) -> np.ndarray:
        out = np.full(M + 1, INF)
        if k <= M:
            out[k:] = arr[: M + 1 - k]
        return out

    for s in range(L + 1):
        if s == L:
            need = d[L + 1] + x[L] + wf[L]
            cost = fw[L]
        else:
            need = max(d[s + 1] + xbar[s] + wf[s], d[s + 1] + xbar[s] + d[s] + wb[s])
            cost = fw[s] + bw[s]
        opt[(s, s)] = np.where(ms >= need, cost, INF)
        choice[(s, s)] = np.zeros(M + 1, dtype=np.int64)
    for length in range(1, L + 1):
        for s in range(L + 1 - length):
            e = s + length
            best = np.full(M + 1, INF)
            arg = np.full(M + 1, -2, dtype=np.int64)
            # F_all at s (s < e <= L, so s < L)
            need_all = max(d[e + 1] + xbar[s] + wf[s], d[s + 1] + xbar[s] + d[s] + wb[s])
            c = np.where(ms >= need_all, fw[s] + bw[s] + shifted(opt[(s + 1, e)], int(xbar[s])), INF)
            better = c < best
            best[better], arg[better] = c[better], -1
            # leaf checkpoint a_{k-1}, k = s+1 .. e
            fsum = 0.0
            need_fwd = 0
            for k in range(s + 1, e + 1):
                i = k - 1
                fsum += fw[i]
                need_fwd = max(need_fwd, d[e + 1] + (x[i - 1] if i > s else 0) + x[i] + wf[i])
                c = np.where(ms >= need_fwd, fsum + shifted(opt[(k, e)], int(x[k - 1])) + opt[(s, k - 1)], INF)
                better = c < best
                best[better], arg[better] = c[better], k
            opt[(s, e)] = best
            choice[(s, e)] = arg
    return opt, choice


def rotor_sequence(chain: RotorChain, choice: dict, m: int, slot_bytes: int = 1) -> list[tuple]:
    """The operation sequence of the optimal plan with ``m`` slots (``slot_bytes`` as in :func:`rotor_table`).

    Operations: ``("F", j, mode)`` with mode ``"null"``, ``"ck"`` or
    ``"all"``; ``("B", j)``; ``("free", kind, j)`` with kind ``"a"``,
    ``"abar"`` or ``"delta"``.
    """
    L = chain.length
    x, xbar = _slots(chain.x, slot_bytes), _slots(chain.xbar, slot_bytes)
    ops: list[tuple] = []
    stack: list[tuple] = [("solve", 0, L, m)]
    while stack:
        item = stack.pop()
        if item[0] != "solve":
            ops.append(item)
            continue
        _, s, e, mm = item
        ch = int(choice[(s, e)][mm])
        if s == e:
            if s == L:
                ops.append(("F", L, "all"))
            else:
                ops += [("F", s, "all"), ("B", s), ("free", "delta", s + 1), ("free", "abar", s)]
        elif ch == -1:
            stack.extend(reversed([("F", s, "all"), ("solve", s + 1, e, mm - int(xbar[s])), ("B", s),
                                   ("free", "delta", s + 1), ("free", "abar", s)]))
        elif ch > s:
            k = ch
            for i in range(s, k):
                ops.append(("F", i, "ck" if i == k - 1 else "null"))
                if i > s:
                    ops.append(("free", "a", i - 1))
            stack.extend(reversed([("solve", k, e, mm - int(x[k - 1])), ("free", "a", k - 1), ("solve", s, k - 1, mm)]))
        else:  # pragma: no cover - only reached on an infeasible entry
            raise RuntimeError(f"rotor: no plan for stages {s}..{e} with {mm} slots")
    return ops


def _sequence_to_schedule(graph: Graph, info: ChainInfo, ops: list[tuple]) -> Schedule:
    """Turn a rotor sequence into ``S`` (resident values at each stage boundary) and the optimal ``R``."""
    n = info.n_forward
    N = graph.n

    def node(kind: str, j: int) -> int:
        if kind in ("a", "abar"):
            return j
        return n if j == n else 2 * n - j  # delta_n is the loss

    resident: set[int] = set()
    computed = np.zeros(N, dtype=bool)
    snapshot: set[int] | None = None
    S_rows: list[list[int]] = [[] for _ in range(N)]
    next_stage = 0
    for op in ops:
        if op[0] == "free":
            resident.discard(node(op[1], op[2]))
            continue
        v = op[1] if op[0] == "F" else 2 * n - op[1]
        if snapshot is None:
            snapshot = set(resident)
        resident.add(v)
        if not computed[v]:
            if v != next_stage:  # pragma: no cover - rotor computes nodes first in topological order
                raise RuntimeError(f"rotor sequence computes node {v} first before node {next_stage}")
            computed[v] = True
            S_rows[v] = sorted(i for i in snapshot if i < v)
            snapshot = None
            next_stage += 1
    if next_stage != N:  # pragma: no cover
        raise RuntimeError("rotor sequence does not compute every node")
    from scipy.sparse import csr_array

    rows = np.repeat(np.arange(N), [len(r) for r in S_rows])
    cols = np.fromiter((i for r in S_rows for i in r), dtype=np.int64, count=len(rows))
    from ..simulate import optimal_r_given_s

    S = csr_array((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(N, N))
    return optimal_r_given_s(graph, S)


def _prepare(graph: Graph, mem_limit: int, slot_bytes: int, info: ChainInfo | None = None):
    if info is None:
        info = as_chain(graph, "rotor")
    chain = rotor_chain(graph, info)
    opt, choice = rotor_table(chain, mem_limit, slot_bytes)
    return info, chain, opt, choice


def rotor_schedule(graph: Graph, mem_limit_bytes: int, mem_slots: int = 500) -> tuple[Schedule | None, float]:
    """Rotor's optimal plan for ``mem_limit_bytes`` of chain memory, converted to a schedule.

    Parameters
    ----------
    graph : Graph
        A chain training graph.
    mem_limit_bytes : int
        Memory for the chain (a budget minus ``fixed_bytes``).
    mem_slots : int
        Memory resolution of the DP.

    Returns
    -------
    schedule : Schedule or None
        ``None`` when rotor's model has no plan within the limit.
    dp_cost : float
        The DP's optimal cost (``inf`` if none).

    Examples
    --------
    >>> from remat_core import simulate
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(8)
    >>> sched, dp_cost = rotor_schedule(g, 6)
    >>> dp_cost, simulate(g, sched).total_cost, simulate(g, sched).peak_memory_bytes
    (23.0, 23.0, 6)
    """
    q = max(1, -(-int(mem_limit_bytes) // int(mem_slots)))
    info, chain, opt, choice = _prepare(graph, int(mem_limit_bytes), q)
    M = int(mem_limit_bytes) // q
    best = opt[(0, chain.length)][M]
    if not math.isfinite(best):
        return None, INF
    return _sequence_to_schedule(graph, info, rotor_sequence(chain, choice, M, q)), float(best)


def solve_rotor(graph: Graph, budget_bytes: int, mem_slots: int = 500) -> RematResult:
    """``rotor``: the cheapest converted rotor plan whose simulated peak fits the budget.

    Parameters
    ----------
    graph : Graph
        A chain training graph (others raise a ``GraphValidationError``).
    budget_bytes : int
    mem_slots : int
        Memory resolution: the budget is split into this many slots.

    Returns
    -------
    RematResult
        ``FEASIBLE`` (optimal for rotor's model at this resolution, not for
        ours); ``INFEASIBLE`` with ``stats["method_min_budget_bytes"]`` (at
        the same resolution) when no plan fits.
    """
    if isinstance(mem_slots, bool) or not isinstance(mem_slots, (int, np.integer)) or mem_slots < 1:
        raise ValueError(f"`mem_slots` must be a positive integer; got {mem_slots!r}")
    info = as_chain(graph, "rotor")
    fixed = graph.fixed_bytes
    avail = budget_bytes - fixed
    stats: dict[str, Any] = {"mem_slots": int(mem_slots)}
    if avail <= 0:
        return _rotor_infeasible(graph, info, mem_slots, stats, budget_bytes)
    q = max(1, -(-avail // int(mem_slots)))
    top = int(avail * 1.25) + q  # the DP rounds sizes up: plans for a little more memory may still fit
    info, chain, opt, choice = _prepare(graph, top, q, info)
    curve = opt[(0, chain.length)]
    M = avail // q
    # candidate limits: where the DP's optimum changes, highest first, down to the budget's own limit
    change = [m for m in range(len(curve) - 1, -1, -1)
              if math.isfinite(curve[m]) and (m == 0 or curve[m - 1] != curve[m])]
    cands = [m for m in change if m > M] + [M]
    best: tuple[float, int, Schedule, int, float] | None = None
    tried = 0
    for m in cands:
        if not math.isfinite(curve[m]):
            continue
        tried += 1
        sched = _sequence_to_schedule(graph, info, rotor_sequence(chain, choice, m, q))
        sim = simulate(graph, sched, timeline=False)
        if sim.peak_memory_bytes <= budget_bytes and (best is None or sim.total_cost < best[0]):
            best = (sim.total_cost, sim.peak_memory_bytes, sched, m, float(curve[m]))
    stats.update(slot_bytes=int(q), plans_tried=tried)
    if best is None:
        return _rotor_infeasible(graph, info, mem_slots, stats, budget_bytes)
    cost, peak, sched, m, dp_cost = best
    stats.update(dp_mem_limit_bytes=int(m * q), dp_cost=dp_cost)
    return RematResult(status=SolveStatus.FEASIBLE, schedule=sched, stats=stats,
                       message=f"rotor plan for a DP memory limit of {m * q} bytes (DP cost {dp_cost:g})")


def _rotor_infeasible(graph: Graph, info: ChainInfo, mem_slots: int, stats: dict, budget_bytes: int) -> RematResult:
    """INFEASIBLE, with the smallest simulated peak of a rotor plan at this resolution."""
    from ..simulate import checkpoint_all_peak_bytes

    span = max(1, checkpoint_all_peak_bytes(graph) - graph.fixed_bytes)
    q = max(1, -(-span // int(mem_slots)))
    info, chain, opt, choice = _prepare(graph, span, q, info)
    curve = opt[(0, chain.length)]
    finite = np.flatnonzero(np.isfinite(curve))
    if len(finite):
        sched = _sequence_to_schedule(graph, info, rotor_sequence(chain, choice, int(finite[0]), q))
        stats["method_min_budget_bytes"] = simulate(graph, sched, timeline=False).peak_memory_bytes
    return RematResult(status=SolveStatus.INFEASIBLE, stats=stats,
                       message=f"rotor: no plan fits {budget_bytes} bytes"
                               + (f" (its smallest peak is {stats['method_min_budget_bytes']} bytes)"
                                  if "method_min_budget_bytes" in stats else ""))
