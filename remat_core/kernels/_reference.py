"""Reference kernels: the readable specification and the test oracle.

Every other implementation (``_numba.py``, the native module) has the same
signatures and must return identical integer results. Inputs are contiguous
int64 arrays; schedules and adjacency are in CSR form (``ptr``, ``idx``, rows
sorted ascending).

Simulation (:func:`simulate`)
-----------------------------
For each stage ``t``:

1. Memory starts at ``fixed + sum(mem[i] for i in S[t])``.
2. Every ``i`` kept into the next stage (``S[t+1]``) must be computed or kept
   in stage ``t`` (error code 2, reported for stage ``t+1``; checked before the
   computations of stage ``t``).
3. For the nodes ``k`` of ``R[t]`` in ascending order: every input ``i`` of
   ``k`` must be resident: kept (``i`` in ``S[t]``) or computed earlier in this
   stage (error code 1). Allocate ``mem[k]``; the memory at this step is the
   running total plus ``ws[k]``; it is recorded in ``step_mem`` (one entry per
   computation, in CSR order of ``R``). Then each input ``i`` of ``k`` is freed
   if it is not kept into stage ``t+1`` and no later user ``j > k`` of ``i`` is
   computed in stage ``t``.
4. Values still allocated at the end of the stage are dropped; stage ``t+1``
   starts again from its own ``S`` row.

The peak is the largest step value; ties go to the first step reached
(smallest stage, then smallest node). Errors stop the simulation at the first
violation in the order above.

``info`` holds ``[err_code, err_stage, err_node, err_input, peak, peak_stage,
peak_node]``; ``err_code`` is 0 when the schedule is valid, 1 for a missing
input (``err_node`` needs ``err_input``), 2 for a kept value that was not
available in the previous stage (``err_node`` is that value, ``err_input`` is
-1).

Optimal R given S (:func:`r_given_s`)
-------------------------------------
The second phase of Checkmate's two-phase rounding: given the checkpoint
matrix ``S``, the cheapest ``R`` that makes ``(R, S)`` valid. In stage ``t``
a node must be computed if it is ``t`` itself, if it is kept into stage
``t+1`` but not kept into ``t`` (``S[t+1, i] = 1``, ``S[t, i] = 0``), or if
it is an input of a node computed in stage ``t`` and not kept into ``t``.
Nodes are visited from ``t`` down to 0, so the closure is complete in one
pass. Every computation in this ``R`` is forced by ``S``, so it is the unique
minimal ``R`` for any non-negative costs.

Path inequality separation (:func:`path_cuts`)
----------------------------------------------
The exact separation of :mod:`remat_core.formulation.cuts`'s path
inequalities at an LP point. Inputs: ``W[g, b]`` (``n x n``, row-major), the
weight of value ``b`` on a path in stage ``g`` (``S*[g, b]``, ``inf`` where
``b`` has no keep column in stage ``g``); ``cum[t, a]`` (``(n + 1) x n``),
the recomputations of ``a`` in stages ``0..t-1``; ``first[g, v]`` (``n x
n``), the first reader of ``v`` at or after stage ``g`` (``n``: none);
``Rcol`` and ``Scol`` (``n x n``), the column of ``R[t, i]`` and ``S[t, i]``
(-1: none).

1. For every stage ``g`` and pair ``a, y``, ``D[g, a, y]`` is the least
   weight of a path ``a -> y`` (both ends counted; ``D[g, y, y] = W[g, y]``),
   by a pass over the nodes in topological (index) order:
   ``D[g, a, y] = min over inputs z of y of D[g, a, z]`` (the first input, in
   ascending order, on ties), plus ``W[g, y]``.
2. Triple ``(g, a, v)`` with ``a < g`` and ``t = first[g, v] < n`` has
   left-hand side ``cum[t + 1, a] - cum[g, a] + D[g, a, v]``; it is violated
   when that is below ``1 - tol``, by ``1 - lhs``.
3. The violated triples, in ``(g, a, v)`` order, are stably sorted by
   violation, largest first, and the first ``max_cuts`` become rows: the
   ``R[s, a]`` columns for ``s = g..t`` that exist, in stage order, then the
   ``S[g, b]`` columns of the path from ``v`` back to ``a``.

Returns ``(violation, row_ptr, row_idx)``: float64, and the rows in CSR.
"""

