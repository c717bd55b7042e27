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


# ------------------------------------------------------------------------------------------- DTR (see _reference.dtr)
_DTR_H_DTR, _DTR_H_DTR_EQ, _DTR_H_DTR_LOCAL, _DTR_LRU, _DTR_LARGEST, _DTR_MSPS, _DTR_RANDOM = range(7)


@njit(cache=True, nogil=True)
def _dtr_random_key(seed, evictions, v):  # pragma: no cover - compiled
    z = (np.uint64(seed) + (np.uint64(evictions) << np.uint64(32)) + np.uint64(v) + np.uint64(1)) \
        * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11))


@njit(cache=True, nogil=True)
def _uf_find(parent, x):  # pragma: no cover - compiled
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True, nogil=True)
def _uf_union(parent, size, class_cost, a, b):  # pragma: no cover - compiled
    ra = _uf_find(parent, a)
    rb = _uf_find(parent, b)
    if ra == rb:
        return
    if size[ra] < size[rb] or (size[ra] == size[rb] and rb < ra):
        ra, rb = rb, ra
    parent[rb] = ra
    size[ra] += size[rb]
    class_cost[ra] += class_cost[rb]


@njit(cache=True, nogil=True)
def _dtr_leave(v, t, heuristic, dep_ptr, dep_idx, user_ptr, user_idx, resident, last_use, cost,
               parent, size, class_cost, in_uf):  # pragma: no cover - compiled
    if heuristic != _DTR_H_DTR_EQ:
        return
    if not in_uf[v]:
        in_uf[v] = True
        class_cost[v] = cost[v]
    else:
        r = _uf_find(parent, v)
        class_cost[r] += cost[v]
    for q in range(dep_ptr[v], dep_ptr[v + 1]):
        i = dep_idx[q]
        if not resident[i]:
            _uf_union(parent, size, class_cost, v, i)
    for q in range(user_ptr[v], user_ptr[v + 1]):
        j = user_idx[q]
        if j < t and not resident[j] and last_use[j] > t:
            _uf_union(parent, size, class_cost, v, j)


@njit(cache=True, nogil=True)
def _dtr_walk(v, t, down, dep_ptr, dep_idx, user_ptr, user_idx, resident, last_use, cost, seen, stamp,
              stack):  # pragma: no cover - compiled
    seen[v] = stamp
    total = 0.0
    top = 0
    for q in range(dep_ptr[v], dep_ptr[v + 1]):
        i = dep_idx[q]
        if not resident[i] and seen[i] != stamp:
            seen[i] = stamp
            stack[top] = i
            top += 1
    while top > 0:
        top -= 1
        x = stack[top]
        total += cost[x]
        for q in range(dep_ptr[x], dep_ptr[x + 1]):
            i = dep_idx[q]
            if not resident[i] and seen[i] != stamp:
                seen[i] = stamp
                stack[top] = i
                top += 1
    if down:
        for q in range(user_ptr[v], user_ptr[v + 1]):
            j = user_idx[q]
            if j < t and not resident[j] and last_use[j] > t and seen[j] != stamp:
                seen[j] = stamp
                stack[top] = j
                top += 1
        while top > 0:
            top -= 1
            x = stack[top]
            total += cost[x]
            for q in range(user_ptr[x], user_ptr[x + 1]):
                j = user_idx[q]
                if j < t and not resident[j] and last_use[j] > t and seen[j] != stamp:
                    seen[j] = stamp
                    stack[top] = j
                    top += 1
    return total


@njit(cache=True, nogil=True)
def _res_remove(v, resident, res_list, res_pos, n_res):  # pragma: no cover - compiled
    """Take ``v`` off the resident list (swap with the last entry); returns the new length."""
    resident[v] = False
    last = res_list[n_res - 1]
    res_list[res_pos[v]] = last
    res_pos[last] = res_pos[v]
    res_pos[v] = -1
    return n_res - 1


