"""Numba kernels: the algorithms of ``_reference.py``, compiled.

Same signatures, contiguous int64 arrays in and out, no validation. Importing
this module imports numba; :mod:`remat_core.kernels` does so only on demand.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba import uint64 as _u

# In ``simulate`` indices are made unsigned (``_u``) before they index an array: numba then omits
# the negative-index wrap-around test on every access, which halves the time of the hot loops
# (the values are node and entry numbers, never negative).


@njit(cache=True, nogil=True)
def simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed):  # pragma: no cover - compiled
    # One pass over each S row: row t+1 is read at the start of stage t.
    # S membership is tracked as runs: i is in S[t] iff run_start[i] <= t <= last_row[i].
    info = np.full(7, -1, dtype=np.int64)
    info[0] = 0
    step_mem = np.zeros(R_idx.shape[0], dtype=np.int64)
    in_R = np.full(n, -1, dtype=np.int64)       # == t when computed in stage t (set as computed)
    listed_R = np.full(n, -1, dtype=np.int64)   # == t when in R[t]
    run_start = np.full(n, 1, dtype=np.int64)
    last_row = np.full(n, -1, dtype=np.int64)
    last_user = np.full(n, -1, dtype=np.int64)
    last_user_stage = np.full(n, -1, dtype=np.int64)
    peak = np.int64(-1)
    peak_stage = np.int64(-1)
    peak_node = np.int64(-1)
    current_start = np.int64(fixed)
    for t in range(n):
        current = current_start
        for p in range(_u(R_ptr[t]), _u(R_ptr[t + 1])):
            k = R_idx[p]
            ku = _u(k)
            listed_R[ku] = t
            for q in range(_u(dep_ptr[ku]), _u(dep_ptr[ku + 1])):
                i = _u(dep_idx[q])
                last_user[i] = k
                last_user_stage[i] = t
        next_start = np.int64(fixed)
        if t + 1 < n:
            for p in range(_u(S_ptr[t + 1]), _u(S_ptr[t + 2])):
                i = _u(S_idx[p])
                kept_now = last_row[i] == t and run_start[i] <= t
                if not (kept_now or listed_R[i] == t):
                    info[0] = 2
                    info[1] = t + 1
                    info[2] = S_idx[p]
                    info[3] = -1
                    return info, step_mem
                if not kept_now:
                    run_start[i] = t + 1
                last_row[i] = t + 1
                next_start += mem[i]
        for p in range(_u(R_ptr[t]), _u(R_ptr[t + 1])):
            k = R_idx[p]
            ku = _u(k)
            for q in range(_u(dep_ptr[ku]), _u(dep_ptr[ku + 1])):
                i = _u(dep_idx[q])
                if not (in_R[i] == t or (run_start[i] <= t and last_row[i] >= t)):
                    info[0] = 1
                    info[1] = t
                    info[2] = k
                    info[3] = dep_idx[q]
                    return info, step_mem
            in_R[ku] = t
            current += mem[ku]
            at_step = current + ws[ku]
            step_mem[p] = at_step
            if at_step > peak:
                peak = at_step
                peak_stage = t
                peak_node = k
            for q in range(_u(dep_ptr[ku]), _u(dep_ptr[ku + 1])):
                i = _u(dep_idx[q])
                if last_user[i] == k and last_user_stage[i] == t and last_row[i] != t + 1:
                    current -= mem[i]
        current_start = next_start
    info[4] = peak
    info[5] = peak_stage
    info[6] = peak_node
    return info, step_mem


@njit(cache=True, nogil=True)
def r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx):  # pragma: no cover - compiled
    kept = np.full(n, -1, dtype=np.int64)
    need = np.full(n, -1, dtype=np.int64)
    R_ptr = np.zeros(n + 1, dtype=np.int64)
    cap = max(16, 2 * n)
    R_idx = np.empty(cap, dtype=np.int64)
    size = 0
    row = np.empty(n, dtype=np.int64)
    for t in range(n):
        for p in range(S_ptr[t], S_ptr[t + 1]):
            kept[S_idx[p]] = t
        need[t] = t
        if t + 1 < n:
            for p in range(S_ptr[t + 1], S_ptr[t + 2]):
                i = S_idx[p]
                if kept[i] != t:
                    need[i] = t
        m = 0
        for k in range(t, -1, -1):
            if need[k] != t:
                continue
            row[m] = k
            m += 1
            for q in range(dep_ptr[k], dep_ptr[k + 1]):
                i = dep_idx[q]
                if kept[i] != t:
                    need[i] = t
        if size + m > cap:
            while size + m > cap:
                cap *= 2
            grown = np.empty(cap, dtype=np.int64)
            grown[:size] = R_idx[:size]
            R_idx = grown
        for j in range(m):
            R_idx[size + j] = row[m - 1 - j]
        size += m
        R_ptr[t + 1] = size
    return R_ptr, R_idx[:size].copy()


@njit(cache=True, nogil=True)
def path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts):  # pragma: no cover - compiled
    # D and P are laid out [g, y, a] (the reference's [g, a, y] transposed): the inner loop runs over a
    D = np.empty(n * n * n)
    P = np.empty(n * n * n, dtype=np.int64)
    for g in range(n):
        for y in range(n):
            row = (g * n + y) * n
            w = W[g * n + y]
            if in_ptr[y] == in_ptr[y + 1]:
                for a in range(n):
                    D[row + a] = np.inf
                    P[row + a] = -1
            else:
                for a in range(n):
                    best, arg = np.inf, -1
                    for p in range(in_ptr[y], in_ptr[y + 1]):
                        z = in_idx[p]
                        d = D[(g * n + z) * n + a]
                        if arg == -1 or d < best:
                            best, arg = d, z
                    D[row + a] = best + w
                    P[row + a] = arg
            D[row + y] = w
            P[row + y] = -1
    thr = 1.0 - tol
    count = 0
    for g in range(n):
        for a in range(g):
            for v in range(n):
                t = first[g * n + v]
                if t < n and (cum[(t + 1) * n + a] - cum[g * n + a]) + D[(g * n + v) * n + a] < thr:
                    count += 1
    gs = np.empty(count, dtype=np.int64)
    as_ = np.empty(count, dtype=np.int64)
    vs = np.empty(count, dtype=np.int64)
    viol = np.empty(count)
    k = 0
    for g in range(n):
        for a in range(g):
            for v in range(n):
                t = first[g * n + v]
                if t < n:
                    lhs = (cum[(t + 1) * n + a] - cum[g * n + a]) + D[(g * n + v) * n + a]
                    if lhs < thr:
                        gs[k], as_[k], vs[k], viol[k] = g, a, v, 1.0 - lhs
                        k += 1
    order = np.argsort(-viol, kind="mergesort")[:max_cuts]
    m = len(order)
    row_ptr = np.zeros(m + 1, dtype=np.int64)
    nnz = 0
    for r in range(m):   # row lengths first
        g, a, v = gs[order[r]], as_[order[r]], vs[order[r]]
        for s in range(g, first[g * n + v] + 1):
            if Rcol[s * n + a] >= 0:
                nnz += 1
        b = v
        while b != -1:
            nnz += 1
            b = P[(g * n + b) * n + a]
        row_ptr[r + 1] = nnz
    row_idx = np.empty(nnz, dtype=np.int64)
    q = 0
    for r in range(m):
        g, a, v = gs[order[r]], as_[order[r]], vs[order[r]]
        for s in range(g, first[g * n + v] + 1):
            c = Rcol[s * n + a]
            if c >= 0:
                row_idx[q] = c
                q += 1
        b = v
        while b != -1:
            row_idx[q] = Scol[g * n + b]
            q += 1
            b = P[(g * n + b) * n + a]
    return viol[order], row_ptr, row_idx
