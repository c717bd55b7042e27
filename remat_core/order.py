"""Execution orders: which topological order a graph's operators run in, and what that order costs in memory.

A :class:`~remat_core.Graph` is numbered in *a* topological order, not
necessarily the one its operators ran in: a converter's set iteration can give
a depth-first numbering in which values wait long before anything reads them
(the DTR authors' LSTM recording: 2.7 GB waiting at once against 0.1 GB in the
order it ran). Planning in such an order pays for the numbering, not for the
model. This room holds:

* :func:`~remat_core.order.liveness_peak_bytes` -- the peak of running every node once in an
  order, each value freed after its last reader in that order (the
  checkpoint-all peak of that order);
* :func:`~remat_core.order.liveness_area_bytes` -- the mean bytes live over that run (the area under its
  memory profile over the number of operators): cheap, and on the DTR recordings a lower area goes with a
  cheaper DTR run under a budget, so it ranks orders before they are simulated;
* :func:`~remat_core.order.order_sequence` -- that run as an :class:`~remat_core.sequence.OpSequence`
  (an order expressed as a sequence, judged by
  :func:`~remat_core.sequence.simulate_sequence`);
* :func:`~remat_core.order.memory_aware_order` -- a topological order chosen for memory: a list
  schedule that runs next the ready node that brings a reader closest to
  running, preferring the readers of what was just computed (it recovers an
  execution-like order from a depth-first numbering);
* :func:`~remat_core.order.demand_order` -- the order an eager program with autograd runs: the
  forward by a depth-first walk from the loss, the backward latest-forward-first (it recovers the
  execution order of the DTR authors' TreeLSTM from its depth-first numbering);
* :func:`~remat_core.order.least_area_demand_order` -- the demand order, its walks' input order searched
  (seeded) for the least liveness area;
* :func:`~remat_core.order.accumulation_order` -- the demand order, larger subtrees first and equal ones in the order
  the backward's gradient-accumulation chains sum them (:func:`~remat_core.order.accumulation_chains`);
* :func:`~remat_core.order.candidate_orders` -- the orders a planner should try: the given one
  and the others when they differ;
* :func:`~remat_core.order.renumbered` and :func:`~remat_core.order.sequence_in_original_numbering` -- the graph
  numbered in another order, so that any stage-form planner runs in that
  order, and its plan (as a sequence) brought back to the graph's numbering.

Imports: numpy, and the core's graph and sequence types only.

Examples
--------
>>> from remat_core.zoo import linear_graph
>>> g = linear_graph(4)
>>> order = memory_aware_order(g)
>>> sorted(order.tolist()) == list(range(g.n))
True
>>> liveness_peak_bytes(g, order) == liveness_peak_bytes(g, range(g.n))   # a chain has one order
True
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable

import numpy as np

from .graph import Graph
from .sequence import COMPUTE, FREE, OpSequence, two_phases

__all__ = ["check_order", "liveness_peak_bytes", "liveness_area_bytes", "order_sequence", "memory_aware_order",
           "demand_order", "least_area_demand_order", "accumulation_chains", "accumulation_order", "candidate_orders",
           "renumbered", "sequence_in_original_numbering"]


def check_order(graph: Graph, order: Iterable[int]) -> np.ndarray:
    """``order`` as an int64 array after checking it is a topological order of ``graph``'s nodes.

    Raises
    ------
    ValueError
        Naming ``order``: not a permutation of ``0..n-1``, or a node placed
        before one of its inputs.
    """
    arr = np.asarray(list(order) if not isinstance(order, np.ndarray) else order)
    n = graph.n
    if arr.ndim != 1 or arr.size != n or (n and (arr.dtype.kind not in "iu" or
                                                 not np.array_equal(np.sort(arr), np.arange(n)))):
        raise ValueError(f"`order` must be a permutation of the graph's {n} node indices; got {arr[:8]!r}...")
    arr = arr.astype(np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[arr] = np.arange(n)
    dep_ptr, dep_idx = graph.csr[0], graph.csr[1]
    if dep_idx.size:
        reader = np.repeat(np.arange(n), np.diff(dep_ptr))
        bad = np.flatnonzero(pos[dep_idx] >= pos[reader])
        if bad.size:
            e = int(bad[0])
            raise ValueError(f"`order` is not topological: node {int(reader[e])} ({graph.names[int(reader[e])]!r}) "
                             f"comes before its input {int(dep_idx[e])}")
    return arr


def _last_reader_positions(graph: Graph, pos: np.ndarray) -> np.ndarray:
    """For each value, the position (in the order) of its last reader; its own position when nothing reads it."""
    user_ptr, user_idx = graph.csr[2], graph.csr[3]
    last = pos.copy()
    if user_idx.size:
        owner = np.repeat(np.arange(graph.n), np.diff(user_ptr))
        np.maximum.at(last, owner, pos[user_idx])
    return last


def order_sequence(graph: Graph, order: Iterable[int]) -> OpSequence:
    """Every node once, in ``order``; each value freed right after its last reader (a sink right after it runs).

    The frees follow the compute that makes them possible, so the instant of
    a computation counts its inputs, as :func:`remat_core.simulate` does.
    """
    arr = check_order(graph, order)
    pos = np.empty(graph.n, dtype=np.int64)
    pos[arr] = np.arange(graph.n)
    last = _last_reader_positions(graph, pos)
    dep_ptr, dep_idx = graph.csr[0], graph.csr[1]
    kinds: list[int] = []
    nodes: list[int] = []
    for p, k in enumerate(arr.tolist()):
        kinds.append(COMPUTE)
        nodes.append(k)
        for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist():
            if last[i] == p:
                kinds.append(FREE)
                nodes.append(i)
        if last[k] == p:
            kinds.append(FREE)
            nodes.append(k)
    return OpSequence(np.asarray(kinds, dtype=np.int8), np.asarray(nodes, dtype=np.int64))


def liveness_peak_bytes(graph: Graph, order: Iterable[int]) -> int:
    """Peak of :func:`~remat_core.order.order_sequence` (fixed bytes and workspace included), without building it."""
    arr = check_order(graph, order)
    n = graph.n
    pos = np.empty(n, dtype=np.int64)
    pos[arr] = np.arange(n)
    last = _last_reader_positions(graph, pos)
    mem = graph.memory_bytes
    # bytes allocated at each position, bytes freed after it
    freed = np.zeros(n + 1, dtype=np.int64)
    np.add.at(freed, last, mem)
    alloc = mem[arr]
    running = np.cumsum(alloc) - np.concatenate(([0], np.cumsum(freed[:n])[:-1]))
    inst = running + graph.workspace_bytes[arr]
    return int(graph.fixed_bytes + (inst.max() if n else 0))


def liveness_area_bytes(graph: Graph, order: Iterable[int]) -> float:
    """Mean bytes resident over :func:`~remat_core.order.order_sequence` of ``order``: each value counts from its
    computation to its last reader (both included), the area under the memory profile over ``graph.n`` (fixed
    bytes and workspace left out). Orders with values waiting long before their readers have a large area.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> 0 < liveness_area_bytes(g, range(g.n)) <= liveness_peak_bytes(g, range(g.n))   # a mean, at most the peak
    True
    """
    arr = check_order(graph, order)
    n = graph.n
    if n == 0:
        return 0.0
    pos = np.empty(n, dtype=np.int64)
    pos[arr] = np.arange(n)
    last = _last_reader_positions(graph, pos)
    return float((graph.memory_bytes.astype(np.float64) * (last - pos + 1)).sum() / n)


def memory_aware_order(graph: Graph) -> np.ndarray:
    """A topological order chosen for memory (a greedy list schedule).

    Among the ready nodes (every input computed), run next the one that
    brings a reader closest to running: the smallest number of inputs still
    missing of any of its readers (a sink counts 0). Ties go to the node
    whose newest input was computed most recently (the readers of what was
    just produced run first, as an eager program does), then to the smallest
    net allocation (``memory_bytes[k]`` minus the bytes of the inputs whose
    last pending reader it is), then to the smallest index. Values are thus
    produced when something is about to read them, not long before, which is
    what a depth-first numbering gets wrong. A source (a node without
    inputs) becomes ready only once one of its readers has every other input.
    Keys only fall as nodes run, so the ready set is a heap re-keyed lazily.

    When the graph marks backward nodes (:func:`remat_core.sequence.two_phases`), every forward
    node runs before any backward node: a backward pass starts from the
    loss's gradient, which executors provide only after the forward (that
    input is not an edge of the graph), so an order that starts the backward
    early is not one a training step can run.

    Returns
    -------
    numpy.ndarray
        The order (int64, a permutation of ``0..n-1``).
    """
    n = graph.n
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    mem = graph.memory_bytes.tolist()
    inputs = [sorted(set(dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist())) for k in range(n)]
    readers = [sorted(set(user_idx[user_ptr[k]:user_ptr[k + 1]].tolist())) for k in range(n)]
    waiting = [len(ins) for ins in inputs]               # inputs not computed yet
    pending = [len(rs) for rs in readers]                # readers not run yet
    when = [-1] * n                                      # position at which each value was computed
    done = [False] * n
    order: list[int] = []

    bwd = graph.is_backward.tolist()
    phased = two_phases(graph)
    forward_left = sum(1 for b in bwd if not b) if phased else 0

    def key(k: int) -> tuple[int, int, int, int, int]:
        close = min((waiting[j] for j in readers[k]), default=0)
        newest = max((when[i] for i in inputs[k]), default=-1)
        net = mem[k] - sum(mem[i] for i in inputs[k] if pending[i] == 1)
        return (int(phased and bwd[k]), close, -newest, net, k)

    # sources (no inputs) wait until a reader has every other input: computed earlier, they would only wait
    source = [not ins for ins in inputs]
    missing = [sum(1 for i in ins if not source[i]) for ins in inputs]   # non-source inputs not computed yet
    released = [False] * n

    def release_sources(j: int) -> list[int]:
        out = [i for i in inputs[j] if source[i] and not released[i]]
        for i in out:
            released[i] = True
        return out

    heap = []
    for k in range(n):
        if missing[k] == 0 and not source[k]:
            if waiting[k] == 0:
                heap.append(key(k))
            for i in release_sources(k):
                heap.append(key(i))
        elif source[k] and not readers[k]:               # a lone node
            released[k] = True
            heap.append(key(k))
    heapq.heapify(heap)
    while heap:
        entry = heapq.heappop(heap)
        k = entry[-1]
        if done[k]:
            continue
        if phased and bwd[k] and forward_left:           # forward sources held back for backward readers: now
            late = [i for i in range(n) if source[i] and not released[i] and not bwd[i]]
            for i in late:
                released[i] = True
                heapq.heappush(heap, key(i))
            if late:
                heapq.heappush(heap, entry)
                continue
        fresh = key(k)
        if fresh != entry:                               # a stale key: queue the current one
            heapq.heappush(heap, fresh)
            continue
        done[k] = True
        if phased and not bwd[k]:
            forward_left -= 1
        when[k] = len(order)
        order.append(k)
        touched = set()
        for i in inputs[k]:
            pending[i] -= 1
            if pending[i] == 1:                          # its last pending reader now frees it
                touched.update(readers[i])
        for j in readers[k]:
            waiting[j] -= 1
            touched.update(inputs[j])                    # a reader came closer: its other inputs' keys fell
            if waiting[j] == 0:
                touched.add(j)
            if not source[k]:
                missing[j] -= 1
                if missing[j] == 0:
                    touched.update(release_sources(j))
        for r in touched:
            if not done[r] and waiting[r] == 0 and (released[r] or not source[r]):
                heapq.heappush(heap, key(r))
    return np.asarray(order, dtype=np.int64)


def demand_order(graph: Graph, descending: bool = False) -> np.ndarray:
    """The order an eager program with autograd runs: the forward by demand, the backward latest-forward-first.

    The forward nodes run in post-order of a depth-first walk from the
    forward roots (forward nodes no forward node reads: the loss, in
    ascending index order), each node's unvisited inputs walked in ascending
    index order (``descending``: descending), so that every value is
    produced by a walk that reads it right after, as a recursive program
    evaluates its expressions. The backward nodes then run as PyTorch's
    autograd engine picks them: among the ready ones, the one whose forward
    inputs were produced latest (a node reading no forward value takes the
    latest of its backward inputs), ties to the smallest index. A graph with
    no backward nodes is walked from its sinks.

    A depth-first numbering of a recorded graph (the DTR authors' TreeLSTM)
    holds values long before their readers run; this order brings the
    recording's dependence structure, not its numbering, back to an
    execution order. Which walk direction suits a graph is not known in
    advance: :func:`candidate_orders` offers both.

    Returns
    -------
    numpy.ndarray
        The order (int64, a topological permutation of ``0..n-1``).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> demand_order(g).tolist() == list(range(g.n))   # a chain has one order
    True
    """
    rank = -np.arange(graph.n) if descending else np.arange(graph.n)
    return _demand_walk(graph, rank)


def _demand_walk(graph: Graph, rank: np.ndarray, by_rank: bool = False) -> np.ndarray:
    """:func:`~remat_core.order.demand_order` with each node's inputs walked in increasing ``rank``; with
    ``by_rank``, the forward roots too are walked in increasing ``rank`` and the backward's ties go to the lower
    rank (else both follow the index)."""
    n = graph.n
    bwd = graph.is_backward.tolist()
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    rk = rank.tolist()
    inputs = [sorted(set(dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist()), key=rk.__getitem__) for k in range(n)]
    readers = [sorted(set(user_idx[user_ptr[k]:user_ptr[k + 1]].tolist())) for k in range(n)]
    done = [False] * n
    order: list[int] = []
    roots = [k for k in range(n) if not bwd[k] and not any(not bwd[j] for j in readers[k])]
    if by_rank:
        roots.sort(key=rk.__getitem__)
    for root in roots:
        stack = [root]
        while stack:
            k = stack.pop()
            if done[k]:
                continue
            todo = [i for i in inputs[k] if not done[i]]
            if todo:   # k again once its inputs are done, the first input walked first
                stack.append(k)
                stack.extend(reversed(todo))
                continue
            done[k] = True
            order.append(k)
    pos = [-1] * n
    for p, k in enumerate(order):
        pos[k] = p
    prio = [-1] * n
    for k in range(n):
        if not done[k]:
            fwd_in = [pos[i] for i in inputs[k] if done[i]]
            prio[k] = max(fwd_in) if fwd_in else max((prio[i] for i in inputs[k]), default=-1)
    tie = rk if by_rank else list(range(n))
    waiting = [sum(1 for i in inputs[k] if not done[i]) for k in range(n)]
    ready = [(-prio[k], tie[k], k) for k in range(n) if not done[k] and waiting[k] == 0]
    heapq.heapify(ready)
    while ready:
        k = heapq.heappop(ready)[2]
        done[k] = True
        order.append(k)
        for j in readers[k]:
            if not done[j]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, (-prio[j], tie[j], j))
    return np.asarray(order, dtype=np.int64)


def accumulation_chains(graph: Graph, min_share: float = 0.9) -> list[list[int]]:
    """The backward's gradient-accumulation chains: paths ``v1 -> v2 -> ...`` of backward nodes, each read only
    by the next, each next reading two values (the sum so far and one more piece) and all of one size, kept
    when at least 3 long and ``min_share`` of the longest. A weight read by every cell of a recursive network
    gets its gradient summed this way, one cell after another in the order the backward ran: the chains carry
    that order whatever the numbering.

    Where two inputs of a node could continue its chain (the sum so far and a piece of the same size), the one
    with the longer chain behind it does (ties: the lower index); one chain per end, found in one pass.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> accumulation_chains(linear_graph(4))   # a chain's backward is one such path: the gradient, node by node
    [[5, 6, 7, 8]]
    """
    n = graph.n
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    bwd, mem = graph.is_backward, graph.memory_bytes
    nxt = [-1] * n
    prevs: list[list[int]] = [[] for _ in range(n)]
    for k in range(n):
        if not bwd[k]:
            continue
        readers = set(user_idx[user_ptr[k]:user_ptr[k + 1]].tolist())
        if len(readers) == 1:
            j = readers.pop()
            if bwd[j] and mem[j] == mem[k] and len(set(dep_idx[dep_ptr[j]:dep_ptr[j + 1]].tolist())) == 2:
                nxt[k] = j
                prevs[j].append(k)
    depth = [1] * n
    for k in check_order(graph, range(n)).tolist():   # inputs first: the numbering is topological
        if prevs[k]:
            depth[k] = 1 + max(depth[i] for i in prevs[k])
    chains = []
    for k in range(n):
        if prevs[k] and nxt[k] < 0 and depth[k] >= 3:
            c = [k]
            while prevs[c[-1]]:
                c.append(max(prevs[c[-1]], key=lambda i: (depth[i], -i)))
            chains.append(c[::-1])
    longest = max((len(c) for c in chains), default=0)
    return [c for c in chains if len(c) >= min_share * longest]


def accumulation_order(graph: Graph) -> np.ndarray:
    """The demand order (:func:`~remat_core.order.demand_order`) whose walk takes first the input that heads the
    larger forward subtree, and among equal subtrees the one whose backward comes later by the gradient-
    accumulation chains (:func:`~remat_core.order.accumulation_chains`), so that the backward (latest forward
    first) meets the cells in the order the chains sum them.

    A piece of a chain gets its position along the chain (0 to 1); a backward node the smallest position of the
    pieces it leads to; a forward value the smallest of its backward readers' and of its forward inputs' (its
    subtree's backward starts there). The subtree size counts forward inputs as a tree (shared ones more than
    once). Ties go to the lower index; roots and the backward's ties follow the same ranking. On the DTR
    authors' TreeLSTM recorded in a depth-first numbering, whose symmetric subtrees leave a plain demand walk to
    the numbering's luck, this order is as cheap under DTR at 0.3 of the peak as the order the model ran in
    (1.33x in both numberings, against 1.62x for the best other order of the depth-first file).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> accumulation_order(linear_graph(3)).tolist() == list(range(linear_graph(3).n))   # a chain has one order
    True
    """
    n = graph.n
    dep_ptr, dep_idx, user_ptr, user_idx = graph.csr
    bwd = graph.is_backward.tolist()
    inputs = [set(dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist()) for k in range(n)]
    piece = [math.inf] * n
    for c in accumulation_chains(graph):
        for p, v in enumerate(c):
            for q in ([v] if p == 0 else [i for i in inputs[v] if i != c[p - 1]]):
                piece[q] = min(piece[q], p / (len(c) - 1))
    order = check_order(graph, range(n)).tolist()   # the numbering is topological
    reach = list(piece)                                # backward: the earliest piece it leads to
    for k in reversed(order):
        if bwd[k]:
            for j in user_idx[user_ptr[k]:user_ptr[k + 1]].tolist():
                if bwd[j] and reach[j] < reach[k]:
                    reach[k] = reach[j]
    sub = [math.inf] * n
    size = [0.0] * n
    for k in order:
        if bwd[k]:
            continue
        users = user_idx[user_ptr[k]:user_ptr[k + 1]].tolist()
        sub[k] = max((reach[j] for j in users if bwd[j] and math.isfinite(reach[j])), default=math.inf)
        size[k] = 1.0
        for i in inputs[k]:
            if not bwd[i]:
                sub[k] = min(sub[k], sub[i])
                size[k] += size[i]
    later = np.array([-s if math.isfinite(s) else 2.0 for s in sub])   # no chain behind it: walked last
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((np.arange(n), later, -np.asarray(size)))] = np.arange(n)
    return _demand_walk(graph, rank, by_rank=True)


def least_area_demand_order(graph: Graph, tries: int = 16, seed: int = 0) -> np.ndarray:
    """Of ``tries`` demand orders (:func:`~remat_core.order.demand_order`) whose walks take each node's inputs in
    a random order (seeded: the same graph gives the same order), the one with the least
    :func:`~remat_core.order.liveness_area_bytes`.

    Which input a walk takes first decides which sub-computations wait for the others, and the numbering that
    :func:`~remat_core.order.demand_order` follows may be a poor guide (the DTR authors' TreeLSTM numbered
    depth-first: its two demand orders cost 2.4x at 0.3 of the peak, where the order it ran in costs 1.34x). On
    the recordings a lower area goes with a cheaper DTR run, and a walk costs a few milliseconds, so a handful of
    them is cheap next to one simulated run.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> least_area_demand_order(g).tolist() == list(range(g.n))   # a chain has one order
    True
    """
    if isinstance(tries, bool) or not isinstance(tries, (int, np.integer)) or tries < 1:
        raise ValueError(f"`tries` must be a positive integer; got {tries!r}")
    rng = np.random.default_rng(seed)
    best, best_area = None, math.inf
    for _ in range(int(tries)):
        order = _demand_walk(graph, rng.permutation(graph.n))
        area = liveness_area_bytes(graph, order)
        if area < best_area:
            best, best_area = order, area
    return best


def candidate_orders(graph: Graph) -> dict[str, np.ndarray]:
    """The orders worth planning in: ``"given"`` (the graph's numbering), ``"memory-aware"``
    (:func:`~remat_core.order.memory_aware_order`), ``"demand"`` / ``"demand-descending"``
    (:func:`~remat_core.order.demand_order`), ``"demand-area"``
    (:func:`~remat_core.order.least_area_demand_order`) and ``"accumulation"``
    (:func:`~remat_core.order.accumulation_order`), each when it differs from the ones before it."""
    out = {"given": np.arange(graph.n, dtype=np.int64)}
    for name, order in (("memory-aware", memory_aware_order(graph)), ("demand", demand_order(graph)),
                        ("demand-descending", demand_order(graph, descending=True)),
                        ("demand-area", least_area_demand_order(graph)),
                        ("accumulation", accumulation_order(graph))):
        if not any(np.array_equal(order, other) for other in out.values()):
            out[name] = order
    return out


def renumbered(graph: Graph, order: Iterable[int]) -> Graph:
    """``graph`` with node ``order[j]`` stored at index ``j`` (same names, costs, sizes and edges).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(2)
    >>> renumbered(g, range(g.n)).names == g.names
    True
    """
    arr = check_order(graph, order)
    pos = np.empty(graph.n, dtype=np.int64)
    pos[arr] = np.arange(graph.n)
    dep_ptr, dep_idx = graph.csr[0], graph.csr[1]
    deps = [sorted(pos[dep_idx[dep_ptr[k]:dep_ptr[k + 1]]].tolist()) for k in arr.tolist()]
    out = Graph.from_arrays(deps, cost=graph.cost[arr], memory_bytes=graph.memory_bytes[arr],
                            workspace_bytes=graph.workspace_bytes[arr], is_backward=graph.is_backward[arr],
                            names=[graph.names[k] for k in arr.tolist()], fixed_bytes=graph.fixed_bytes,
                            name=graph.name, meta=graph.meta)
    return out   # a topological input keeps its positions (Graph's stable sort), so index j is order[j]


def sequence_in_original_numbering(sequence: OpSequence, order: Iterable[int]) -> OpSequence:
    """A sequence over :func:`~remat_core.order.renumbered` ``(graph, order)`` with its nodes named in ``graph``'s numbering."""
    arr = np.asarray(order, dtype=np.int64)
    return OpSequence(sequence.kind.copy(), arr[sequence.node])