@njit(cache=True, nogil=True)
def _dtr_can_free(i, t, user_ptr, user_idx, resident, last_use, keep_dead, seen, stamp,
                  stack):  # pragma: no cover - compiled
    if last_use[i] > t:
        return False
    if keep_dead:
        for q in range(user_ptr[i], user_ptr[i + 1]):
            if last_use[user_idx[q]] > t:
                return False
    seen[i] = stamp
    stack[0] = i
    top = 1
    while top > 0:
        top -= 1
        x = stack[top]
        for q in range(user_ptr[x], user_ptr[x + 1]):
            j = user_idx[q]
            if j < t and not resident[j] and seen[j] != stamp:
                if last_use[j] > t:
                    return False
                seen[j] = stamp
                stack[top] = j
                top += 1
    return True


@njit(cache=True, nogil=True)
def dtr(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, heuristic, seed,
        max_computes, keep_dead=0):  # pragma: no cover - compiled
    last_use = np.arange(n)
    for k in range(n):
        if user_ptr[k + 1] > user_ptr[k]:
            last_use[k] = user_idx[user_ptr[k + 1] - 1]
    resident = np.zeros(n, dtype=np.bool_)
    pins = np.zeros(n, dtype=np.int64)
    used_stage = np.full(n, -1, dtype=np.int64)
    computed_stage = np.full(n, -1, dtype=np.int64)
    retro_stage = np.full(n, -1, dtype=np.int64)
    last_access = np.zeros(n, dtype=np.int64)
    parent = np.arange(n)
    size = np.ones(n, dtype=np.int64)
    class_cost = np.zeros(n)
    in_uf = np.zeros(n, dtype=np.bool_)
    seen = np.zeros(n, dtype=np.int64)
    stamp = 0
    stack = np.empty(n + 1, dtype=np.int64)
    in_need = np.full(n, -1, dtype=np.int64)
    row = np.empty(n, dtype=np.int64)
    res_list = np.empty(n, dtype=np.int64)    # the resident values, in no order, and each one's position
    res_pos = np.full(n, -1, dtype=np.int64)
    n_res = 0
    info = np.full(7, -1, dtype=np.int64)
    info[0] = 0
    info[5] = 0
    info[6] = 0
    R_ptr = np.zeros(n + 1, dtype=np.int64)
    S_ptr = np.zeros(n + 1, dtype=np.int64)
    r_cap = max(16, 2 * n)
    R_idx = np.empty(r_cap, dtype=np.int64)
    s_cap = max(16, 4 * n)
    S_idx = np.empty(s_cap, dtype=np.int64)
    r_size = 0
    s_size = 0
    current = np.int64(fixed)
    clock = np.int64(0)
    peak = np.int64(-1)
    computations = np.int64(0)
    evictions = np.int64(0)
    for t in range(n):
        # S[t] candidates: resident now (ascending); filtered at the end of the stage
        s_start = s_size
        for v in range(t):
            if resident[v]:
                if s_size == s_cap:
                    s_cap *= 2
                    grown = np.empty(s_cap, dtype=np.int64)
                    grown[:s_size] = S_idx[:s_size]
                    S_idx = grown
                S_idx[s_size] = v
                s_size += 1
        # R[t]: t and its non-resident ancestors through non-resident values
        m = 0
        in_need[t] = t
        stack[0] = t
        top = 1
        row[m] = t
        m += 1
        while top > 0:
            top -= 1
            x = stack[top]
            for q in range(dep_ptr[x], dep_ptr[x + 1]):
                i = dep_idx[q]
                if not resident[i] and in_need[i] != t:
                    in_need[i] = t
                    stack[top] = i
                    top += 1
                    row[m] = i
                    m += 1
        row[:m].sort()
        for p in range(m):
            k = row[p]
            for q in range(dep_ptr[k], dep_ptr[k + 1]):
                i = dep_idx[q]
                pins[i] += 1
                used_stage[i] = t
        for p in range(m):
            k = row[p]
            while current + mem[k] + ws[k] > budget:
                best = -1
                best_score = 0.0
                for e in range(n_res):
                    v = res_list[e]
                    if pins[v] != 0 or mem[v] <= 0:
                        continue
                    mv = float(mem[v])
                    stale = float(clock - last_access[v] + 1)
                    if heuristic == _DTR_H_DTR:
                        stamp += 1
                        s = (cost[v] + _dtr_walk(v, t, True, dep_ptr, dep_idx, user_ptr, user_idx, resident,
                                                 last_use, cost, seen, stamp, stack)) / (mv * stale)
                    elif heuristic == _DTR_H_DTR_EQ:
                        stamp += 1
                        total = cost[v]
                        for q in range(dep_ptr[v], dep_ptr[v + 1]):
                            i = dep_idx[q]
                            if not resident[i]:
                                r = _uf_find(parent, i)
                                if seen[r] != stamp:
                                    seen[r] = stamp
                                    total += class_cost[r]
                        for q in range(user_ptr[v], user_ptr[v + 1]):
                            j = user_idx[q]
                            if j < t and not resident[j] and last_use[j] > t:
                                r = _uf_find(parent, j)
                                if seen[r] != stamp:
                                    seen[r] = stamp
                                    total += class_cost[r]
                        s = total / (mv * stale)
                    elif heuristic == _DTR_H_DTR_LOCAL:
                        s = cost[v] / (mv * stale)
                    elif heuristic == _DTR_LRU:
                        s = float(last_access[v])
                    elif heuristic == _DTR_LARGEST:
                        s = -mv
                    elif heuristic == _DTR_MSPS:
                        stamp += 1
                        s = (cost[v] + _dtr_walk(v, t, False, dep_ptr, dep_idx, user_ptr, user_idx, resident,
                                                 last_use, cost, seen, stamp, stack)) / mv
                    else:
                        s = _dtr_random_key(seed, evictions, v)
                    if best == -1 or s < best_score or (s == best_score and v < best):
                        best = v
                        best_score = s
                if best == -1:
                    info[0] = 1
                    info[1] = t
                    info[2] = k
                    info[3] = current + mem[k] + ws[k]
                    info[5] = computations
                    info[6] = evictions
                    return info, R_ptr, R_idx[:r_size].copy(), S_ptr, S_idx[:s_size].copy()
                n_res = _res_remove(best, resident, res_list, res_pos, n_res)
                current -= mem[best]
                evictions += 1
                if computed_stage[best] != t and used_stage[best] != t:
                    retro_stage[best] = t
                _dtr_leave(best, t, heuristic, dep_ptr, dep_idx, user_ptr, user_idx, resident, last_use, cost,
                           parent, size, class_cost, in_uf)
            if computations == max_computes:
                info[0] = 2
                info[1] = t
                info[2] = k
                info[3] = current + mem[k] + ws[k]
                info[5] = computations
                info[6] = evictions
                return info, R_ptr, R_idx[:r_size].copy(), S_ptr, S_idx[:s_size].copy()
            computations += 1
            clock += 1
            if heuristic == _DTR_H_DTR_EQ and in_uf[k]:
                r = _uf_find(parent, k)
                class_cost[r] -= cost[k]
            resident[k] = True
            res_list[n_res] = k
            res_pos[k] = n_res
            n_res += 1
            computed_stage[k] = t
            last_access[k] = clock
            current += mem[k]
            if current + ws[k] > peak:
                peak = current + ws[k]
            for q in range(dep_ptr[k], dep_ptr[k + 1]):
                i = dep_idx[q]
                last_access[i] = clock
                pins[i] -= 1
                if pins[i] != 0 or not resident[i]:
                    continue
                stamp += 1
                if _dtr_can_free(i, t, user_ptr, user_idx, resident, last_use, keep_dead, seen, stamp, stack):
                    n_res = _res_remove(i, resident, res_list, res_pos, n_res)
                    current -= mem[i]
                    _dtr_leave(i, t, heuristic, dep_ptr, dep_idx, user_ptr, user_idx, resident, last_use, cost,
                               parent, size, class_cost, in_uf)
            stamp += 1
            if pins[k] == 0 and _dtr_can_free(k, t, user_ptr, user_idx, resident, last_use, keep_dead, seen, stamp,
                                              stack):
                n_res = _res_remove(k, resident, res_list, res_pos, n_res)
                current -= mem[k]
                _dtr_leave(k, t, heuristic, dep_ptr, dep_idx, user_ptr, user_idx, resident, last_use, cost,
                           parent, size, class_cost, in_uf)
        if r_size + m > r_cap:
            while r_size + m > r_cap:
                r_cap *= 2
            grown = np.empty(r_cap, dtype=np.int64)
            grown[:r_size] = R_idx[:r_size]
            R_idx = grown
        for p in range(m):
            R_idx[r_size + p] = row[p]
        r_size += m
        R_ptr[t + 1] = r_size
        w = s_start
        for p in range(s_start, s_size):
            v = S_idx[p]
            if retro_stage[v] != t:
                S_idx[w] = v
                w += 1
        s_size = w
        S_ptr[t + 1] = s_size
    info[4] = peak
    info[5] = computations
    info[6] = evictions
    return info, R_ptr, R_idx[:r_size].copy(), S_ptr, S_idx[:s_size].copy()


