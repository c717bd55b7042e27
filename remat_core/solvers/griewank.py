"""``griewank-logn``: REVOLVE binomial checkpointing (Griewank & Walther 2000).

The REVOLVE model: a chain of ``l`` steps ``x_i -> x_{i+1}``; the adjoint of
step ``i`` needs ``x_i``; ``s`` snapshots (one of them holds ``x_0``). The
fewest forward steps (not counting the step repeated by each adjoint, which
REVOLVE records there) is, with ``beta(s, t) = C(s + t, s)`` and ``t`` the
smallest integer with ``beta(s, t) >= l``::

    t * l - beta(s + 1, t - 1)

:func:`revolve` produces an optimal action sequence by the recursive binomial
split: advance ``m`` steps, take a snapshot, reverse the upper part with one
snapshot fewer, restore, reverse the lower part.

On a chain training graph with ``n`` layers (:mod:`remat_core.chain`) the
REVOLVE chain has ``l = n + 1`` steps (the layers and the loss): ``x_0`` is the
network input (always resident, part of ``fixed_bytes``: it holds one snapshot
for free), ``x_{i+1}`` is layer ``f_i`` and ``x_{n+1}`` the loss; the adjoint
of step ``i >= 1`` is the gradient node ``b_{i-1}``, which reads ``f_{i-1} =
x_i``. So ``slots`` stored layer outputs correspond to ``s = slots + 1``
snapshots, and the schedule computes forward nodes (layers and loss)
``F(n + 1, slots + 1) + 1`` times in total (the loss step, recorded by REVOLVE
inside its adjoint, runs once here).

The conversion keeps each snapshot from the stage where it is taken until the
gradient that reads it, and the working values (the layer just computed, the
loss, the running gradient) until their next reader; the optimal ``R`` given
that ``S`` then performs exactly REVOLVE's advances.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb
from typing import Any

import numpy as np

from ..chain import ChainInfo, as_chain
from ..graph import Graph
from ..schedule import RematResult, Schedule

__all__ = ["binomial_forward_steps", "revolve", "revolve_forward_steps", "griewank_schedule",
           "griewank_family", "solve_griewank_logn"]


def _check(l: Any, s: Any) -> tuple[int, int]:
    for v, nm, lo in ((l, "l", 1), (s, "s", 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"`{nm}` must be an integer >= {lo}; got {v!r}")
    return int(l), int(s)


def _beta(s: int, t: int) -> int:
    return comb(s + t, s) if t >= 0 else 0


@lru_cache(maxsize=None)
def binomial_forward_steps(l: int, s: int) -> int:
    """Griewank's minimal number of forward steps to reverse ``l`` steps with ``s`` snapshots.

    Parameters
    ----------
    l : int
        Chain length, ``>= 1``.
    s : int
        Snapshots (the one holding ``x_0`` included), ``>= 1``.

    Returns
    -------
    int

    Examples
    --------
    >>> binomial_forward_steps(10, 1), binomial_forward_steps(10, 2), binomial_forward_steps(10, 10)
    (45, 20, 9)
    """
    l, s = _check(l, s)
    t = 0
    while _beta(s, t) < l:
        t += 1
    return t * l - _beta(s + 1, t - 1)


@lru_cache(maxsize=None)
def _split(l: int, s: int) -> int:
    """An optimal number of steps to advance before the next snapshot."""
    target = binomial_forward_steps(l, s)
    best, arg = None, 1
    for m in range(1, l):
        c = m + binomial_forward_steps(l - m, s - 1) + binomial_forward_steps(m, s)
        if c == target:
            return m
        if best is None or c < best:
            best, arg = c, m
    return arg  # pragma: no cover - the binomial split always attains the formula


def revolve(l: int, s: int) -> list[tuple]:
    """An optimal REVOLVE action sequence for ``l`` steps and ``s`` snapshots.

    Actions: ``("advance", i, j)`` computes ``x_{i+1} .. x_j`` from ``x_i``;
    ``("snapshot", j)`` stores the current state ``x_j``; ``("release", j)``
    frees that snapshot; ``("restore", j)`` makes snapshot ``x_j`` the current
    state; ``("adjoint", i)`` reverses step ``i`` (needs current state
    ``x_i``). ``x_0`` is in a snapshot from the start.

    Parameters
    ----------
    l, s : int
        Chain length and snapshots, both ``>= 1``.

    Returns
    -------
    list of tuple

    Examples
    --------
    >>> revolve(3, 2)
    [('advance', 0, 1), ('snapshot', 1), ('advance', 1, 2), ('adjoint', 2), ('restore', 1), ('adjoint', 1), ('release', 1), ('restore', 0), ('adjoint', 0)]
    """
    l, s = _check(l, s)
    out: list[tuple] = []
    # explicit stack (no recursion limit): items are actions or ("rev", start, end, s, first)
    stack: list[tuple] = [("rev", 0, l, s, True)]
    while stack:
        item = stack.pop()
        if item[0] != "rev":
            out.append(item)
            continue
        _, a, b, k, current = item  # ``current``: x_a is already the current state
        if not current:
            out.append(("restore", a))
        if b - a == 1:
            out.append(("adjoint", a))
        elif k == 1:
            todo: list[tuple] = []
            for j in range(b - 1, a - 1, -1):
                if j != b - 1:
                    todo.append(("restore", a))
                if j > a:
                    todo.append(("advance", a, j))
                todo.append(("adjoint", j))
            stack.extend(reversed(todo))
        else:
            m = _split(b - a, k)
            out.append(("advance", a, a + m))
            out.append(("snapshot", a + m))
            stack.extend(reversed([("rev", a + m, b, k - 1, True), ("release", a + m), ("rev", a, a + m, k, False)]))
    return out


def revolve_forward_steps(actions: list[tuple]) -> int:
    """Forward steps performed by an action sequence (sum of advance lengths)."""
    return sum(a[2] - a[1] for a in actions if a[0] == "advance")


def griewank_schedule(graph: Graph, slots: int, info: ChainInfo | None = None) -> Schedule:
    """REVOLVE on a chain training graph with ``slots`` stored layer outputs.

    Parameters
    ----------
    graph : Graph
        A chain training graph (:mod:`remat_core.chain`).
    slots : int
        Layer outputs REVOLVE may keep as snapshots, ``>= 0`` (the input is
        one more snapshot, free).

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
    >>> g = linear_graph(10)
    >>> forward = simulate(g, griewank_schedule(g, 1)).compute_counts[:11].sum()
    >>> int(forward) == binomial_forward_steps(11, 2) + 1
    True
    """
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 0:
        raise ValueError(f"`slots` must be an integer >= 0; got {slots!r}")
    if info is None:
        info = as_chain(graph, "griewank-logn")
    n = info.n_forward
    L = n + 1
    acts = revolve(L, int(slots) + 1)
    nodes, starts, ends = [], [], []

    def keep(v: int, a: int, b: int) -> None:
        nodes.append(v)
        starts.append(a)
        ends.append(b)

    def bstage(i: int) -> int:  # stage of the adjoint of step i (gradient b_{i-1})
        return 2 * n - i + 1

    stage = None  # None during the first forward sweep
    for act in acts:
        if act[0] == "snapshot" and act[1] >= 1:
            j = act[1]
            taken = j - 1 if stage is None else stage
            keep(j - 1, taken, bstage(j))  # x_j = f_{j-1}
        elif act[0] == "adjoint":
            i = act[1]
            stage = bstage(i - 1) if i >= 1 else None
    for j in range(n):  # working values of the forward sweep
        keep(j, j, j + 1)
    keep(n - 1, n, n + 1)  # the last layer is read by b_{n-1}
    keep(n, n, n + 1)  # the loss
    for j in range(n - 1, 0, -1):
        keep(2 * n - j, 2 * n - j, 2 * n - j + 1)  # the running gradient
    from .baselines import _schedule_from_intervals

    nodes_a, starts_a, ends_a = _merge(nodes, starts, ends)
    return _schedule_from_intervals(graph, nodes_a, starts_a, ends_a)


def _merge(nodes: list[int], starts: list[int], ends: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Union of the intervals ``(start, end]`` of each node (so that no two overlap)."""
    by: dict[int, list[tuple[int, int]]] = {}
    for v, a, b in zip(nodes, starts, ends):
        if b > a:
            by.setdefault(v, []).append((a, b))
    out_n, out_s, out_e = [], [], []
    for v, ivs in by.items():
        ivs.sort()
        cur_a, cur_b = ivs[0]
        for a, b in ivs[1:]:
            if a <= cur_b:
                cur_b = max(cur_b, b)
            else:
                out_n.append(v)
                out_s.append(cur_a)
                out_e.append(cur_b)
                cur_a, cur_b = a, b
        out_n.append(v)
        out_s.append(cur_a)
        out_e.append(cur_b)
    return out_n, out_s, out_e


