"""lp-rounding's allowance LPs: solved from scratch vs re-solved from the previous basis, in one run.

For each graph and budget, the strong LP relaxation is solved at the budget
reduced by each allowance of :data:`remat_core.solvers.lp_rounding.ALLOWANCES`
(up to 0.3), in order, twice: from scratch each time (``solve_arrays``, what
lp-rounding did before), and through one
:func:`~remat_core.solvers.backends.lp_sequence` with one memory unit, where
each LP after the first starts from the last optimal basis (what it does now).
Both must give the same optimum.

    python benchmarks/experiments/bench_lp_warm.py                       # random(16 layers), U-Net_6, ResNet-32_56
    python benchmarks/experiments/bench_lp_warm.py --max-allowance 0.1   # fewer LPs (ResNet-32_56's take minutes)
    python benchmarks/experiments/bench_lp_warm.py --quick    # random(16 layers) only
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import checkpoint_all_peak_bytes, load_dtr_dag  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers.backends import lp_sequence, solve_arrays  # noqa: E402
from remat_core.solvers.lp_rounding import ALLOWANCES  # noqa: E402
from remat_core.zoo import random_training_graph  # noqa: E402

GRAPHS = [
    ("random(16 layers, seed 3)", lambda: random_training_graph(16, 2, seed=3)),
    ("U-Net_6", lambda: load_dtr_dag(dtr_graph_path("U-Net_6"))),
    ("ResNet-32_56", lambda: load_dtr_dag(dtr_graph_path("ResNet-32_56"))),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-allowance", type=float, default=0.3, help="largest allowance tried")
    ap.add_argument("--fraction", type=float, default=0.4,
                    help="budget = lower bound + fraction x (checkpoint-all peak - lower bound)")
    args = ap.parse_args()
    rows, raw = [], []
    for label, make in GRAPHS[:1] if args.quick else GRAPHS:
        g = make()
        lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
        budget = int(lo + args.fraction * (hi - lo))
        free = budget - g.fixed_bytes
        seq, unit = lp_sequence("highs"), None
        cold_total = warm_total = 0.0
        for a in [x for x in ALLOWANCES if x <= args.max_allowance + 1e-12]:
            lp_budget = g.fixed_bytes + int(np.floor(free * (1.0 - a)))
            sf = build_milp(g, lp_budget, "strong")
            t0 = time.perf_counter()
            cold = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi,
                                np.zeros_like(sf.integrality))
            t_cold = time.perf_counter() - t0
            sfw = build_milp(g, lp_budget, "strong", memory_unit=unit)
            unit = sfw.memory_unit
            t0 = time.perf_counter()
            before = (seq.warm_solves, seq.warm_abandoned)
            warm = seq.solve(sfw.c, sfw.A, sfw.row_lo, sfw.row_hi, sfw.col_lo, sfw.col_hi)
            t_warm = time.perf_counter() - t0
            how = ("from the last basis" if seq.warm_solves > before[0] else
                   "warm re-solve abandoned, then from scratch" if seq.warm_abandoned > before[1] else "from scratch")
            v_cold, v_warm = cold.objective + sf.objective_offset, warm.objective + sfw.objective_offset
            assert abs(v_cold - v_warm) <= 1e-6 * max(1.0, abs(v_cold)), (label, a, v_cold, v_warm)
            cold_total += t_cold
            warm_total += t_warm
            rows.append([label, g.n, f"{a:g}", f"{v_cold:.6g}", f"{t_cold:.2f}", f"{t_warm:.2f}", how,
                         f"{t_cold / max(t_warm, 1e-9):.1f}x"])
            raw.append(dict(graph=label, allowance=a, lp=v_cold, cold_s=t_cold, warm_s=t_warm, how=how))
            print(rows[-1], flush=True)
        rows.append([f"**{label}: all**", "", "", "", f"{cold_total:.1f}", f"{warm_total:.1f}", "",
                     f"{cold_total / max(warm_total, 1e-9):.1f}x"])
    save_json("lp_warm", raw, folder=EXPERIMENTS_RESULTS)
    md = [
        "## lp-rounding: allowance LPs from scratch vs from the last basis (issue 3)",
        "",
        f"Command: `{command_line()}`  ",
        f"Machine: {machine_line()}  ",
        f"Budget: lower bound + {args.fraction:g} x (checkpoint-all peak - lower bound). Strong LP relaxation at "
        "each allowance in order; *from scratch*: a new HiGHS model each time (lp-rounding before); *warm*: one "
        "`lp_sequence`, the LPs built with one memory unit, each re-solved from the previous optimal basis "
        "(lp-rounding now); a re-solve that runs longer than the last solve from scratch (at least 1 s) is "
        "abandoned and the LP solved from scratch (column *sequence solve*; its time then includes both). Same "
        "optimum asserted. The first row of each graph is a cold solve in both columns.",
        "",
        table(["graph", "nodes", "allowance", "LP optimum", "from scratch s", "sequence s", "sequence solve",
               "faster by"], rows),
    ]
    write_section("lp-warm", "\n".join(md), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