# ---------------------------------------------------------------------------------------------------------------
# DTR as it runs, recorded as an operation sequence (the spec: _reference.dtr_sequence)
# ---------------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _grow(a, size):  # pragma: no cover - compiled
    """``a``, or a copy twice as long, so that index ``size`` exists (any dtype)."""
    if size < a.shape[0]:
        return a
    b = np.empty(2 * a.shape[0] + 16, dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True, nogil=True)
def _seq_walk(v, ptr, idx, resident, seen_once, cost, seen, stamp, stack, limit):  # pragma: no cover - compiled
    """Cost of the evicted values reachable from v through ``ptr/idx`` (inputs or readers), depth first; the walk
    stops early, returning a partial sum above ``limit``, once the sum passes ``limit``."""
    seen[v] = stamp
    total = 0.0
    top = 0
    for q in range(ptr[v], ptr[v + 1]):
        u = idx[q]
        if seen_once[u] and not resident[u] and seen[u] != stamp:
            seen[u] = stamp
            stack[top] = u
            top += 1
    while top > 0:
        top -= 1
        x = stack[top]
        total += cost[x]
        if total > limit:
            return total
        for q in range(ptr[x], ptr[x + 1]):
            u = idx[q]
            if seen_once[u] and not resident[u] and seen[u] != stamp:
                seen[u] = stamp
                stack[top] = u
                top += 1
    return total


