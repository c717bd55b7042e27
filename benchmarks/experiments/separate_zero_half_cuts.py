"""Do {0,1/2}-Chvatal-Gomory cuts close what the path inequalities leave? Exact separation, on a small chain.

Starting from the strong LP of ``linear_graph(8)`` at 4 units with the path
inequalities that ``ilp`` adds (LP 24.92, optimum 26), each round finds the
most violated {0,1/2}-cut over the program's pure-integer rows: half the sum of
a subset of rows (each ``a x <= b`` with integer ``a``, ``b`` over integer
columns, the bounds ``0 <= x <= 1`` included), rounded down, which is valid for
every integer point. The subset is chosen by a separation MILP over GF(2)
(Caprara and Fischetti): minimize the rows' slacks at the LP point plus the
bound rows' slacks, such that every column's combined coefficient is even and
the right-hand side odd; the cut is violated by ``(1 - that minimum) / 2``.
With ``--knapsack-rows`` the program first gets one pure-binary row per stage
``t``: the values kept into stage ``t + 1`` other than ``t`` and its inputs fit
in the memory that the compute instant of ``t`` leaves (every schedule meets it;
the strong LP implies it, HiGHS sees it only through continuous columns).
A prototype for a question, not shipped: see the tuning history in this folder's ``README.md``.

    python benchmarks/experiments/separate_zero_half_cuts.py                    # linear(8) at 4, 10 rounds
    python benchmarks/experiments/separate_zero_half_cuts.py --knapsack-rows
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import command_line, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import solve  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.formulation._rows import scaled_memory  # noqa: E402
from remat_core.formulation.cuts import _columns, with_rows  # noqa: E402
from remat_core.solvers.backends import solve_arrays  # noqa: E402
from remat_core.solvers.ilp import _strengthen  # noqa: E402
from remat_core.zoo import linear_graph  # noqa: E402


def knapsack_rows(sf):
    """Per stage ``t``: ``sum m_i S[t+1, i] <= cap - m_t - ws_t - m(inputs of t)`` over the other values ``i < t``."""
    g = sf.graph
    _, m, ws, cap = scaled_memory(g, sf.budget_bytes, sf.memory_unit)
    _, scol = _columns(sf)
    inputs = [set() for _ in range(g.n)]
    for i, k in g.edges:
        inputs[int(k)].add(int(i))
    rr, cc, vv, hi = [], [], [], []
    for t in range(g.n - 1):
        free = cap - m[t] - ws[t] - sum(m[i] for i in inputs[t])
        values = [i for i in range(t) if i not in inputs[t] and scol[t + 1, i] >= 0]
        if values and sum(m[i] for i in values) > free + 1e-9:   # else the row can never bind
            rr += [len(hi)] * len(values)
            cc += [scol[t + 1, i] for i in values]
            vv += [m[i] for i in values]
            hi.append(free)
    A = sp.csr_array((vv, (rr, cc)), shape=(len(hi), len(sf.c)))
    return A, np.full(len(hi), -np.inf), np.asarray(hi, dtype=np.float64)


def integer_rows(sf):
    """The rows over integer columns with integer data, each as ``(cols, coefs) x <= rhs``."""
    A, integer = sf.A.tocsr(), sf.integrality.astype(bool)
    rows, rhs = [], []
    for r in range(A.shape[0]):
        cols, vals = A.indices[A.indptr[r]:A.indptr[r + 1]], A.data[A.indptr[r]:A.indptr[r + 1]]
        if len(cols) == 0 or not integer[cols].all() or np.any(vals != np.round(vals)):
            continue
        for bound, sign in ((sf.row_hi[r], 1.0), (sf.row_lo[r], -1.0)):
            if np.isfinite(bound) and bound == round(bound):
                rows.append((cols, sign * vals))
                rhs.append(sign * bound)
    return rows, np.asarray(rhs)


def separate(sf, x, rows, rhs, time_limit_s):
    """The most violated {0,1/2}-cut ``coef @ x <= b`` at ``x``, or ``None``; with its violation and row count."""
    slack = np.array([b - v @ x[c] for (c, v), b in zip(rows, rhs)])
    cand = np.flatnonzero(slack < 1.0 - 1e-6)   # a row with slack >= 1 cannot be part of a violated cut
    if len(cand) == 0:
        return None
    cols = np.unique(np.concatenate([rows[r][0] for r in cand]))
    pos = np.full(len(sf.c), -1)
    pos[cols] = np.arange(len(cols))
    m, nc = len(cand), len(cols)
    # variables: u (rows), lo (x_j >= 0 used), up (x_j <= 1 used), q (parity multiples), p (rhs parity).
    # row j < nc: sum_k u_k a_kj - lo_j + up_j - 2 q_j = 0 (even coefficient); row nc: sum_k u_k b_k + sum_j up_j
    # - 2 p = 1 (odd right-hand side); row nc + 1: at least one row
    nv = m + 3 * nc + 1
    obj = np.concatenate([slack[cand], x[cols], 1.0 - x[cols], np.zeros(nc + 1)])
    rr, cc, vv = [], [], []
    for k, r in enumerate(cand):
        c, v = rows[r]
        rr += list(pos[c]) + [nc, nc + 1]
        cc += [k] * (len(c) + 2)
        vv += list(v) + [rhs[r], 1.0]
    j = np.arange(nc)
    rr += list(j) + list(j) + list(j) + [nc] * nc + [nc]
    cc += list(m + j) + list(m + nc + j) + list(m + 2 * nc + j) + list(m + nc + j) + [nv - 1]
    vv += [-1.0] * nc + [1.0] * nc + [-2.0] * nc + [1.0] * nc + [-2.0]
    A = sp.csr_array((vv, (rr, cc)), shape=(nc + 2, nv))
    lo = np.concatenate([np.zeros(nc), [1.0, 1.0]])
    hi = np.concatenate([np.zeros(nc), [1.0, np.inf]])
    big = 1e4
    col_lo = np.concatenate([np.zeros(m + 2 * nc), np.full(nc + 1, -big)])
    col_hi = np.concatenate([np.ones(m + 2 * nc), np.full(nc + 1, big)])
    out = solve_arrays("highs", obj, A, lo, hi, col_lo, col_hi, np.ones(nv, dtype=np.uint8),
                       time_limit_s=time_limit_s, threads=1)
    if out.x is None or out.objective is None or out.objective >= 1.0 - 1e-4:
        return None
    u = np.round(out.x[:m]).astype(bool)
    coef, b = np.zeros(len(sf.c)), 0.0
    for r in cand[u]:
        c, v = rows[r]
        coef[c] += v
        b += rhs[r]
    coef[cols] += np.round(out.x[m + nc:m + 2 * nc]) - np.round(out.x[m:m + nc])
    b += np.round(out.x[m + nc:m + 2 * nc]).sum()
    assert np.all(np.mod(coef, 2) == 0) and b % 2 == 1   # what the MILP's parity rows guarantee
    return coef / 2, (b - 1) / 2, (1.0 - out.objective) / 2, int(u.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--knapsack-rows", action="store_true", help="add the per-stage knapsack rows first")
    ap.add_argument("--limit", type=float, default=30.0, help="time limit of each separation MILP (s)")
    args = ap.parse_args()
    g = linear_graph(args.layers)
    optimum = solve(g, args.budget, method="ilp").objective
    sf = build_milp(g, args.budget, "strong")
    if args.knapsack_rows:
        sf = with_rows(sf, *knapsack_rows(sf), "frontier_knapsack")
    sf, _, _ = _strengthen(sf, "highs", 1, None)
    rows_md, raw = [], []
    t0 = time.perf_counter()
    for rnd in range(args.rounds + 1):
        lp = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                          np.zeros_like(sf.integrality))
        bound = lp.objective + sf.objective_offset
        if bound >= optimum - 1e-6 or rnd == args.rounds:
            rows_md.append([rnd, f"{bound:.4f}", "(bound = optimum)" if bound >= optimum - 1e-6 else "(round limit)",
                            "", ""])
            raw.append(dict(round=rnd, lp_bound=bound))
            break
        rows, rhs = integer_rows(sf)
        ts = time.perf_counter()
        found = separate(sf, lp.x, rows, rhs, args.limit)
        dt = time.perf_counter() - ts
        if found is None:
            rows_md.append([rnd, f"{bound:.4f}", "none found", "", f"{dt:.1f}"])
            raw.append(dict(round=rnd, lp_bound=bound, cut=None, separation_s=dt))
            print(f"round {rnd}: LP {bound:.4f}; no cut ({dt:.1f} s)", flush=True)
            break
        coef, b, viol, used = found
        rows_md.append([rnd, f"{bound:.4f}", f"{used} rows, {np.count_nonzero(coef)} terms", f"{viol:.3f}", f"{dt:.1f}"])
        raw.append(dict(round=rnd, lp_bound=bound, rows_combined=used, terms=int(np.count_nonzero(coef)),
                        violation=viol, separation_s=dt))
        print(f"round {rnd}: LP {bound:.4f}; cut of {used} rows, violation {viol:.3f} ({dt:.1f} s)", flush=True)
        sf = with_rows(sf, sp.csr_array(coef.reshape(1, -1)), [-np.inf], [b], "zero_half")
    section = "ilp-zero-half" + ("-knapsack" if args.knapsack_rows else "")
    save_json(section.replace("-", "_"), {"layers": args.layers, "budget": args.budget, "optimum": optimum,
                                          "knapsack_rows": args.knapsack_rows, "rounds": raw}, folder=EXPERIMENTS_RESULTS)
    md = [
        "## ilp: {0,1/2}-cuts after the path inequalities, on a small chain (issue 3)",
        "",
        f"Command: `{command_line()}`  ",
        f"Machine: {machine_line()}  ",
        f"`linear_graph({args.layers})` at {args.budget} units: optimum {optimum:g}; the strong LP with `ilp`'s path "
        "inequalities" + (" and the per-stage knapsack rows" if args.knapsack_rows else "") + ", then per round "
        "the most violated {0,1/2}-Chvatal-Gomory cut over the pure-integer rows (exact separation by a MILP with "
        f"a {args.limit:g} s limit; *none found*: none within it). {time.perf_counter() - t0:.0f} s in all.",
        "",
        table(["round", "LP bound", "cut", "violation", "separation s"], rows_md),
    ]
    write_section(section, "\n".join(md), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
