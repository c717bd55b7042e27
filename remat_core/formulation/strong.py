"""The strong formulation: the same optimum as the paper's, proved much faster.

What changes with respect to :mod:`~remat_core.formulation.paper` (each item is
justified in ``docs/formulation.rst``):

* no columns for entries the frontier fixes (``R[t, t]``, ``R[t, i > t]``,
  ``S[t, i >= t]``) nor for values that no later stage can use (``i`` with no
  descendant ``>= t``);
* ``R[t, i] + S[t, i] = 1`` for the inputs of ``t``; ``R[t, i] + S[t, i] <= 1``
  elsewhere (never recompute a kept value);
* every kept and every recomputed value is used in its stage or kept into the
  next one (the program only admits *canonical* schedules, which lose nothing);
* ``FREE`` is continuous and bounded from above only, with the tight rows
  ``FREE[t,i,j] <= R[t,j]``, ``FREE[t,i,j] + R[t,j2] <= R[t,i] + S[t,i]`` for a
  later user ``j2`` and ``sum_j FREE[t,i,j] + S[t+1,i] <= R[t,i] + S[t,i]``;
  no ``FREE`` for an input of ``t`` (it is read again at ``t``) or after ``t``;
* memory is counted in a unit that keeps coefficients small, and only at the
  nodes a stage may compute;
* one knapsack row per stage over the kept values ``S[t+1, .]`` (implied by the
  LP, stated over binaries so that the MILP solver derives cover cuts from it).
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from ._rows import RowBuilder, max_descendant, scaled_memory, user_pairs
from .standard_form import StandardForm

__all__ = ["build_strong", "STRONG_OPTIONS"]

#: Switches of the strong formulation (all on by default); the benchmark turns them off one by one.
STRONG_OPTIONS = ("prune_dead", "one_copy", "canonical", "free_pairs", "free_once", "free_continuous", "knapsack")


def build_strong(graph: Graph, budget_bytes: int, memory_rows: str = "cumulative",
                 disable: tuple[str, ...] = (), continuous_r: bool = False,
                 memory_unit: float | None = None) -> StandardForm:
    """The strong MILP for ``graph`` under ``budget_bytes``.

    Parameters
    ----------
    memory_rows : {"recurrence", "cumulative"}
        Memory through continuous ``U`` columns and one equality per step
        (sparse), or one dense row per step with ``U`` substituted.
    disable : tuple of str
        Names from :data:`STRONG_OPTIONS` to switch off (for measurements).
    continuous_r : bool
        Declare ``R`` continuous (exact: integer ``S`` forces integer ``R``
        here), leaving only ``S`` binary. Off by default: HiGHS proves
        optimality faster when it may branch and cut on ``R`` too.
    memory_unit : float, optional
        Bytes per memory unit (default: :func:`~remat_core.formulation._rows.memory_unit`).
        Programs built with one unit for several budgets share their matrix
        and differ only in bounds, so an LP solver can re-solve from the last basis.
    """
    bad = set(disable) - set(STRONG_OPTIONS)
    if bad:
        raise ValueError(f"`disable` has unknown entries {sorted(bad)}; known: {list(STRONG_OPTIONS)}")
    if memory_rows not in ("recurrence", "cumulative"):
        raise ValueError(f"`memory_rows` must be 'recurrence' or 'cumulative'; got {memory_rows!r}")
    on = lambda name: name not in disable  # noqa: E731
    n = graph.n
    unit, m, ws, cap = scaled_memory(graph, budget_bytes, memory_unit)
    edges = graph.edges
    ei, ek = edges[:, 0], edges[:, 1]

    # ---------------------------------------------------------------- columns
    T, I = np.tril_indices(n, -1)               # i < t, ordered by stage then node
    if on("prune_dead"):
        alive = max_descendant(graph)[I] >= T   # i still has a descendant at or after t
        T, I = T[alive], I[alive]
    nv = len(T)
    Rcol = np.full((n, n), -1, dtype=np.int64)
    Scol = np.full((n, n), -1, dtype=np.int64)
    Rcol[T, I] = np.arange(nv)
    Scol[T, I] = nv + np.arange(nv)
    is_dep = np.zeros((n, n), dtype=bool)       # is_dep[t, i]: i is an input of t
    is_dep[ek, ei] = True

    # FREE (t, i, j): value i freed after its user j in stage t; j < t computable, t not a user of i
    mask = (np.arange(n)[None, :] > ek[:, None]) & (Rcol[:, ek].T >= 0) & ~is_dep[:, ei].T
    fe, ft = np.nonzero(mask)
    fi, fj = ei[fe], ek[fe]
    order = np.lexsort((fj, fi, ft))
    fe, ft, fi, fj = fe[order], ft[order], fi[order], fj[order]
    nf = len(ft)
    F0 = 2 * nv
    fcol = F0 + np.arange(nf)
    n_cols = F0 + nf

    # U columns (recurrence only): one per stage and computable node (plus t)
    K_t, K_k = np.nonzero((Rcol >= 0) | np.eye(n, dtype=bool))   # sorted by stage, then node
    U0 = n_cols
    if memory_rows == "recurrence":
        n_cols += len(K_t)
    Ucol = np.full((n, n), -1, dtype=np.int64)
    if memory_rows == "recurrence":
        Ucol[K_t, K_k] = U0 + np.arange(len(K_t))

    c = np.zeros(n_cols)
    c[:nv] = graph.cost[I]
    col_lo = np.zeros(n_cols)
    col_hi = np.ones(n_cols)
    integrality = np.zeros(n_cols, dtype=np.uint8)
    integrality[:2 * nv] = 1
    if continuous_r and on("one_copy") and on("canonical"):
        integrality[:nv] = 0   # R is determined by S (see docs/formulation.rst)
    if not on("free_continuous"):
        integrality[F0:F0 + nf] = 1
    if memory_rows == "recurrence":
        col_hi[U0:] = max(cap, 0.0)

    rb = RowBuilder()
    # ---------------------------------------------------------------- validity
    # inputs of t: R[t,i] + S[t,i] >= 1 (= 1 with one_copy)
    r = np.arange(len(ei))
    rb.add("inputs_of_t", len(ei), np.repeat(r, 2), np.column_stack([Rcol[ek, ei], Scol[ek, ei]]).ravel(),
           1.0, 1.0, 1.0 if on("one_copy") else np.inf)
    # R[t,k] <= R[t,i] + S[t,i] for an edge (i, k), k < t computable
    de, dt = np.nonzero((np.arange(n)[None, :] > ek[:, None]) & (Rcol[:, ek].T >= 0))
    r = np.arange(len(de))
    rb.add("dependency", len(de), np.repeat(r, 3),
           np.column_stack([Rcol[dt, ek[de]], Rcol[dt, ei[de]], Scol[dt, ei[de]]]).ravel(),
           np.tile([1.0, -1.0, -1.0], len(de)), -np.inf, 0.0)
    # S[t,i] <= R[t-1,i] + S[t-1,i] (i < t-1; for i = t-1, R[t-1,t-1] = 1)
    kt = (I < T - 1)
    r = np.arange(int(kt.sum()))
    rb.add("keep", len(r), np.repeat(r, 3),
           np.column_stack([Scol[T[kt], I[kt]], Rcol[T[kt] - 1, I[kt]], Scol[T[kt] - 1, I[kt]]]).ravel(),
           np.tile([1.0, -1.0, -1.0], len(r)), -np.inf, 0.0)
    # ---------------------------------------------------------------- dominance
    other = ~is_dep[T, I]
    if on("one_copy"):
        r = np.arange(int(other.sum()))
        rb.add("one_copy", len(r), np.repeat(r, 2),
               np.column_stack([Rcol[T[other], I[other]], Scol[T[other], I[other]]]).ravel(), 1.0, -np.inf, 1.0)
    if on("canonical"):
        # S[t,i] (resp. R[t,i]) <= S[t+1,i] + sum_{j user of i, j < t} R[t,j]; not for inputs of t
        ot, oi = T[other], I[other]
        row_of = np.full((n, n), -1, dtype=np.int64)
        row_of[ot, oi] = np.arange(len(ot))
        nxt = np.where(ot + 1 < n, Scol[np.minimum(ot + 1, n - 1), oi], -1)
        # the users j of i computable in stage t, j < t, t not a user of i: the FREE index set
        urow = row_of[ft, fi]
        for name, own in (("use_kept", Scol[ot, oi]), ("use_computed", Rcol[ot, oi])):
            rb.add(name, len(ot),
                   np.concatenate([np.arange(len(ot)), np.arange(len(ot)), urow]),
                   np.concatenate([own, nxt, Rcol[ft, fj]]),
                   np.concatenate([np.ones(len(ot)), -np.ones(len(ot)), -np.ones(nf)]), -np.inf, 0.0)
    # ---------------------------------------------------------------- FREE
    r = np.arange(nf)
    rb.add("free_user", nf, np.repeat(r, 2), np.column_stack([fcol, Rcol[ft, fj]]).ravel(),
           np.tile([1.0, -1.0], nf), -np.inf, 0.0)
    # FREE[t,i,j] <= 1 - R[t,j2] for a later user j2 < t (tightened to <= R[t,i] + S[t,i] - R[t,j2])
    pi, pj, pj2 = user_pairs(graph)
    if len(pi) and nf:
        # expand each pair (i, j, j2) over the stages t where FREE[t,i,j] exists and R[t,j2] is a column
        sort = np.argsort(fi * n + fj, kind="stable")
        fkey = (fi * n + fj)[sort]
        lo_idx = np.searchsorted(fkey, pi * n + pj, side="left")
        cnt = np.searchsorted(fkey, pi * n + pj, side="right") - lo_idx
        p_rep = np.repeat(np.arange(len(pi)), cnt)
        f_sel = sort[np.repeat(lo_idx, cnt) + _offsets(cnt)]
        t_sel, j2 = ft[f_sel], pj2[p_rep]
        ok = (j2 < t_sel) & (Rcol[t_sel, np.minimum(j2, n - 1)] >= 0)
        f_sel, t_sel, j2 = f_sel[ok], t_sel[ok], j2[ok]
        i_sel = fi[f_sel]
        r = np.arange(len(f_sel))
        if on("free_pairs"):
            rb.add("free_order", len(r), np.repeat(r, 4),
                   np.column_stack([fcol[f_sel], Rcol[t_sel, j2], Rcol[t_sel, i_sel], Scol[t_sel, i_sel]]).ravel(),
                   np.tile([1.0, 1.0, -1.0, -1.0], len(r)), -np.inf, 0.0)
        else:
            rb.add("free_order", len(r), np.repeat(r, 2), np.column_stack([fcol[f_sel], Rcol[t_sel, j2]]).ravel(),
                   1.0, -np.inf, 1.0)
    # sum_j FREE[t,i,j] + S[t+1,i] <= R[t,i] + S[t,i]
    ti_key = ft * n + fi
    uniq, grp = np.unique(ti_key, return_inverse=True)
    gt, gi = np.divmod(uniq, n)
    g_next = np.where(gt + 1 < n, Scol[np.minimum(gt + 1, n - 1), gi], -1)
    if on("free_once"):
        rg = np.arange(len(uniq))
        rb.add("free_once", len(uniq),
               np.concatenate([grp, rg, rg, rg]),
               np.concatenate([fcol, g_next, Rcol[gt, gi], Scol[gt, gi]]),
               np.concatenate([np.ones(nf), np.ones(len(rg)), -np.ones(len(rg)), -np.ones(len(rg))]), -np.inf, 0.0)
    else:
        r = np.arange(nf)
        nx = np.where(ft + 1 < n, Scol[np.minimum(ft + 1, n - 1), fi], -1)
        rb.add("free_once", nf, np.repeat(r, 2), np.column_stack([fcol, nx]).ravel(), 1.0, -np.inf, 1.0)

    # ---------------------------------------------------------------- memory
    budget_rows: list[np.ndarray] = []   # rows whose upper bound is a constant + cap (StandardForm.with_budget)
    s_m = m[I]  # coefficient of S[t, i]
    if memory_rows == "recurrence":
        stage_S = [np.flatnonzero(T == t) for t in range(n)]  # S columns (== nv + index) of each stage
        f_by_stage = np.searchsorted(ft, np.arange(n + 1))
        rows, cols, vals, rhs_lo, rhs_hi = [], [], [], [], []
        row = 0
        for t in range(n):
            ks = K_k[K_t == t]
            fs = slice(f_by_stage[t], f_by_stage[t + 1])
            f_j, f_c, f_m = fj[fs], fcol[fs], m[fi[fs]]
            sc = nv + stage_S[t]
            for a, k in enumerate(ks):
                const_r = k == t
                if a == 0:
                    cols.append(np.concatenate([[Ucol[t, k]], sc]))
                    vals.append(np.concatenate([[1.0], -s_m[stage_S[t]]]))
                else:
                    prev = ks[a - 1]
                    sel = f_j == prev
                    cols.append(np.concatenate([[Ucol[t, k], Ucol[t, prev]], f_c[sel]]))
                    vals.append(np.concatenate([[1.0, -1.0], f_m[sel]]))
                if not const_r:
                    cols[-1] = np.concatenate([cols[-1], [Rcol[t, k]]])
                    vals[-1] = np.concatenate([vals[-1], [-m[k]]])
                rows.append(np.full(len(cols[-1]), row))
                rhs = m[k] if const_r else 0.0
                rhs_lo.append(rhs)
                rhs_hi.append(rhs)
                row += 1
        rb.add("memory", row, np.concatenate(rows), np.concatenate(cols), np.concatenate(vals),
               np.asarray(rhs_lo), np.asarray(rhs_hi))
        # workspace at the compute instant: U[t,k] + ws_k R[t,k] <= cap
        wmask = ws[K_k] > 0
        wt, wk = K_t[wmask], K_k[wmask]
        if len(wt):
            const = wk == wt
            r = np.arange(len(wt))
            budget_rows.append(rb.add("workspace", len(wt), np.concatenate([r, r[~const]]),
                   np.concatenate([Ucol[wt, wk], Rcol[wt[~const], wk[~const]]]),
                   np.concatenate([np.ones(len(wt)), ws[wk[~const]]]),
                   -np.inf, np.where(const, cap - ws[wk], cap)))
    else:
        # one row per (stage t, computable node k): the kept values S[t, .], the values R[t, j <= k]
        # computed so far in the stage (with k's workspace), minus those freed after a user j < k
        rows_k = len(K_t)
        row_start = np.searchsorted(K_t, np.arange(n + 1))         # rows of stage t: row_start[t]..[t+1]
        col_start = np.searchsorted(T, np.arange(n + 1))           # R and S columns of stage t (contiguous)
        n_cols_t = np.diff(col_start)
        pos = np.arange(rows_k) - row_start[K_t]                    # k's place among the stage's rows
        # the kept values: every S column of the stage
        cnt_s = n_cols_t[K_t]
        r_s = np.repeat(np.arange(rows_k), cnt_s)
        i_s = np.repeat(col_start[K_t], cnt_s) + _offsets(cnt_s)
        # the computed values: the stage's R columns up to k (its rows are its R nodes in order, then t)
        cnt_r = np.minimum(pos + 1, n_cols_t[K_t])
        r_r = np.repeat(np.arange(rows_k), cnt_r)
        i_r = np.repeat(col_start[K_t], cnt_r) + _offsets(cnt_r)
        v_r = m[I[i_r]] + np.where(I[i_r] == K_k[r_r], ws[K_k[r_r]], 0.0)
        # the freed values: FREE[t, i, j] in every row of the stage after j
        after = np.searchsorted(K_t * n + K_k, ft * n + fj, side="right")   # first row of stage ft with k > fj
        cnt_f = row_start[ft + 1] - after
        r_f = np.repeat(after, cnt_f) + _offsets(cnt_f)
        e_f = np.repeat(np.arange(nf), cnt_f)
        his = cap - np.where(K_k == K_t, m[K_t] + ws[K_t], 0.0)
        budget_rows.append(rb.add("memory", rows_k, np.concatenate([r_s, r_r, r_f]),
                                  np.concatenate([nv + i_s, i_r, fcol[e_f]]),
                                  np.concatenate([s_m[i_s], v_r, -m[fi[e_f]]]), -np.inf, his))

    if on("knapsack"):
        # the values kept into stage t+1 (other than t and its inputs) are all present when t is computed:
        # sum_i m_i S[t+1,i] <= cap - m_t - ws_t - m(inputs of t). The strong LP implies each row through
        # its continuous FREE columns; explicit and over binaries only, it is a knapsack row the MILP
        # solver derives cover cuts from. Rows whose coefficients are all equal (unit sizes) give no
        # cover a cardinality row does not already state, and are left out (docs/formulation.rst).
        kt, ki = np.nonzero((Scol[1:, :] >= 0) & ~is_dep[:-1, :] & (np.arange(n)[None, :] < np.arange(n - 1)[:, None]))
        if len(kt):
            coef = m[ki]
            first = np.searchsorted(kt, np.arange(n - 1))
            count = np.bincount(kt, minlength=n - 1)
            spread = np.maximum.reduceat(coef, first[count > 0]) - np.minimum.reduceat(coef, first[count > 0])
            keep_t = np.flatnonzero(count > 0)[(count[count > 0] >= 2) & (spread > 0)]
            sel = np.isin(kt, keep_t)
            row_of_t = np.full(n, -1, dtype=np.int64)
            row_of_t[keep_t] = np.arange(len(keep_t))
            budget_rows.append(rb.add("knapsack", len(keep_t), row_of_t[kt[sel]], Scol[kt[sel] + 1, ki[sel]],
                                      coef[sel], -np.inf,
                                      cap - m[keep_t] - ws[keep_t] - is_dep[keep_t, :].astype(np.float64) @ m))
    if cap < 0:   # the budget does not even hold the fixed bytes: an empty row 0 >= 1
        rb.add("budget_below_fixed_bytes", 1, [], [], [], 1.0, np.inf)
    A, row_lo, row_hi = rb.build(n_cols)
    diag = np.arange(n, dtype=np.int64)
    u_t, u_k = (K_t, K_k) if memory_rows == "recurrence" else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return StandardForm(
        c=c, A=A, row_lo=row_lo, row_hi=row_hi, col_lo=col_lo, col_hi=col_hi, integrality=integrality,
        objective_offset=float(graph.cost.sum()), formulation="strong", budget_bytes=int(budget_bytes),
        memory_unit=unit, graph=graph,
        r_t=T, r_i=I, r_col=np.arange(nv), s_t=T, s_i=I, s_col=nv + np.arange(nv),
        r_fixed_t=diag, r_fixed_i=diag,
        f_t=ft, f_i=fi, f_k=fj, f_col=fcol,
        u_t=u_t, u_k=u_k, u_col=Ucol[u_t, u_k] if len(u_t) else np.zeros(0, np.int64),
        canonical=on("canonical") or on("one_copy"), row_families=dict(rb.families),
        budget_rows=np.concatenate(budget_rows) if budget_rows else np.zeros(0, np.int64),
    )


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``0..c-1`` for each ``c`` in ``counts``, concatenated."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