@njit(cache=True, nogil=True)
def _seq_needed(i, p, user_ptr, user_idx, resident, seen_once, last_pos, seen, stamp, stack):  # pragma: no cover
    seen[i] = stamp
    stack[0] = i
    top = 1
    while top > 0:
        top -= 1
        x = stack[top]
        for q in range(user_ptr[x], user_ptr[x + 1]):
            j = user_idx[q]
            if seen_once[j] and not resident[j] and seen[j] != stamp:
                if last_pos[j] > p:
                    return True
                seen[j] = stamp
                stack[top] = j
                top += 1
    return False


@njit(cache=True, nogil=True)
def _seq_out(info, code, p, x, need, peak, computations, evictions, kind, node, n_ev, total):  # pragma: no cover
    info[0] = code
    info[1] = p
    info[2] = x
    info[3] = need
    info[4] = peak
    info[5] = computations
    info[6] = evictions
    return info, kind[:n_ev].astype(np.int8), node[:n_ev].copy(), total


@njit(cache=True, nogil=True)
def _seq_event(kind, node, n_ev, k, v):  # pragma: no cover - compiled
    """Append event (k, v); returns the (possibly grown) arrays and the new count."""
    kind = _grow(kind, n_ev)
    node = _grow(node, n_ev)
    kind[n_ev] = k
    node[n_ev] = v
    return kind, node, n_ev + 1