from __future__ import annotations

import math

import numpy as np

ERR_OK = 0
ERR_MISSING_INPUT = 1
ERR_KEPT_UNAVAILABLE = 2


def simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed):
    """Simulate a schedule; returns ``(info, step_mem)`` (see the module docstring)."""
    R_ptr, R_idx, S_ptr, S_idx = (a.tolist() for a in (R_ptr, R_idx, S_ptr, S_idx))
    dep_ptr, dep_idx, mem, ws = (a.tolist() for a in (dep_ptr, dep_idx, mem, ws))
    fixed = int(fixed)
    info = [0, -1, -1, -1, -1, -1, -1]
    step_mem = [0] * len(R_idx)
    peak, peak_stage, peak_node = -1, -1, -1

    def fail(code, t, node, inp):
        info[0:4] = [code, t, node, inp]
        return np.asarray(info, dtype=np.int64), np.asarray(step_mem, dtype=np.int64)

    for t in range(n):
        kept = S_idx[S_ptr[t]:S_ptr[t + 1]]
        kept_next = S_idx[S_ptr[t + 1]:S_ptr[t + 2]] if t + 1 < n else []
        computed = R_idx[R_ptr[t]:R_ptr[t + 1]]
        kept_set, kept_next_set, computed_set = set(kept), set(kept_next), set(computed)
        current = fixed + sum(mem[i] for i in kept)
        for i in kept_next:
            if i not in computed_set and i not in kept_set:
                return fail(ERR_KEPT_UNAVAILABLE, t + 1, i, -1)
        last_user = {}
        for k in computed:  # ascending: the last write is the last user in this stage
            for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]]:
                last_user[i] = k
        done = set()
        for step, k in enumerate(computed, start=R_ptr[t]):
            inputs = dep_idx[dep_ptr[k]:dep_ptr[k + 1]]
            for i in inputs:
                if i not in kept_set and i not in done:
                    return fail(ERR_MISSING_INPUT, t, k, i)
            done.add(k)
            current += mem[k]
            at_step = current + ws[k]
            step_mem[step] = at_step
            if at_step > peak:
                peak, peak_stage, peak_node = at_step, t, k
            for i in inputs:
                if last_user[i] == k and i not in kept_next_set:
                    current -= mem[i]
    info[4:7] = [peak, peak_stage, peak_node]
    return np.asarray(info, dtype=np.int64), np.asarray(step_mem, dtype=np.int64)


def r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx):
    """The minimal ``R`` for a checkpoint matrix ``S``; returns ``(R_ptr, R_idx)``."""
    S_ptr, S_idx, dep_ptr, dep_idx = (a.tolist() for a in (S_ptr, S_idx, dep_ptr, dep_idx))
    kept = [-1] * n    # == t when the node is in S[t]
    need = [-1] * n    # == t when the node must be computed in stage t
    R_ptr = [0] * (n + 1)
    R_idx: list[int] = []
    for t in range(n):
        for i in S_idx[S_ptr[t]:S_ptr[t + 1]]:
            kept[i] = t
        need[t] = t
        if t + 1 < n:
            for i in S_idx[S_ptr[t + 1]:S_ptr[t + 2]]:
                if kept[i] != t:
                    need[i] = t
        row = []
        for k in range(t, -1, -1):
            if need[k] != t:
                continue
            row.append(k)
            for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]]:
                if kept[i] != t:
                    need[i] = t
        row.reverse()
        R_idx.extend(row)
        R_ptr[t + 1] = len(R_idx)
    return np.asarray(R_ptr, dtype=np.int64), np.asarray(R_idx, dtype=np.int64)


