"""An independent, closed-form simulator used as a test oracle.

The kernels walk each stage sequentially. This oracle instead evaluates, for
every computation step (t, k), DESIGN's accounting in closed form with dense
matrices:

    mem(t, k) = fixed + sum_i S[t,i] m_i + sum_{i <= k} R[t,i] m_i
                - sum_i m_i [not S[t+1,i] and i has a user computed in stage t
                             and the last such user is < k]
                + ws_k

and checks validity directly from the two constraints of the problem.
"""

from __future__ import annotations

import numpy as np

from remat_core import Graph, Schedule


def oracle_simulate(graph: Graph, schedule: Schedule):
    """Return ``(valid, total_cost, peak, steps)`` with ``steps`` a list of (t, k, memory)."""
    n = graph.n
    R, S = schedule.dense()
    m = graph.memory_bytes.astype(np.int64)
    A = np.zeros((n, n), dtype=bool)  # A[i, k]: edge i -> k
    for k, d in enumerate(graph.deps):
        A[list(d), k] = True
    # validity: R[t,k] <= R[t,i] + S[t,i] for every edge; S[t,i] <= R[t-1,i] + S[t-1,i]
    for t in range(n):
        need = A[:, R[t]].any(axis=1)
        if np.any(need & ~(R[t] | S[t])):
            return False, None, None, None
        if t > 0 and np.any(S[t] & ~(R[t - 1] | S[t - 1])):
            return False, None, None, None
    steps = []
    for t in range(n):
        keep_next = S[t + 1] if t + 1 < n else np.zeros(n, dtype=bool)
        users_in_stage = A & R[t][None, :]
        has_user = users_in_stage.any(axis=1)
        last_user = np.where(has_user, n - 1 - np.argmax(users_in_stage[:, ::-1], axis=1), -1)
        base = graph.fixed_bytes + int(m[S[t]].sum())
        for k in np.flatnonzero(R[t]):
            alloc = int(m[: k + 1][R[t, : k + 1]].sum())
            freed = int(m[(~keep_next) & has_user & (last_user < k)].sum())
            steps.append((t, int(k), base + alloc - freed + int(graph.workspace_bytes[k])))
    cost = float((graph.cost[None, :] * R).sum())
    peak = max(s[2] for s in steps) if steps else graph.fixed_bytes
    return True, cost, peak, steps


def oracle_optimum(graph: Graph, budget_bytes: int) -> tuple[float | None, Schedule | None]:
    """The optimal cost within ``budget_bytes`` and one optimal schedule, by dynamic programming over stages.

    Independent of the solvers and of the kernels. A schedule is the sequence
    of kept sets ``K_t`` (``S[t]``); every valid schedule has a canonical
    counterpart that costs no more and needs no more memory at any step
    (``docs/formulation.rst``), in which stage ``t`` computes only what
    ``t`` and the newly kept values ``K_{t+1} - K_t`` need from ``K_t``.
    Stage ``t``'s cost and memory then depend on ``(K_t, K_{t+1})`` only, so
    the cheapest schedule whose every stage fits is a shortest path over kept
    sets. Only values with a descendant after stage ``t`` are worth keeping
    into stage ``t + 1``. Exact, exponential in the number of such values: for graphs of
    up to about 10 nodes. Returns ``(None, None)`` when no schedule fits.
    """
    n = graph.n
    deps = [tuple(int(i) for i in d) for d in graph.deps]
    users = [[] for _ in range(n)]
    for k in range(n):
        for i in deps[k]:
            users[i].append(k)
    max_desc = [-1] * n   # the latest strict descendant (a value is read again only to compute one)
    for i in range(n - 1, -1, -1):
        for j in users[i]:
            max_desc[i] = max(max_desc[i], j, max_desc[j])
    m = [int(v) for v in graph.memory_bytes]
    ws = [int(v) for v in graph.workspace_bytes]
    cost = [float(v) for v in graph.cost]
    fixed = int(graph.fixed_bytes)

    def stage(t: int, keep: frozenset, keep_next: frozenset) -> tuple[float, int, list[int]]:
        need, todo = set(), [t, *sorted(keep_next - keep)]
        while todo:
            j = todo.pop()
            if j in need:
                continue
            need.add(j)
            todo.extend(i for i in deps[j] if i not in keep)
        R = sorted(need)
        last_user_here = {}
        for k in R:
            for i in deps[k]:
                last_user_here[i] = k
        mem = fixed + sum(m[i] for i in keep)
        peak = mem
        freed = set()
        for k in R:
            mem += m[k]
            peak = max(peak, mem + ws[k])
            for i in deps[k]:
                if i not in keep_next and last_user_here[i] == k and i not in freed:
                    freed.add(i)
                    mem -= m[i]
        return sum(cost[k] for k in R), peak, R

    # best[K]: (cost so far, list of (R_t, K_t) per stage) for the kept set K entering the current stage
    best: dict[frozenset, tuple[float, list]] = {frozenset(): (0.0, [])}
    for t in range(n):
        nxt: dict[frozenset, tuple[float, list]] = {}
        worth = [i for i in range(t + 1) if max_desc[i] > t]   # values a later stage may read
        for keep, (so_far, path) in best.items():
            for bits in range(1 << len(worth)):
                keep_next = frozenset(worth[b] for b in range(len(worth)) if bits >> b & 1)
                c, peak, R = stage(t, keep, keep_next)
                if peak > budget_bytes:
                    continue
                total = so_far + c
                if total < nxt.get(keep_next, (np.inf,))[0]:
                    nxt[keep_next] = (total, path + [(R, keep)])
        best = nxt
        if not best:
            return None, None
    total, path = min(best.values(), key=lambda v: v[0])
    R = np.zeros((n, n), dtype=bool)
    S = np.zeros((n, n), dtype=bool)
    for t, (r, keep) in enumerate(path):
        R[t, r] = True
        S[t, sorted(keep)] = True
    return total, Schedule(R, S)