@njit(cache=True, nogil=True)
def _seq_new_class(v, n_cls, cls, uf_parent, uf_size, uf_cost, root_seen, cost, dep_ptr, dep_idx, user_ptr,
                   user_idx, resident, seen_once):  # pragma: no cover - compiled
    """Freed v: a new class of cost[v], merged with the class of every evicted neighbour (h_dtr_eq)."""
    uf_parent = _grow(uf_parent, n_cls)
    uf_size = _grow(uf_size, n_cls)
    uf_cost = _grow(uf_cost, n_cls)
    root_seen = _grow(root_seen, n_cls)
    c = n_cls
    uf_parent[c] = c
    uf_size[c] = 1
    uf_cost[c] = cost[v]
    root_seen[c] = 0
    cls[v] = c
    for side in range(2):
        ptr = dep_ptr if side == 0 else user_ptr
        idx = dep_idx if side == 0 else user_idx
        for q in range(ptr[v], ptr[v + 1]):
            u = idx[q]
            if seen_once[u] and not resident[u] and cls[u] >= 0:
                _uf_union(uf_parent, uf_size, uf_cost, c, cls[u])
    return n_cls + 1, uf_parent, uf_size, uf_cost, root_seen


@njit(cache=True, nogil=True)
def dtr_sequence(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, order, heuristic, seed,
                 max_cost, hold=1):  # pragma: no cover - compiled
    info = np.full(7, -1, dtype=np.int64)
    info[0] = 0
    pos = np.empty(n, dtype=np.int64)
    for p in range(n):
        pos[order[p]] = p
    last_pos = pos.copy()
    for k in range(n):
        for q in range(user_ptr[k], user_ptr[k + 1]):
            if pos[user_idx[q]] > last_pos[k]:
                last_pos[k] = pos[user_idx[q]]
    resident = np.zeros(n, dtype=np.bool_)
    seen_once = np.zeros(n, dtype=np.bool_)
    locks = np.zeros(n, dtype=np.int64)
    last_access = np.zeros(n, dtype=np.float64)
    cls = np.full(n, -1, dtype=np.int64)
    uf_parent = np.empty(n + 16, dtype=np.int64)
    uf_size = np.empty(n + 16, dtype=np.int64)
    uf_cost = np.empty(n + 16, dtype=np.float64)
    root_seen = np.zeros(n + 16, dtype=np.int64)
    n_cls = 0
    kind = np.empty(2 * n + 16, dtype=np.int64)
    node = np.empty(2 * n + 16, dtype=np.int64)
    n_ev = 0
    res_list = np.empty(n, dtype=np.int64)
    res_pos = np.full(n, -1, dtype=np.int64)
    n_res = 0
    seen = np.zeros(n, dtype=np.int64)
    stamp = 0
    wstack = np.empty(n, dtype=np.int64)
    # depth-first materialization: frames (node, cursor, end) into the buffer of missing inputs
    f_node = np.empty(n + 1, dtype=np.int64)
    f_cur = np.empty(n + 1, dtype=np.int64)
    f_end = np.empty(n + 1, dtype=np.int64)
    f_start = np.empty(n + 1, dtype=np.int64)
    mbuf = np.empty(dep_idx.shape[0] + 1, dtype=np.int64)
    current = np.int64(fixed)
    peak = np.int64(fixed)
    clock = 0.0
    total = 0.0
    computations = 0
    evictions = 0
    for p in range(n):
        v = order[p]
        depth = 0
        mtop = 0
        # push v
        f_node[0] = v
        f_cur[0] = 0
        f_start[0] = 0
        for q in range(dep_ptr[v], dep_ptr[v + 1]):
            i = dep_idx[q]
            if resident[i]:
                locks[i] += 1
            else:
                mbuf[mtop] = i
                mtop += 1
        f_end[0] = mtop
        depth = 1
        while depth > 0:
            d = depth - 1
            x = f_node[d]
            if f_cur[d] < f_end[d]:
                i = mbuf[f_cur[d]]
                f_cur[d] += 1
                if resident[i]:
                    locks[i] += 1
                else:
                    f_node[depth] = i
                    f_cur[depth] = mtop
                    f_start[depth] = mtop
                    for q in range(dep_ptr[i], dep_ptr[i + 1]):
                        u = dep_idx[q]
                        if resident[u]:
                            locks[u] += 1
                        else:
                            mbuf[mtop] = u
                            mtop += 1
                    f_end[depth] = mtop
                    depth += 1
                continue
            depth -= 1
            mtop = f_start[depth]          # the frame's missing inputs are all obtained: reuse its buffer
            # make room for x
            need = mem[x] + ws[x]
            while current + need > budget:
                best = -1
                best_score = 0.0
                for r in range(n_res):
                    w = res_list[r]
                    if locks[w] != 0 or mem[w] <= 0:
                        continue
                    m = float(mem[w])
                    stale = clock - last_access[w]
                    if (heuristic == _DTR_H_DTR or heuristic == _DTR_H_DTR_EQ or heuristic == _DTR_H_DTR_LOCAL) \
                            and stale <= 0.0:
                        s = np.inf
                    elif heuristic == _DTR_H_DTR:
                        # a candidate whose walks pass what would tie the best so far (with a margin far above
                        # rounding) cannot be chosen: its walks stop there (same choice as the reference)
                        limit = np.inf
                        if best != -1 and best_score < np.inf:
                            limit = best_score * m * stale * (1.0 + 1e-9) + 1e-300
                            if cost[w] > limit:
                                continue
                        stamp += 1
                        up = _seq_walk(w, dep_ptr, dep_idx, resident, seen_once, cost, seen, stamp, wstack,
                                       limit - cost[w])
                        if cost[w] + up > limit:
                            continue
                        stamp += 1
                        down = _seq_walk(w, user_ptr, user_idx, resident, seen_once, cost, seen, stamp, wstack,
                                         limit - cost[w] - up)
                        if cost[w] + up + down > limit:
                            continue
                        s = (cost[w] + up + down) / (m * stale)
                    elif heuristic == _DTR_H_DTR_EQ:
                        stamp += 1
                        tot = cost[w]
                        for side in range(2):
                            ptr = dep_ptr if side == 0 else user_ptr
                            idx = dep_idx if side == 0 else user_idx
                            for q in range(ptr[w], ptr[w + 1]):
                                u = idx[q]
                                if seen_once[u] and not resident[u] and cls[u] >= 0:
                                    rt = _uf_find(uf_parent, cls[u])
                                    if root_seen[rt] != stamp:
                                        root_seen[rt] = stamp
                                        tot += uf_cost[rt]
                        s = tot / (m * stale)
                    elif heuristic == _DTR_H_DTR_LOCAL:
                        s = cost[w] / (m * stale)
                    elif heuristic == _DTR_LRU:
                        s = last_access[w]
                    elif heuristic == _DTR_LARGEST:
                        s = -m
                    elif heuristic == _DTR_MSPS:
                        stamp += 1
                        s = (cost[w] + _seq_walk(w, dep_ptr, dep_idx, resident, seen_once, cost, seen, stamp,
                                                 wstack, np.inf)) / m
                    else:
                        s = _dtr_random_key(seed, evictions, w)
                    if best == -1 or s < best_score or (s == best_score and w < best):
                        best = w
                        best_score = s
                if best == -1:
                    return _seq_out(info, 1, p, x, current + need, peak, computations, evictions, kind, node, n_ev,
                                    total)
                # free best (an eviction)
                n_res = _res_remove(best, resident, res_list, res_pos, n_res)
                current -= mem[best]
                kind, node, n_ev = _seq_event(kind, node, n_ev, 1, best)
                if heuristic == _DTR_H_DTR_EQ:
                    n_cls, uf_parent, uf_size, uf_cost, root_seen = _seq_new_class(
                        best, n_cls, cls, uf_parent, uf_size, uf_cost, root_seen, cost, dep_ptr, dep_idx, user_ptr,
                        user_idx, resident, seen_once)
                evictions += 1
            # compute x
            clock += cost[x]
            total += cost[x]
            computations += 1
            if cls[x] >= 0:
                rt = _uf_find(uf_parent, cls[x])
                uf_cost[rt] -= cost[x]
                cls[x] = -1
            resident[x] = True
            seen_once[x] = True
            res_list[n_res] = x
            res_pos[x] = n_res
            n_res += 1
            current += mem[x]
            if current + ws[x] > peak:
                peak = current + ws[x]
            kind, node, n_ev = _seq_event(kind, node, n_ev, 0, x)
            last_access[x] = clock
            for q in range(dep_ptr[x], dep_ptr[x + 1]):
                i = dep_idx[q]
                locks[i] -= 1
                last_access[i] = clock
            if total > max_cost:
                return _seq_out(info, 2, p, x, current, peak, computations, evictions, kind, node, n_ev, total)
            if depth > 0:
                locks[x] += 1
        # release
        for side in range(2):
            lo = dep_ptr[v] if side == 0 else 0
            hi = dep_ptr[v + 1] if side == 0 else 1
            for q in range(lo, hi):
                i = dep_idx[q] if side == 0 else v
                if last_pos[i] == p and resident[i] and locks[i] == 0:
                    keep = False
                    if hold:
                        stamp += 1
                        keep = _seq_needed(i, p, user_ptr, user_idx, resident, seen_once, last_pos, seen, stamp,
                                           wstack)
                    if not keep:
                        n_res = _res_remove(i, resident, res_list, res_pos, n_res)
                        current -= mem[i]
                        kind, node, n_ev = _seq_event(kind, node, n_ev, 1, i)
                        if heuristic == _DTR_H_DTR_EQ:
                            n_cls, uf_parent, uf_size, uf_cost, root_seen = _seq_new_class(
                                i, n_cls, cls, uf_parent, uf_size, uf_cost, root_seen, cost, dep_ptr, dep_idx,
                                user_ptr, user_idx, resident, seen_once)
    return _seq_out(info, 0, -1, -1, -1, peak, computations, evictions, kind, node, n_ev, total)


