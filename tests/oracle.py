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