#: chains longer than this evaluate a geometric sample of slot counts
MAX_SLOTS_EVALUATED = 64


def griewank_family(graph: Graph) -> list[tuple[int, Schedule]]:
    """``(slots, schedule)`` for the slot counts worth trying (0 up to no recomputation)."""
    info = as_chain(graph, "griewank-logn")
    n = info.n_forward
    L = n + 1
    top = 0
    while binomial_forward_steps(L, top + 1) > L - 1:  # L - 1 advances: nothing is recomputed
        top += 1
    if top + 1 <= MAX_SLOTS_EVALUATED:
        slots = list(range(top + 1))
    else:
        slots = sorted({0, top} | {int(round(x)) for x in np.geomspace(1, top, MAX_SLOTS_EVALUATED)})
    return [(s, griewank_schedule(graph, s, info)) for s in slots]


def solve_griewank_logn(graph: Graph, budget_bytes: int) -> RematResult:
    """``griewank-logn``: REVOLVE with the number of slots that gives the cheapest schedule within the budget.

    More slots never cost more recomputation, so this is the largest slot
    count whose simulated peak fits (every count is simulated: the peak is
    not assumed monotone). Chain training graphs only.
    """
    from .baselines import solve_family

    return solve_family(graph, budget_bytes, "griewank-logn")