# ---------------------------------------------------------------------------------------------------------------
# The on-disk cache: compiled ahead of the first timed call (see remat_core.kernels: while it lacks a kernel, the
# dispatcher runs the reference and a child process runs compile_all)
# ---------------------------------------------------------------------------------------------------------------
def _signatures() -> dict:
    """Each public kernel's argument types as the core's callers pass them (recorded from numba's cache after
    auto, ilp, the bound and DTR's sequence runs): a Graph's arrays and a Schedule's CSR rows are read-only,
    arrays built on the way writable; ints and floats are Python's."""
    from numba import types

    i, f = types.int64, types.float64
    A, RO = types.Array(i, 1, "C"), types.Array(i, 1, "C", readonly=True)
    F, FRO = types.Array(f, 1, "C"), types.Array(f, 1, "C", readonly=True)
    return {
        "simulate": [(i, *[RO] * 8, i), (i, A, A, A, A, RO, RO, RO, RO, i)],
        "r_given_s": [(i, RO, RO, RO, RO), (i, A, A, RO, RO)],
        "path_cuts": [(i, RO, RO, F, F, A, A, A, f, i)],
        "dtr": [(i, *[RO] * 6, FRO, i, i, i, i, i, i)],
        "dtr_sequence": [(i, *[RO] * 6, FRO, i, i, A, i, i, f, i)],
    }


def cached() -> bool:
    """Whether numba's on-disk cache holds every public kernel for this source (then the first call of each
    loads it in well under a second instead of compiling it for seconds). Reads numba's cache index, an
    internal API: raises if that changed (the caller then assumes a warm cache, the behaviour before)."""
    g = globals()
    return all(len(g[name]._cache._cache_file._load_index()) > 0 for name in _signatures())


def compile_all() -> None:
    """Compile every public kernel for the argument types of :func:`_signatures` into numba's on-disk cache
    (``make`` does it after installing; the dispatcher runs it in a child process when the cache is cold)."""
    g = globals()
    for name, sigs in _signatures().items():
        for sig in sigs:
            g[name].compile(sig)