def path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts):
    """The most violated path inequalities; returns ``(violation, row_ptr, row_idx)`` (module docstring)."""
    W, cum = W.reshape(n, n), cum.reshape(n + 1, n)
    first, Rcol, Scol = first.reshape(n, n), Rcol.reshape(n, n), Scol.reshape(n, n)
    D = np.full((n, n, n), np.inf)
    P = np.full((n, n, n), -1, dtype=np.int64)
    ar = np.arange(n)
    for y in range(n):
        zs = in_idx[in_ptr[y]:in_ptr[y + 1]]
        if len(zs):
            sub = D[:, :, zs]                                   # (g, a, inputs)
            best = np.argmin(sub, axis=2)                       # the first least one
            D[:, :, y] = np.take_along_axis(sub, best[:, :, None], axis=2)[:, :, 0] + W[:, y][:, None]
            P[:, :, y] = zs[best]
        D[:, y, y] = W[:, y]
        P[:, y, y] = -1
    valid = first < n
    t1 = np.where(valid, first + 1, 0)
    lhs = cum[t1[:, None, :], ar[None, :, None]] - cum[ar[:, None, None], ar[None, :, None]] + D   # (g, a, v)
    lhs[~np.broadcast_to(valid[:, None, :], lhs.shape)] = np.inf
    lhs[ar[:, None] <= ar[None, :], :] = np.inf                 # a < g only
    gg, aa, vv = np.nonzero(lhs < 1.0 - tol)
    viol = 1.0 - lhs[gg, aa, vv]
    keep = np.argsort(-viol, kind="stable")[:max_cuts]
    row_ptr, row_idx = [0], []
    for g, a, v in zip(gg[keep].tolist(), aa[keep].tolist(), vv[keep].tolist()):
        cols = Rcol[g:first[g, v] + 1, a]
        row_idx.extend(cols[cols >= 0].tolist())
        b = v
        while b != -1:
            row_idx.append(int(Scol[g, b]))
            b = int(P[g, a, b])
        row_ptr.append(len(row_idx))
    return viol[keep], np.asarray(row_ptr, dtype=np.int64), np.asarray(row_idx, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------
# Dynamic Tensor Rematerialization (:func:`dtr`)
# ---------------------------------------------------------------------------------------------------------------
# Heuristic codes shared by every implementation (remat_core.solvers.dtr maps names to them).
DTR_H_DTR, DTR_H_DTR_EQ, DTR_H_DTR_LOCAL, DTR_LRU, DTR_LARGEST, DTR_MSPS, DTR_RANDOM = range(7)
DTR_OK, DTR_NO_FIT, DTR_THRASH = 0, 1, 2
_M64 = (1 << 64) - 1


def dtr_random_key(seed, evictions, v):
    """The ``random`` heuristic's score of value ``v`` at eviction number ``evictions``: splitmix64's
    finalizer of ``seed + evictions * 2**32 + v + 1`` (all mod 2**64), its top 53 bits as a float."""
    z = ((seed + (evictions << 32) + v + 1) * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    z ^= z >> 31
    return float(z >> 11)


def _uf_find(parent, x):
    """Union-find root of ``x`` (with path compression)."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        parent[x], x = root, parent[x]
    return root


def _uf_union(parent, size, class_cost, a, b):
    """Merge the classes of ``a`` and ``b``: the larger root survives (the smaller index on ties), costs added."""
    ra, rb = _uf_find(parent, a), _uf_find(parent, b)
    if ra == rb:
        return
    if size[ra] < size[rb] or (size[ra] == size[rb] and rb < ra):
        ra, rb = rb, ra
    parent[rb] = ra
    size[ra] += size[rb]
    class_cost[ra] += class_cost[rb]


def dtr(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, heuristic, seed, max_computes,
        keep_dead=0):
    """Run DTR's greedy online evictor over the topological order; returns ``(info, R_ptr, R_idx, S_ptr, S_idx)``.

    The graph's nodes are the operator sequence of one training step. The run
    advances in frontier-advancing stages, so that it is a Checkmate schedule
    that :func:`simulate` accepts and judges. Stage ``t``:

    1. **What to compute.** ``R[t]`` is ``t`` plus every non-resident value it
       needs, recursively: a depth-first walk from ``t`` over inputs that are
       not resident. The nodes are computed in ascending order (a topological
       order), which is the simulator's order.
    2. **Pins.** Every input of a node of ``R[t]`` is pinned (one pin per
       edge) until the node that reads it has run; a pinned value is never
       evicted. Values resident but not read in this stage are the candidates.
    3. **Each node ``k`` of ``R[t]``, ascending.** While ``current + mem[k] +
       ws[k] > budget``, evict the candidate (resident, unpinned, ``mem > 0``)
       with the lowest score; ties go to the smallest node index. If no
       candidate is left the run fails (``DTR_NO_FIT``), reporting
       ``current + mem[k] + ws[k]``. If ``max_computes`` computations were
       already made, it fails with ``DTR_THRASH``. Otherwise ``k`` is computed:
       ``clock += 1``; ``current += mem[k]``; the step's memory is ``current
       + ws[k]`` (the run's peak is the largest); ``k`` and its inputs are
       accessed at ``clock``. Each input whose last pin this was, and ``k``
       itself when it is not pinned, is freed if it is dead (no node after
       ``t`` reads it: ``last_use <= t``; ``last_use`` is the largest reader,
       or the node itself when nothing reads it) and no value still read
       after ``t`` would need it to be recomputed: no non-resident value
       ``j < t`` reachable from it through readers (a depth-first walk over
       non-resident readers, dead ones included) has ``last_use > t``. With
       ``keep_dead`` it is also kept while any of its readers has ``last_use
       > t`` (resident or not), so that evicting that reader later leaves a
       one-step recomputation. A dead value that is still needed that way
       stays resident as an ordinary candidate: freeing it would make the
       recomputation reach back through every dead ancestor (on an LSTM, the
       whole forward pass), and a stage computes its row in ascending order,
       so such a long recomputation holds every value of the row that a later
       node of the row reads, all at once.
    4. **The schedule.** ``S[t]`` is the set of values resident when stage
       ``t`` began, minus those evicted during stage ``t`` (they were not read
       in it, being unpinned: evicting them at the stage boundary is the same
       plan, and the simulator then never counts them in stage ``t``).

    With that, at every computation the simulator's memory is at most the
    run's (the run counts an evicted value until its eviction, a dead one
    until its last read, as the simulator does), so a run that succeeds is a
    schedule within ``budget``.

    Scores (lower is evicted first) use ``stale = clock - last_access + 1``
    and ``m = mem`` as floats:

    * ``DTR_H_DTR``: ``(cost[v] + cost of e*(v)) / (m * stale)``. ``e*(v)``,
      the evicted neighbourhood: the non-resident values reachable from ``v``
      through inputs (what rematerializing ``v`` would recompute), then the
      computed, non-resident values still read later (``last_use > t``)
      reachable through readers (what would need ``v``). Each walk is a
      depth-first search with an explicit stack, neighbours pushed in
      ascending order, costs added in the order values are popped.
    * ``DTR_H_DTR_EQ``: the same with e* approximated by union-find classes
      (the DTR paper's ``h_DTR_eq``): ``cost[v]`` plus, once per distinct
      class, the class cost of each non-resident input and of each computed,
      non-resident reader with ``last_use > t`` (inputs first, ascending).
      Evicting (or freeing) ``v`` adds ``cost[v]`` to its class (a new
      singleton the first time) and merges it with those neighbours' classes
      (the larger class's root survives, the smaller root on ties; costs
      added); computing ``v`` again subtracts ``cost[v]`` from its class,
      which is not split.
    * ``DTR_H_DTR_LOCAL``: ``cost[v] / (m * stale)``.
    * ``DTR_LRU``: ``last_access`` (the stalest first).
    * ``DTR_LARGEST``: ``-m``.
    * ``DTR_MSPS``: ``(cost[v] + cost of the non-resident ancestors walk) / m``
      (the recompute cost per byte freed).
    * ``DTR_RANDOM``: :func:`dtr_random_key` of ``(seed, evictions so far, v)``.

    ``info`` is ``[code, fail_stage, fail_node, fail_need_bytes, peak,
    computations, evictions]``; ``code`` is ``DTR_OK``, ``DTR_NO_FIT`` or
    ``DTR_THRASH``. On failure the schedule arrays are incomplete.
    """
    dep_ptr, dep_idx, user_ptr, user_idx = (a.tolist() for a in (dep_ptr, dep_idx, user_ptr, user_idx))
    mem, ws, cost = mem.tolist(), ws.tolist(), cost.tolist()
    fixed, budget, seed, max_computes, keep_dead = int(fixed), int(budget), int(seed), int(max_computes), int(keep_dead)
    inputs = [dep_idx[dep_ptr[k]:dep_ptr[k + 1]] for k in range(n)]
    readers = [user_idx[user_ptr[k]:user_ptr[k + 1]] for k in range(n)]
    last_use = [rs[-1] if rs else k for k, rs in enumerate(readers)]
    resident = [False] * n
    pins = [0] * n
    used_stage = [-1] * n         # == t when some node of R[t] reads it
    computed_stage = [-1] * n
    last_access = [0] * n
    parent, size, class_cost, in_uf = list(range(n)), [1] * n, [0.0] * n, [False] * n
    info = [DTR_OK, -1, -1, -1, -1, 0, 0]
    R_ptr, R_idx, S_ptr, S_idx = [0], [], [0], []
    current, clock, peak = fixed, 0, -1

    def find(x):
        return _uf_find(parent, x)

    def union(a, b):
        _uf_union(parent, size, class_cost, a, b)

    def evicted_reader(j, t):   # a computed, non-resident value still read after stage t
        return j < t and not resident[j] and last_use[j] > t

    def can_free(i, t):         # dead, and no value still read later needs it to be recomputed
        if last_use[i] > t or (keep_dead and any(last_use[j] > t for j in readers[i])):
            return False
        seen, stack = {i}, [i]
        while stack:
            for j in readers[stack.pop()]:
                if j < t and not resident[j] and j not in seen:
                    if last_use[j] > t:
                        return False
                    seen.add(j)
                    stack.append(j)
        return True

    def leave(v, t):            # v stops being resident (evicted or dead): the classes of h_dtr_eq
        if heuristic != DTR_H_DTR_EQ:
            return
        if not in_uf[v]:
            in_uf[v], class_cost[v] = True, cost[v]
        else:
            class_cost[find(v)] += cost[v]
        for i in inputs[v]:
            if not resident[i]:
                union(v, i)
        for j in readers[v]:
            if evicted_reader(j, t):
                union(v, j)

    def walk_cost(v, t, down):  # cost of the non-resident ancestors of v (then, if down, of the evicted readers)
        seen = {v}
        total = 0.0
        stack = [i for i in inputs[v] if not resident[i]]
        seen.update(stack)
        while stack:
            x = stack.pop()
            total += cost[x]
            for i in inputs[x]:
                if not resident[i] and i not in seen:
                    seen.add(i)
                    stack.append(i)
        if down:
            stack = [j for j in readers[v] if evicted_reader(j, t) and j not in seen]
            seen.update(stack)
            while stack:
                x = stack.pop()
                total += cost[x]
                for j in readers[x]:
                    if evicted_reader(j, t) and j not in seen:
                        seen.add(j)
                        stack.append(j)
        return total

    def score(v, t):
        m, stale = float(mem[v]), float(clock - last_access[v] + 1)
        if heuristic == DTR_H_DTR:
            return (cost[v] + walk_cost(v, t, True)) / (m * stale)
        if heuristic == DTR_H_DTR_EQ:
            total, roots = cost[v], set()
            for x in [i for i in inputs[v] if not resident[i]] + [j for j in readers[v] if evicted_reader(j, t)]:
                r = find(x)
                if r not in roots:
                    roots.add(r)
                    total += class_cost[r]
            return total / (m * stale)
        if heuristic == DTR_H_DTR_LOCAL:
            return cost[v] / (m * stale)
        if heuristic == DTR_LRU:
            return float(last_access[v])
        if heuristic == DTR_LARGEST:
            return -m
        if heuristic == DTR_MSPS:
            return (cost[v] + walk_cost(v, t, False)) / m
        return dtr_random_key(seed, info[6], v)

    def fail(code, t, k, need):
        info[0:4] = [code, t, k, need]
        return tuple(np.asarray(a, dtype=np.int64) for a in (info, R_ptr, R_idx, S_ptr, S_idx))

    for t in range(n):
        kept = [v for v in range(t) if resident[v]]
        retro = set()
        need, stack = {t}, [t]
        while stack:
            for i in inputs[stack.pop()]:
                if not resident[i] and i not in need:
                    need.add(i)
                    stack.append(i)
        row = sorted(need)
        for k in row:
            for i in inputs[k]:
                pins[i] += 1
                used_stage[i] = t
        for k in row:
            while current + mem[k] + ws[k] > budget:
                best, best_score = -1, 0.0
                for v in range(n):
                    if resident[v] and pins[v] == 0 and mem[v] > 0:
                        s = score(v, t)
                        if best == -1 or s < best_score:
                            best, best_score = v, s
                if best == -1:
                    return fail(DTR_NO_FIT, t, k, current + mem[k] + ws[k])
                resident[best] = False
                current -= mem[best]
                info[6] += 1
                if computed_stage[best] != t and used_stage[best] != t:
                    retro.add(best)
                leave(best, t)
            if info[5] == max_computes:
                return fail(DTR_THRASH, t, k, current + mem[k] + ws[k])
            info[5] += 1
            clock += 1
            if heuristic == DTR_H_DTR_EQ and in_uf[k]:
                class_cost[find(k)] -= cost[k]
            resident[k], computed_stage[k], last_access[k] = True, t, clock
            current += mem[k]
            peak = max(peak, current + ws[k])
            for i in inputs[k]:
                last_access[i] = clock
                pins[i] -= 1
                if pins[i] == 0 and resident[i] and can_free(i, t):
                    resident[i] = False
                    current -= mem[i]
                    leave(i, t)
            if pins[k] == 0 and can_free(k, t):
                resident[k] = False
                current -= mem[k]
                leave(k, t)
        R_idx.extend(row)
        R_ptr.append(len(R_idx))
        S_idx.extend(v for v in kept if v not in retro)
        S_ptr.append(len(S_idx))
    info[4] = peak
    return tuple(np.asarray(a, dtype=np.int64) for a in (info, R_ptr, R_idx, S_ptr, S_idx))


# ---------------------------------------------------------------------------------------------------------------
# DTR as it runs, recorded as an operation sequence (:func:`dtr_sequence`)
# ---------------------------------------------------------------------------------------------------------------
SEQ_COMPUTE, SEQ_FREE = 0, 1   # the event kinds of remat_core.sequence (COMPUTE, FREE)


def dtr_sequence(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, order, heuristic, seed,
                 max_cost, hold=0):
    """Run DTR's online evictor over ``order`` as the DTR authors' simulator (simrd) does; returns
    ``(info, kind, node, total_cost)``: the run as compute / free events.

    ``order`` is the program: a topological order of the nodes (any, not
    only ``0..n-1``). For each program node ``v``, in order:

    1. **Materialize, depth first.** Each input of ``v``, in ascending index
       order, is locked if it is resident; otherwise it is first
       materialized the same way (its own inputs locked, room made, computed,
       its inputs unlocked) and then locked. A value is thus recomputed just
       before its reader needs it, and only the inputs of what is being
       computed are locked (simrd's ``_materialize``).
    2. **Make room.** While ``current + mem[x] + ws[x] > budget`` for the node
       ``x`` about to run, free the eviction candidate (resident, unlocked,
       ``mem > 0``) with the lowest score; ties go to the smallest index. No
       candidate left: the run fails (``DTR_NO_FIT``), reporting the bytes
       ``x`` needed.
    3. **Compute** ``x``: ``clock += cost[x]`` (time is compute time);
       ``current += mem[x]``; the instant's memory is ``current + ws[x]``
       (the peak is the largest); ``x`` and its inputs are accessed at
       ``clock``; the inputs are unlocked. When the total cost computed
       exceeds ``max_cost`` the run stops as thrashing (``DTR_THRASH``; simrd's
       ``remat_limit``).
    4. **Release.** After a program node ``v`` (not a recomputation) runs,
       each input whose last reader in ``order`` is ``v`` is freed, and ``v``
       itself when nothing reads it (simrd's eager eviction of released
       tensors). A freed or evicted value can be recomputed later from its
       inputs, recursively; a recomputed value whose program readers have all
       run stays resident as an ordinary candidate.

    Every free (eviction or release) is a ``FREE`` event; every computation a
    ``COMPUTE`` event. Values still resident at the end are not freed.

    Scores (lower is freed first) use ``stale = clock - last_access`` in
    compute time (a score is ``inf`` at staleness 0, as in simrd) and ``m =
    mem``. The *evicted neighbours* of ``v`` are its inputs and readers that
    were computed before and are not resident.

    * ``DTR_H_DTR``: ``(cost[v] + cost of e*(v)) / (m * stale)``; ``e*(v)``:
      the values reachable from ``v`` through evicted inputs, then through
      evicted readers (simrd's two regions), each walk depth first.
    * ``DTR_H_DTR_EQ``: the paper's equivalence classes: freeing ``v`` makes
      a new class of cost ``cost[v]`` and merges it with the class of every
      evicted neighbour (union by size, the larger root survives, the smaller
      index on ties); computing ``v`` again takes ``cost[v]`` off its class
      and takes ``v`` out of it (the class is not split). Score:
      ``(cost[v] + sum of the distinct classes of its evicted neighbours) /
      (m * stale)``.
    * ``DTR_H_DTR_LOCAL``: ``cost[v] / (m * stale)``.
    * ``DTR_LRU``: ``last_access``. ``DTR_LARGEST``: ``-m``.
    * ``DTR_MSPS``: ``(cost[v] + cost of the evicted-inputs walk) / m``.
    * ``DTR_RANDOM``: :func:`dtr_random_key` of ``(seed, evictions so far, v)``.

    ``info`` is ``[code, fail_position, fail_node, fail_need_bytes, peak,
    computations, evictions]`` (``evictions`` counts frees made to make room,
    not releases); ``total_cost`` is the cost computed (float).
    """
    dep_ptr, dep_idx, user_ptr, user_idx = (a.tolist() for a in (dep_ptr, dep_idx, user_ptr, user_idx))
    mem, ws, cost, order = mem.tolist(), ws.tolist(), cost.tolist(), order.tolist()
    fixed, budget, seed, max_cost = int(fixed), int(budget), int(seed), float(max_cost)
    inputs = [dep_idx[dep_ptr[k]:dep_ptr[k + 1]] for k in range(n)]
    readers = [user_idx[user_ptr[k]:user_ptr[k + 1]] for k in range(n)]
    pos = [0] * n
    for p, v in enumerate(order):
        pos[v] = p
    last_pos = [max([pos[j] for j in readers[k]], default=pos[k]) for k in range(n)]
    resident, locks, seen_once = [False] * n, [0] * n, [False] * n
    last_access = [0.0] * n
    cls = [-1] * n                                   # the equivalence class of an evicted value (-1: none)
    uf_parent: list[int] = []
    uf_size: list[int] = []
    uf_cost: list[float] = []
    kind: list[int] = []
    node: list[int] = []
    info = [DTR_OK, -1, -1, -1, fixed, 0, 0]
    state = dict(current=fixed, clock=0.0, total=0.0)

    def out():
        return (np.asarray(info, dtype=np.int64), np.asarray(kind, dtype=np.int8), np.asarray(node, dtype=np.int64),
                float(state["total"]))

    def find(x):
        return _uf_find(uf_parent, x)

    def union(a, b):
        _uf_union(uf_parent, uf_size, uf_cost, a, b)

    def evicted(u):
        return seen_once[u] and not resident[u]

    def free(v):
        resident[v] = False
        state["current"] -= mem[v]
        kind.append(SEQ_FREE)
        node.append(v)
        if heuristic == DTR_H_DTR_EQ:
            c = len(uf_parent)
            uf_parent.append(c)
            uf_size.append(1)
            uf_cost.append(cost[v])
            cls[v] = c
            for u in inputs[v] + readers[v]:
                if evicted(u) and cls[u] >= 0:
                    union(c, cls[u])

    def walk(v, through):            # cost of the evicted values reachable from v through inputs or readers
        seen, total = {v}, 0.0
        stack = [u for u in through[v] if evicted(u)]
        seen.update(stack)
        while stack:
            x = stack.pop()
            total += cost[x]
            for u in through[x]:
                if evicted(u) and u not in seen:
                    seen.add(u)
                    stack.append(u)
        return total

    def score(v):
        m, stale = float(mem[v]), state["clock"] - last_access[v]
        if heuristic in (DTR_H_DTR, DTR_H_DTR_EQ, DTR_H_DTR_LOCAL) and stale <= 0.0:
            return math.inf
        if heuristic == DTR_H_DTR:
            return (cost[v] + walk(v, inputs) + walk(v, readers)) / (m * stale)
        if heuristic == DTR_H_DTR_EQ:
            total, roots = cost[v], set()
            for u in inputs[v] + readers[v]:
                if evicted(u) and cls[u] >= 0:
                    r = find(cls[u])
                    if r not in roots:
                        roots.add(r)
                        total += uf_cost[r]
            return total / (m * stale)
        if heuristic == DTR_H_DTR_LOCAL:
            return cost[v] / (m * stale)
        if heuristic == DTR_LRU:
            return last_access[v]
        if heuristic == DTR_LARGEST:
            return -m
        if heuristic == DTR_MSPS:
            return (cost[v] + walk(v, inputs)) / m
        return dtr_random_key(seed, info[6], v)

    def compute(x, p):               # make room, compute x; False when the run stops
        need = mem[x] + ws[x]
        while state["current"] + need > budget:
            best, best_score = -1, 0.0
            for v in range(n):
                if resident[v] and locks[v] == 0 and mem[v] > 0:
                    s = score(v)
                    if best == -1 or s < best_score:
                        best, best_score = v, s
            if best == -1:
                info[0:4] = [DTR_NO_FIT, p, x, state["current"] + need]
                return False
            free(best)
            info[6] += 1
        state["clock"] += cost[x]
        state["total"] += cost[x]
        info[5] += 1
        if cls[x] >= 0:
            uf_cost[find(cls[x])] -= cost[x]
            cls[x] = -1
        resident[x] = seen_once[x] = True
        state["current"] += mem[x]
        info[4] = max(info[4], state["current"] + ws[x])
        kind.append(SEQ_COMPUTE)
        node.append(x)
        last_access[x] = state["clock"]
        for i in inputs[x]:
            locks[i] -= 1
            last_access[i] = state["clock"]
        if state["total"] > max_cost:
            info[0:4] = [DTR_THRASH, p, x, state["current"]]
            return False
        return True

    def needed(i, p):                # an evicted value read after position p would recompute through i
        seen, stack = {i}, [i]
        while stack:
            for j in readers[stack.pop()]:
                if evicted(j) and j not in seen:
                    if last_pos[j] > p:
                        return True
                    seen.add(j)
                    stack.append(j)
        return False

    def frame(x):                    # lock x's resident inputs first; the others are materialized in order
        missing = []
        for i in inputs[x]:
            if resident[i]:
                locks[i] += 1
            else:
                missing.append(i)
        return [x, missing, 0]

    for p, v in enumerate(order):
        stack = [frame(v)]            # depth-first materialization
        while stack:
            top = stack[-1]
            x, missing = top[0], top[1]
            if top[2] < len(missing):
                i = missing[top[2]]
                top[2] += 1
                if resident[i]:       # a sibling's recomputation brought it back
                    locks[i] += 1
                else:
                    stack.append(frame(i))
                continue
            stack.pop()
            if not compute(x, p):
                return out()
            if stack:                 # a recomputation: its reader locks it
                locks[x] += 1
        for i in inputs[v]:
            if last_pos[i] == p and resident[i] and locks[i] == 0 and not (hold and needed(i, p)):
                free(i)
        if last_pos[v] == p and resident[v] and not (hold and needed(v, p)):
            free(v)
    return out()
