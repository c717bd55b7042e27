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
