"""Valid rows that the strong LP relaxation violates, separated at an LP point.

Two families: path inequalities (:func:`path_inequalities`) and lifted cover
inequalities of the knapsack rows (:func:`cover_inequalities`).

Path inequalities
-----------------

For a stage ``g``, a value ``v < g`` whose first reader at or after ``g`` is
``t`` (the frontier computes ``t`` in stage ``t``), an ancestor ``a`` of ``v``
and a path ``P`` from ``a`` to ``v`` in the graph::

    sum_{s = g..t} R[s, a]  +  sum_{b in P} S[g, b]  >=  1

If no value of ``P`` is kept into stage ``g``, then ``v`` is computed again by
stage ``t``, which needs its predecessor on ``P`` present at that moment, which
(not being kept into ``g``) was computed again in a stage ``g..t``, and so on
back to ``a``. Every schedule the formulation admits satisfies the row; the LP
point usually does not, because it keeps each value of a chain a fraction of
the time and pays for a fraction of one recomputation (``docs/formulation.rst``).

Separation is exact over the whole family: for each stage ``g`` the path of
least ``S*[g, .]`` weight between every pair of values is found by a dynamic
program over the DAG, and the most violated rows are returned. The dynamic
program is a kernel (:func:`remat_core.kernels.path_cuts`: C++, numba or the
numpy reference): branch-and-cut separates at every node.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import kernels
from .standard_form import StandardForm

__all__ = ["path_inequalities", "cover_inequalities", "with_rows", "without_family"]


def _columns(sf: StandardForm) -> tuple[np.ndarray, np.ndarray]:
    """``(Rcol, Scol)``: the column of every ``R[t, i]`` and ``S[t, i]`` (-1: none)."""
    n = sf.graph.n
    Rcol = np.full((n, n), -1, dtype=np.int64)
    Scol = np.full((n, n), -1, dtype=np.int64)
    Rcol[sf.r_t, sf.r_i] = sf.r_col
    Scol[sf.s_t, sf.s_i] = sf.s_col
    return Rcol, Scol


def _first_reader_from(graph) -> np.ndarray:
    """``out[g, v]``: the first reader of ``v`` at or after stage ``g`` (``n`` if none)."""
    n = graph.n
    out = np.full((n + 1, n), n, dtype=np.int64)
    for i, k in graph.edges[np.argsort(-graph.edges[:, 1], kind="stable")]:
        out[: int(k) + 1, int(i)] = int(k)    # later readers first, so the earliest one is written last
    return out


def path_inequalities(sf: StandardForm, x: np.ndarray, max_cuts: int = 500, tol: float = 1e-6,
                      ) -> tuple[sp.csr_array, np.ndarray]:
    """The path inequalities violated by the point ``x`` of ``sf``, most violated first.

    Parameters
    ----------
    sf : StandardForm
        A ``"strong"`` program (the rows are stated over its ``R`` and ``S`` columns).
    x : numpy.ndarray
        A point (usually the LP optimum), one value per column.
    max_cuts : int
        At most this many rows, the most violated.
    tol : float
        Only rows violated by more than ``tol``.

    Returns
    -------
    (rows, violation)
        ``rows``: a ``csr_array`` of shape ``(k, sf.n_cols)`` with 0/1 entries,
        each to be read ``rows @ x >= 1``; ``violation``: ``1 - rows @ x``.
    """
    if sf.formulation != "strong":
        raise ValueError(f"path inequalities are stated for the 'strong' formulation; got {sf.formulation!r}")
    if isinstance(max_cuts, bool) or not isinstance(max_cuts, (int, np.integer)) or max_cuts < 1:
        raise ValueError(f"`max_cuts` must be a positive integer; got {max_cuts!r}")
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (sf.n_cols,):
        raise ValueError(f"`x` must have one value per column ({sf.n_cols}); got shape {x.shape}")
    g = sf.graph
    n = g.n
    if n < 2:
        return sp.csr_array((0, sf.n_cols)), np.zeros(0)
    in_ptr, in_idx, first, Rcol, Scol = _path_data(sf)
    R, S = sf.fractional(x)
    # W[g, b]: weight of b on a path in stage g: S*[g, b], infinite where b has no S column in stage g
    # (b >= g, or no later stage reads b: such b lies on no path to a value read again)
    W = np.where(Scol >= 0, S, np.inf)
    cum = np.vstack([np.zeros((1, n)), np.cumsum(R, axis=0)])   # recomputations of a in stages g..t: cum[t + 1] - cum[g]
    viol, ptr, idx = kernels.path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts)
    rows = sp.csr_array((np.ones(len(idx)), idx, ptr), shape=(len(viol), sf.n_cols))
    rows.sum_duplicates()
    return rows, viol


def _path_data(sf: StandardForm) -> tuple[np.ndarray, ...]:
    """``(in_ptr, in_idx, first, Rcol, Scol)`` of ``sf`` for the separation kernel, built once per program
    (branch-and-cut separates at every node of one program)."""
    cached = sf.__dict__.get("_path_data")
    if cached is None:
        in_ptr, in_idx, _, _ = sf.graph.csr
        Rcol, Scol = _columns(sf)
        cached = (in_ptr, in_idx, np.ascontiguousarray(_first_reader_from(sf.graph)[:sf.graph.n]), Rcol, Scol)
        sf.__dict__["_path_data"] = cached
    return cached


def without_family(sf: StandardForm, family: str) -> StandardForm:
    """``sf`` without the rows of ``family`` (each family's rows are contiguous, in ``row_families`` order)."""
    if family not in sf.row_families:
        return sf
    names = list(sf.row_families)
    start = sum(sf.row_families[k] for k in names[:names.index(family)])
    keep = np.ones(sf.n_rows, dtype=bool)
    keep[start:start + sf.row_families[family]] = False
    out = StandardForm(**{k: getattr(sf, k) for k in sf.__dataclass_fields__})
    out.A = sf.A.tocsr()[keep]
    out.row_lo, out.row_hi = sf.row_lo[keep], sf.row_hi[keep]
    out.row_families = {k: v for k, v in sf.row_families.items() if k != family}
    if sf.budget_rows is not None:   # renumbered past the removed rows
        out.budget_rows = (np.cumsum(keep) - 1)[sf.budget_rows[keep[sf.budget_rows]]]
    return out


def with_rows(sf: StandardForm, rows: sp.csr_array, row_lo: np.ndarray, row_hi: np.ndarray,
              family: str) -> StandardForm:
    """``sf`` with ``row_lo <= rows @ x <= row_hi`` appended, counted under ``family`` in ``row_families``."""
    out = StandardForm(**{k: getattr(sf, k) for k in sf.__dataclass_fields__})
    out.A = sp.vstack([sf.A, sp.csr_array(rows)]).tocsr()
    out.row_lo = np.concatenate([sf.row_lo, np.asarray(row_lo, dtype=np.float64)])
    out.row_hi = np.concatenate([sf.row_hi, np.asarray(row_hi, dtype=np.float64)])
    out.row_families = {**sf.row_families, family: sf.row_families.get(family, 0) + rows.shape[0]}
    out.budget_rows = None   # the added rows may depend on the budget (covers do): no longer re-budgeted
    for key in ("_path_data", "_knapsack_rows"):   # the columns and the rows before the new ones are the same
        if key in sf.__dict__:
            out.__dict__[key] = sf.__dict__[key]
    return out


def _family_slice(sf: StandardForm, family: str) -> slice:
    names = list(sf.row_families)
    start = sum(sf.row_families[k] for k in names[:names.index(family)])
    return slice(start, start + sf.row_families[family])


def _knapsack_rows(sf: StandardForm) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """``(columns, weights, capacity, tolerance)`` of each knapsack row of ``sf`` that its binaries can
    overfill (the others admit no cover), built once per program (branch-and-cut separates at every node)."""
    cached = sf.__dict__.get("_knapsack_rows")
    if cached is None:
        sl = _family_slice(sf, "knapsack")
        K = sp.csr_array(sf.A.tocsr()[sl])
        cached = []
        for r, cap in enumerate(sf.row_hi[sl].tolist()):
            cols, w = K.indices[K.indptr[r]:K.indptr[r + 1]], K.data[K.indptr[r]:K.indptr[r + 1]]
            eps = 1e-9 * max(1.0, abs(cap))
            if w.sum() > cap + eps:
                cached.append((cols, w, cap, eps))
        sf.__dict__["_knapsack_rows"] = cached
    return cached


def _lift(w: np.ndarray, cap: float, cover: list[int], order: list[int], eps: float) -> tuple[np.ndarray, int]:
    """Sequentially up-lifted cover inequality ``sum alpha_j x_j <= |cover| - 1`` of ``sum w_j x_j <= cap``.

    Each lifting coefficient is exact: ``alpha_k = rhs - max{sum alpha_j y_j : sum w_j y_j <= cap - w_k}``
    over the items lifted so far, found by a dynamic program over the (integer) values of
    ``sum alpha_j y_j`` that keeps the least weight reaching each value, so the weights may be real.
    """
    rhs = len(cover) - 1
    alpha = np.zeros(len(w), dtype=np.int64)
    alpha[cover] = 1
    least = np.full(rhs + 1, np.inf)          # least[v]: least weight of lifted items whose alphas sum to v
    least[0] = 0.0

    def add(j: int) -> None:
        a = int(alpha[j])
        for v in range(rhs, a - 1, -1):
            least[v] = min(least[v], least[v - a] + w[j])

    for j in cover:
        add(j)
    for k in order:
        room = cap - w[k]
        if room < -eps:                        # x_k = 1 alone overfills the row: it can take the whole rhs
            alpha[k] = rhs
        else:
            alpha[k] = rhs - int(np.flatnonzero(least <= room + eps).max())
        if alpha[k] > 0:
            add(k)
    return alpha, rhs


def cover_inequalities(sf: StandardForm, x: np.ndarray, max_cuts: int = 500, tol: float = 1e-6,
                       ) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    """Lifted cover inequalities of the strong program's knapsack rows violated by the point ``x``.

    Each knapsack row of the strong formulation (one per stage: the values kept
    into the next stage fit in what the stage's frontier step leaves,
    :mod:`~remat_core.formulation.strong`) reads ``sum_i w_i S[t+1, i] <= b``
    over binaries. A *cover* ``C`` (``sum_C w_i > b``) gives the valid row
    ``sum_C S[t+1, i] <= |C| - 1``, which the LP point may violate although it
    meets the knapsack row by keeping each value of ``C`` a fraction of the
    time. Per row, the cover is built greedily (values kept entirely first,
    then by ``(1 - x_i) / w_i``), made minimal, and the other values are lifted
    into it one by one, exactly (:func:`_lift`), those the LP keeps most
    first. A general MILP solver derives such rows itself from the knapsack
    rows; branch-and-cut needs them separated, and in the root rounds of
    ``ilp`` they raise the bound before the MILP starts.

    Parameters
    ----------
    sf : StandardForm
        A ``"strong"`` program (without knapsack rows, for example with equal
        sizes, there is nothing to separate).
    x : numpy.ndarray
        A point, one value per column.
    max_cuts : int
        At most this many rows, the most violated (at most one per knapsack row).
    tol : float
        Only rows violated by more than ``tol``.

    Returns
    -------
    (rows, rhs, violation)
        ``rows``: a ``csr_array`` of shape ``(k, sf.n_cols)`` with positive
        integer entries, each to be read ``rows @ x <= rhs``; ``violation``:
        ``rows @ x - rhs``, largest first.

    Raises
    ------
    ValueError
        If ``sf`` is not a strong program, or ``x`` or ``max_cuts`` is malformed.

    Examples
    --------
    >>> import numpy as np
    >>> from remat_core.formulation import build_milp
    >>> from remat_core.solvers.backends import solve_arrays
    >>> from remat_core.zoo import random_training_graph
    >>> sf = build_milp(random_training_graph(10, 2, seed=4), 54)
    >>> lp = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, np.zeros(sf.n_cols))
    >>> rows, rhs, violation = cover_inequalities(sf, lp.x)
    >>> rows.shape[0] > 0, bool((violation > 0).all()), bool(np.allclose(rows @ lp.x - rhs, violation))
    (True, True, True)
    """
    if sf.formulation != "strong":
        raise ValueError(f"cover inequalities are stated for the 'strong' formulation; got {sf.formulation!r}")
    if isinstance(max_cuts, bool) or not isinstance(max_cuts, (int, np.integer)) or max_cuts < 1:
        raise ValueError(f"`max_cuts` must be a positive integer; got {max_cuts!r}")
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (sf.n_cols,):
        raise ValueError(f"`x` must have one value per column ({sf.n_cols}); got shape {x.shape}")
    empty = (sp.csr_array((0, sf.n_cols)), np.zeros(0), np.zeros(0))
    if not sf.row_families.get("knapsack"):
        return empty
    found = []                                  # (violation, columns, coefficients, rhs)
    for cols, w, cap, eps in _knapsack_rows(sf):
        xs = np.clip(x[cols], 0.0, 1.0)
        if not np.any((xs > tol) & (xs < 1.0 - tol)):
            continue                                  # integral here: it meets the row, so every valid row too
        cover, weight = [], 0.0
        for j in np.lexsort(((1.0 - xs) / w, xs < 1.0 - tol)):
            if xs[j] <= tol:
                break                               # the rest are at 0: a cover with them is not violated
            cover.append(int(j))
            weight += w[j]
            if weight > cap + eps:
                break
        if weight <= cap + eps:
            continue
        for j in sorted(cover, key=lambda j: xs[j]):  # minimal: drop what the cover does not need
            if weight - w[j] > cap + eps:
                cover.remove(j)
                weight -= w[j]
        if len(cover) < 2:
            continue                                  # one value over the whole row: a bound, not a cut
        inside = set(cover)
        rest = [int(j) for j in np.argsort(-xs, kind="stable") if int(j) not in inside]
        alpha, rhs = _lift(w, cap, cover, rest, eps)
        viol = float(alpha @ xs) - rhs
        if viol > tol:
            nz = alpha > 0
            found.append((viol, cols[nz], alpha[nz].astype(np.float64), float(rhs)))
    if not found:
        return empty
    found.sort(key=lambda f: -f[0])
    found = found[:max_cuts]
    indptr = np.cumsum([0] + [len(f[1]) for f in found])
    rows = sp.csr_array((np.concatenate([f[2] for f in found]), np.concatenate([f[1] for f in found]), indptr),
                        shape=(len(found), sf.n_cols))
    return rows, np.array([f[3] for f in found]), np.array([f[0] for f in found])
