"""The plain formulation of Checkmate (Jain et al. 2020, problem (9)), with remat's memory accounting.

Variables, for every stage ``t`` and node ``i`` (all ``n x n``, as in the
paper and its reference implementation): binary ``R[t, i]`` and ``S[t, i]``,
continuous ``U[t, k]`` (memory after allocating ``k``) and a binary
``FREE[t, e]`` for every stage and edge ``e = (i, k)``. The frontier
(``R[t, t] = 1``, ``R[t, i > t] = 0``, ``S[t, i >= t] = 0``) is imposed
through column bounds. ``FREE`` uses the paper's hazard linearization,
``1 - FREE <= hazards <= kappa (1 - FREE)``, which makes it exactly the
product ``R[t, k] (1 - S[t+1, i]) prod_{j > k users of i} (1 - R[t, j])``.
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from ._rows import RowBuilder, scaled_memory
from .standard_form import StandardForm

__all__ = ["build_paper"]


def build_paper(graph: Graph, budget_bytes: int, memory_unit: float | None = None) -> StandardForm:
    """The paper's MILP for ``graph`` under ``budget_bytes`` (see the module docstring).

    ``memory_unit`` overrides the byte unit of the memory rows (see :func:`scaled_memory`).
    """
    n = graph.n
    unit, m, ws, cap = scaled_memory(graph, budget_bytes, memory_unit)
    edges = graph.edges
    E = len(edges)
    ei, ek = edges[:, 0], edges[:, 1]

    # columns: R (n*n), S (n*n), U (n*n), FREE (n*E), row-major by stage
    tt, ii = np.divmod(np.arange(n * n, dtype=np.int64), n)
    R0, S0, U0, F0 = 0, n * n, 2 * n * n, 3 * n * n
    n_cols = 3 * n * n + n * E
    Rc = lambda t, i: R0 + t * n + i  # noqa: E731
    Sc = lambda t, i: S0 + t * n + i  # noqa: E731
    Uc = lambda t, i: U0 + t * n + i  # noqa: E731

    col_lo = np.zeros(n_cols)
    col_hi = np.ones(n_cols)
    col_lo[R0 + tt[tt == ii] * n + ii[tt == ii]] = 1.0         # R[t, t] = 1
    col_hi[R0 + tt * n + ii] = np.where(ii > tt, 0.0, 1.0)      # R[t, i > t] = 0
    col_hi[S0 + tt * n + ii] = np.where(ii >= tt, 0.0, 1.0)     # S[t, i >= t] = 0
    col_hi[U0:U0 + n * n] = max(cap, 0.0)                       # U[t, k] <= budget
    integrality = np.ones(n_cols, dtype=np.uint8)
    integrality[U0:U0 + n * n] = 0
    c = np.zeros(n_cols)
    c[R0:R0 + n * n] = graph.cost[ii]

    rb = RowBuilder()
    # R[t, k] <= R[t, i] + S[t, i] for every stage and edge
    te, ee = np.divmod(np.arange(n * E, dtype=np.int64), E)
    r = np.arange(n * E)
    rb.add("dependency", n * E, np.repeat(r, 3),
           np.column_stack([Rc(te, ek[ee]), Rc(te, ei[ee]), Sc(te, ei[ee])]).ravel(),
           np.tile([1.0, -1.0, -1.0], n * E), -np.inf, 0.0)
    # S[t+1, i] <= R[t, i] + S[t, i]
    t1, i1 = np.divmod(np.arange((n - 1) * n, dtype=np.int64), n)
    r = np.arange(len(t1))
    rb.add("keep", len(t1), np.repeat(r, 3),
           np.column_stack([Sc(t1 + 1, i1), Rc(t1, i1), Sc(t1, i1)]).ravel(),
           np.tile([1.0, -1.0, -1.0], len(t1)), -np.inf, 0.0)
    # U recurrence: U[t,0] = sum_i m_i S[t,i] + m_0 R[t,0];
    # U[t,k+1] = U[t,k] - sum_{i in deps(k)} m_i FREE[t,(i,k)] + m_{k+1} R[t,k+1]
    rows = np.arange(n)
    rb.add("memory_start", n,
           np.concatenate([rows, np.repeat(rows, n), rows]),
           np.concatenate([Uc(rows, 0), Sc(np.repeat(rows, n), np.tile(np.arange(n), n)), Rc(rows, 0)]),
           np.concatenate([np.ones(n), -np.tile(m, n), -np.full(n, m[0])]), 0.0, 0.0)
    if n > 1:
        tk, kk = np.divmod(np.arange(n * (n - 1), dtype=np.int64), n - 1)
        r = np.arange(len(tk))
        fe = np.arange(n * E, dtype=np.int64)
        ft, fe_e = np.divmod(fe, E)
        fk = ek[fe_e]
        f_row = ft * (n - 1) + fk      # FREE[t, (i, k)] enters the row of U[t, k+1]
        valid = fk < n - 1
        rb.add("memory_step", len(tk),
               np.concatenate([r, r, r, f_row[valid]]),
               np.concatenate([Uc(tk, kk + 1), Uc(tk, kk), Rc(tk, kk + 1), F0 + fe[valid]]),
               np.concatenate([np.ones(len(r)), -np.ones(len(r)), -m[kk + 1], m[ei[fe_e[valid]]]]),
               0.0, 0.0)
    # workspace: U[t, k] + ws_k R[t, k] <= budget
    wk = np.flatnonzero(ws > 0)
    if len(wk):
        t_w, k_w = np.divmod(np.arange(n * len(wk), dtype=np.int64), len(wk))
        r = np.arange(len(t_w))
        rb.add("workspace", len(t_w), np.repeat(r, 2),
               np.column_stack([Uc(t_w, wk[k_w]), Rc(t_w, wk[k_w])]).ravel(),
               np.column_stack([np.ones(len(r)), ws[wk[k_w]]]).ravel(), -np.inf, cap)
    # FREE linearization: hazards = 1 - R[t,k] + S[t+1,i] + sum_{j in users(i), j > k} R[t,j]
    # 1 - FREE <= hazards and kappa (1 - FREE) >= hazards, kappa = max possible hazards
    users = graph.users
    later = [np.asarray([j for j in users[i] if j > k], dtype=np.int64) for i, k in edges]
    n_later = np.array([len(x) for x in later], dtype=np.int64)
    for lo_side in (True, False):
        rows_l, cols_l, vals_l = [], [], []
        te, ee = np.divmod(np.arange(n * E, dtype=np.int64), E)
        has_next = te + 1 < n
        kappa = 1 + has_next + n_later[ee]
        r = np.arange(n * E)
        # FREE and R[t, k]
        rows_l += [r, r]
        cols_l += [F0 + r, Rc(te, ek[ee])]
        # lo_side:  R[t,k] - FREE - S[t+1,i] - sum R[t,j] <= 0          (1 - FREE <= hazards)
        # else:    R[t,k] - kappa FREE - S[t+1,i] - sum R[t,j] >= 1 - kappa  (kappa (1 - FREE) >= hazards)
        vals_l += [np.full(len(r), -1.0 if lo_side else -kappa.astype(float)), np.ones(len(r))]
        nx = has_next
        rows_l.append(r[nx])
        cols_l.append(Sc(te[nx] + 1, ei[ee[nx]]))
        vals_l.append(-np.ones(int(nx.sum())))
        later_cat = np.concatenate(later) if E else np.zeros(0, np.int64)
        later_owner = np.repeat(np.arange(E), n_later)
        if len(later_cat):
            rep_t = np.repeat(np.arange(n), len(later_cat))
            rep_e = np.tile(later_owner, n)
            rep_j = np.tile(later_cat, n)
            rows_l.append(rep_t * E + rep_e)
            cols_l.append(Rc(rep_t, rep_j))
            vals_l.append(-np.ones(len(rep_t)))
        lo = -np.inf if lo_side else 1.0 - kappa
        hi = 0.0 if lo_side else np.inf
        rb.add("free_upper" if lo_side else "free_lower", n * E,
               np.concatenate(rows_l), np.concatenate(cols_l), np.concatenate(vals_l), lo, hi)

    if cap < 0:   # the budget does not even hold the fixed bytes: an empty row 0 >= 1
        rb.add("budget_below_fixed_bytes", 1, [], [], [], 1.0, np.inf)
    A, row_lo, row_hi = rb.build(n_cols)
    fe = np.arange(n * E, dtype=np.int64)
    ft, fee = np.divmod(fe, E)
    return StandardForm(
        c=c, A=A, row_lo=row_lo, row_hi=row_hi, col_lo=col_lo, col_hi=col_hi, integrality=integrality,
        objective_offset=0.0, formulation="paper", budget_bytes=int(budget_bytes), memory_unit=unit,
        graph=graph,
        r_t=tt, r_i=ii, r_col=R0 + tt * n + ii, s_t=tt, s_i=ii, s_col=S0 + tt * n + ii,
        r_fixed_t=np.zeros(0, np.int64), r_fixed_i=np.zeros(0, np.int64),
        f_t=ft, f_i=ei[fee], f_k=ek[fee], f_col=F0 + fe,
        u_t=tt, u_k=ii, u_col=U0 + tt * n + ii,
        canonical=False, row_families=dict(rb.families),
    )
