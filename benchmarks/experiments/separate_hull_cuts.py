"""Which inequalities close the strong LP's gap? Exact separation over the integer hull, on a small chain.

The strong LP relaxation of ``linear_graph(6)`` at 4 units is 17, the optimum
18 (the smallest chain where they differ). This script finds, round after
round, the inequality over the ``S`` and ``R`` columns that the current LP
point violates most (L1-normalized) among all inequalities valid for every
integer schedule, adds it to the LP and re-solves, until the bound reaches the
optimum. Separation uses the optimization oracle: a column-generation LP over
integer schedules, whose pricing problem is the MILP itself with the cut's
coefficients as objective. Exact but far too slow to ship; it shows what kind
of inequality the relaxation is missing.

    python benchmarks/experiments/separate_hull_cuts.py                      # linear_graph(6) at 4, up to 12 rounds
    python benchmarks/experiments/separate_hull_cuts.py --layers 7 --budget 4
    python benchmarks/experiments/separate_hull_cuts.py --layers 8 --budget 4 --after-path-inequalities   # what they leave
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import command_line, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import solve  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers.backends import solve_arrays  # noqa: E402
from remat_core.zoo import linear_graph  # noqa: E402


def separate(sf, xs, B, points, max_iter=2000):
    """The most violated valid inequality ``pi @ x <= pi0`` (``sum |pi| = 1``) over the ``B`` columns at ``xs``.

    ``points`` (integer schedules' ``B`` columns) grows as the pricing MILP finds new ones.
    """
    m = len(B)

    def price(pi):
        obj = np.zeros(len(sf.c))
        obj[B] = -pi
        out = solve_arrays("highs", obj, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                           threads=1)
        return np.round(out.x[B]), -out.objective

    for _ in range(max_iter):
        P = np.array(points)
        # variables: pi+ (m), pi- (m), pi0; maximize (pi+ - pi-) @ xs - pi0
        c = np.concatenate([-xs, xs, [1.0]])
        A_ub = np.vstack([np.hstack([P, -P, -np.ones((len(P), 1))]), np.concatenate([np.ones(2 * m), [0.0]])])
        b_ub = np.concatenate([np.zeros(len(P)), [1.0]])
        r = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * (2 * m) + [(None, None)], method="highs")
        pi, pi0 = r.x[:m] - r.x[m:2 * m], r.x[-1]
        x_new, value = price(pi)
        if value <= pi0 + 1e-7:
            return pi, pi0, pi @ xs - pi0
        points.append(x_new)
    raise RuntimeError("separation did not converge")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--after-path-inequalities", action="store_true",
                    help="start from the strong LP with the path inequalities that ilp adds (what is left after them)")
    args = ap.parse_args()
    g = linear_graph(args.layers)
    sf = build_milp(g, args.budget, "strong")
    section = "ilp-separation"
    if args.after_path_inequalities:
        from remat_core.solvers.ilp import _strengthen

        sf, _, _ = _strengthen(sf, "highs", 1, None)
        section = "ilp-separation-after-path"
    optimum = solve(g, args.budget, method="ilp").objective
    B = np.flatnonzero(sf.integrality == 1)
    name = {c: f"R[{t},{i}]" for t, i, c in zip(sf.r_t, sf.r_i, sf.r_col)}
    name.update({c: f"S[{t},{i}]" for t, i, c in zip(sf.s_t, sf.s_i, sf.s_col)})
    A, lo, hi = sf.A.tocsr(), sf.row_lo.copy(), sf.row_hi.copy()
    points = []
    rows, raw = [], []
    t0 = time.perf_counter()
    for rnd in range(args.rounds + 1):
        lp = solve_arrays("highs", sf.c, A, lo, hi, sf.col_lo, sf.col_hi, np.zeros_like(sf.integrality))
        bound = lp.objective + sf.objective_offset
        xs = lp.x[B]
        if not points:   # seed the hull with one optimal schedule
            opt = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality)
            points.append(np.round(opt.x[B]))
        if bound >= optimum - 1e-6 or rnd == args.rounds:
            rows.append([rnd, f"{bound:.4f}", "(bound = optimum)" if bound >= optimum - 1e-6 else "(round limit)", "", ""])
            raw.append(dict(round=rnd, lp_bound=bound))
            print(f"round {rnd}: LP {bound:.4f}", flush=True)
            break
        pi, pi0, viol = separate(sf, xs, B, points)
        scale = np.abs(pi).max()
        terms = [f"{pi[k] / scale:+.3g} {name[B[k]]} ({xs[k] + 0.0:.2f})" for k in np.argsort(-np.abs(pi))
                 if abs(pi[k]) > 1e-6]
        rows.append([rnd, f"{bound:.4f}", " ".join(terms) + f" <= {pi0 / scale + 0.0:.3g}", f"{viol:.3f}", len(points)])
        raw.append(dict(round=rnd, lp_bound=bound, cut=terms, rhs=pi0 / scale + 0.0, violation=viol, points=len(points)))
        print(f"round {rnd}: LP {bound:.4f}; cut {' '.join(terms)} <= {pi0 / scale + 0.0:.3g}", flush=True)
        row = np.zeros(len(sf.c))
        row[B] = pi / scale
        A = sp.vstack([A, sp.csr_array(row.reshape(1, -1))]).tocsr()
        lo, hi = np.append(lo, -np.inf), np.append(hi, pi0 / scale)
    elapsed = time.perf_counter() - t0
    save_json(section.replace("-", "_"), {"layers": args.layers, "budget": args.budget, "optimum": optimum, "rounds": raw}, folder=EXPERIMENTS_RESULTS)
    md = [
        "## ilp: inequalities that close the strong LP's gap on a small chain (issue 3)",
        "",
        f"Command: `{command_line()}`  ",
        f"Machine: {machine_line()}  ",
        f"`linear_graph({args.layers})` at {args.budget} units: optimum {optimum:g}"
        + (", starting from the strong LP with the path inequalities that `ilp` adds" if args.after_path_inequalities
           else "") + ". Each round adds the valid "
        "inequality (over the S and R columns, valid for every integer schedule) that the LP point violates most, "
        "found by exact separation over the integer hull; values in brackets are the LP point's. "
        f"{len(points)} integer schedules were generated; {elapsed:.0f} s in all.",
        "",
        table(["round", "LP bound", "most violated valid inequality (normalized)", "violation", "schedules so far"],
              rows),
    ]
    write_section(section, "\n".join(md), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
