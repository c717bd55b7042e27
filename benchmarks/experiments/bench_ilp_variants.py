"""What else was tried to make the strong MILP prove optimality faster, measured in one run.

The strong formulation (``formulation="strong"``, HiGHS, one thread, no warm
start) on two of the issue's chains and a random DAG, against variants: HiGHS options,
extra integer columns to branch on, a warm start with the optimal schedule,
path inequalities separated at the root LP,
the optimum minus one as a cost cap (an infeasibility proof instead of an
optimization), and the CBC backend. The path inequalities have since been
shipped (``ilp``'s ``cuts=True``); this script now adds them with ``ilp``'s own
rounds (the recorded tables used a slower Python loop that found the same
rows, so their separation seconds are higher than a re-run's); the others are not shipped, and the section in
``benchmarks/experiments/README.md`` records why. The first row is the strong formulation
without path inequalities.

    python benchmarks/experiments/bench_ilp_variants.py             # linear(8) at 4, random(10) at 60, linear(16) at 6; 300 s per solve
    python benchmarks/experiments/bench_ilp_variants.py --quick     # linear(8) only
    python benchmarks/experiments/bench_ilp_variants.py --instances "random(5,random(16" --variants shipped,path \
        --section ilp-variants-path                     # the path inequalities on the other random DAGs
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
from bench_ilp import INSTANCES as ALL_INSTANCES  # noqa: E402

from remat_core import solve  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers.backends import available_backends, solve_arrays  # noqa: E402
from remat_core.solvers.ilp import _strengthen  # noqa: E402

#: the default instances; --instances picks others from bench_ilp.py's list by label prefix
DEFAULT = ("linear(8)", "random(10 layers, seed 2)", "linear(16)")
INSTANCES = [next(i for i in ALL_INSTANCES if i[0] == label) for label in DEFAULT]
SHIPPED = {"mip_pscost_minreliable": 0}   # the strong formulation's HiGHS default in remat_core.solvers.ilp


def with_count_columns(sf, groups):
    """``sf`` plus one integer column per group equal to the sum of the group's columns."""
    k, n_cols = len(groups), len(sf.c)
    rows = np.repeat(np.arange(k), [len(g) + 1 for g in groups])
    cols = np.concatenate([np.append(g, n_cols + r) for r, g in enumerate(groups)])
    vals = np.concatenate([np.append(np.ones(len(g)), -1.0) for g in groups])
    extra = sp.csr_array((vals, (rows, cols)), shape=(k, n_cols + k))
    A = sp.vstack([sp.hstack([sf.A, sp.csr_array((sf.A.shape[0], k))]), extra]).tocsr()
    return dict(c=np.concatenate([sf.c, np.zeros(k)]), A=A,
                row_lo=np.concatenate([sf.row_lo, np.zeros(k)]), row_hi=np.concatenate([sf.row_hi, np.zeros(k)]),
                col_lo=np.concatenate([sf.col_lo, np.zeros(k)]),
                col_hi=np.concatenate([sf.col_hi, np.full(k, float(sf.graph.n))]),
                integrality=np.concatenate([sf.integrality, np.ones(k, dtype=np.uint8)]))


def with_cost_cap(sf, cap):
    """``sf`` plus the row ``cost <= cap`` (in the objective's units, offset removed)."""
    A = sp.vstack([sf.A, sp.csr_array(sf.c.reshape(1, -1))]).tocsr()
    return dict(c=sf.c, A=A, row_lo=np.append(sf.row_lo, -np.inf), row_hi=np.append(sf.row_hi, cap - sf.objective_offset),
                col_lo=sf.col_lo, col_hi=sf.col_hi, integrality=sf.integrality)


def plain(sf):
    return dict(c=sf.c, A=sf.A, row_lo=sf.row_lo, row_hi=sf.row_hi, col_lo=sf.col_lo, col_hi=sf.col_hi,
                integrality=sf.integrality)


def variants(sf, optimum, best_schedule):
    n = sf.graph.n
    per_value = [sf.r_col[sf.r_i == i] for i in range(n) if np.any(sf.r_i == i)]
    per_stage = [sf.s_col[sf.s_t == t] for t in range(n) if np.any(sf.s_t == t)]
    yield "strong, shipped options", "highs", plain(sf), SHIPPED, None
    yield "no cut separation at B&B nodes", "highs", plain(sf), {**SHIPPED, "mip_allow_cut_separation_at_nodes": False}, None
    yield "no restarts", "highs", plain(sf), {**SHIPPED, "mip_allow_restart": False}, None
    yield "probing with lifting", "highs", plain(sf), {**SHIPPED, "mip_lifting_for_probing": 1}, None
    yield "integer count sum_t R[t,i] per value", "highs", with_count_columns(sf, per_value), SHIPPED, None
    yield "integer count sum_i S[t,i] per stage", "highs", with_count_columns(sf, per_stage), SHIPPED, None
    yield "warm start with an optimal schedule", "highs", plain(sf), SHIPPED, sf.encode(best_schedule)
    cut, bound, st = _strengthen(sf, "highs", 1, None)   # ilp's rounds (cuts=True)
    yield (f"+ {st['rows']} path inequalities (root LP {bound:.2f}; separation {st['time_s']:.1f} s, "
           "not in the time)"), "highs", plain(cut), SHIPPED, None
    yield "row cost <= optimum - 1 (prove infeasible)", "highs", with_cost_cap(sf, optimum - 1), SHIPPED, None
    if "cbc" in available_backends():
        yield "CBC backend", "cbc", plain(sf), None, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="linear(8) only")
    ap.add_argument("--limit", type=float, default=300.0, help="time limit per solve (s)")
    ap.add_argument("--instances", default=None,
                    help="comma-separated label prefixes, also from the other bench_ilp instances")
    ap.add_argument("--variants", default=None, help="comma-separated substrings of variant names")
    ap.add_argument("--section", default="ilp-variants", help="README section to write")
    args = ap.parse_args()
    rows, raw = [], []
    chosen = INSTANCES[:1] if args.quick else INSTANCES
    if args.instances:
        prefixes = args.instances.split(",")
        chosen = [i for i in ALL_INSTANCES if any(i[0].startswith(p) for p in prefixes)]
    wanted = args.variants.split(",") if args.variants else None
    for label, make, budget in chosen:
        g = make()
        sf = build_milp(g, budget, "strong")
        ref = solve(g, budget, method="ilp")
        assert ref.status.value == "optimal", ref
        optimum = ref.objective
        base = None
        for name, backend, prog, options, start in variants(sf, optimum, ref.schedule):
            if wanted and not any(w in name for w in wanted):
                continue
            t0 = time.perf_counter()
            out = solve_arrays(backend, prog["c"], prog["A"], prog["row_lo"], prog["row_hi"], prog["col_lo"],
                               prog["col_hi"], prog["integrality"], threads=1, time_limit_s=args.limit,
                               options=options, start=start if start is None else
                               np.concatenate([start, np.zeros(len(prog["c"]) - len(start))]))
            dt = time.perf_counter() - t0
            obj = None if out.objective is None else out.objective + sf.objective_offset
            bound = None if out.bound is None else out.bound + sf.objective_offset
            status = out.status.value
            proved = status == "infeasible" if name.startswith("row cost") else (
                status == "optimal" and abs(obj - optimum) < 1e-6)
            base = dt if base is None else base
            rows.append([label, budget, name, status, f"{dt:.1f}", out.stats.get("nodes", ""),
                         "-" if bound is None else f"{bound:.2f}", "yes" if proved else "no", f"{dt / base:.2f}"])
            raw.append(dict(instance=label, budget=budget, variant=name, backend=backend, status=status, time_s=dt,
                            nodes=out.stats.get("nodes"), objective=obj, bound=bound, proved=proved))
            print(label, name, status, round(dt, 1), out.stats.get("nodes"), flush=True)
    save_json(args.section.replace("-", "_"), raw, folder=EXPERIMENTS_RESULTS)
    md = [
        "## ilp: variants of the strong MILP that were tried and not shipped (issue 3)",
        "",
        f"Command: `{command_line()}`  ",
        f"Machine: {machine_line()}  ",
        f"Strong formulation, no warm start unless the variant says so, one thread, limit {args.limit:.0f} s. "
        "*proved*: the optimum (or, for the cost-cap row, infeasibility) was proven within the limit; "
        "*vs first row*: time relative to the shipped options on the same instance, in this run. "
        "The path inequalities are described in `docs/formulation.rst`; the root LP bound after separating them "
        "is in the variant's name (the strong formulation's own root bound: linear(8) 23, random(10) 225.75, "
        "linear(16) 45).",
        "",
        table(["instance", "budget", "variant", "status", "s", "B&B nodes", "bound", "proved", "vs first row"], rows),
    ]
    write_section(args.section, "\n".join(md), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
