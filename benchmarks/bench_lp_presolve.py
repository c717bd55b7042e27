"""The strong formulation's root LP with and without HiGHS's presolve.

``ilp`` and ``lp-rounding`` solve their LPs with presolve off
(``remat_core.solvers.backends.highs.LPSequence``). This script solves the
root LP of each instance from scratch both ways, in one run, alternating the
two, each several times (median), and checks that the optima agree.
Instances: the six of ``bench_ilp.py``, the fifteen of ``bench_ilp_random.py``,
and larger random graphs (24, 32 and 50 layers, seed 1) at the same budget
rule; ``--quick`` takes the first three only.

    python benchmarks/bench_lp_presolve.py
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _report import command_line, machine_line, save_json, table, write_section  # noqa: E402

from bench_ilp import INSTANCES  # noqa: E402
from bench_ilp_random import FRACTION  # noqa: E402
from bench_ilp_random import instances as random_instances  # noqa: E402

from remat_core import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers.backends.highs import _pass_model  # noqa: E402
from remat_core.zoo import random_training_graph  # noqa: E402

RUNS = 5


def solve_once(sf, csc, presolve: str) -> tuple[float, float]:
    """Seconds (model load and solve, as a cold LP costs) and objective of one solve from scratch."""
    import highspy

    t0 = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", presolve)
    _pass_model(h, sf.c, csc, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, np.zeros(len(sf.c), np.int32))
    h.run()
    elapsed = time.perf_counter() - t0
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"LP not solved to optimality: {h.modelStatusToString(h.getModelStatus())}")
    return elapsed, float(h.getInfo().objective_function_value) + sf.objective_offset


def cases(quick: bool):
    out = [(label, make(), budget) for label, make, budget in INSTANCES]
    out += list(random_instances(quick=False))
    for layers in (24, 32, 50):
        g = random_training_graph(layers, 2, seed=1)
        lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
        out.append((f"random({layers} layers, seed 1)", g, int(round(lo + FRACTION * (hi - lo)))))
    return out[:3] if quick else out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three instances, print only")
    args = ap.parse_args()
    raw = []
    for label, g, budget in cases(args.quick):
        sf = build_milp(g, budget, "strong")
        csc = sf.A.tocsc()
        times = {"on": [], "off": []}
        objectives = {"on": [], "off": []}
        for _ in range(RUNS):
            for mode in ("on", "off"):   # alternating: a slow spell of the machine hits both
                t, obj = solve_once(sf, csc, mode)
                times[mode].append(t)
                objectives[mode].append(obj)
        every = objectives["on"] + objectives["off"]
        assert max(every) - min(every) <= 1e-6 * max(1.0, abs(every[0])), (label, every)
        row = {"instance": label, "nodes": g.n, "columns": sf.n_cols, "rows": sf.n_rows, "objective": every[0],
               "on_s": float(np.median(times["on"])), "off_s": float(np.median(times["off"])), "times_s": times}
        raw.append(row)
        print(f"{label}: {row['on_s'] * 1e3:.1f} ms with presolve, {row['off_s'] * 1e3:.1f} ms without", flush=True)
    if args.quick:
        return
    meta = {"command": command_line(), "machine": machine_line()}
    save_json("lp_presolve", {"meta": meta, "rows": raw})
    ratios = [r["on_s"] / r["off_s"] for r in raw]
    rows = [[r["instance"], r["nodes"], r["columns"], r["rows"], f"{r['objective']:.2f}", f"{r['on_s'] * 1e3:.1f}",
             f"{r['off_s'] * 1e3:.1f}", f"{r['on_s'] / r['off_s']:.1f}x"] for r in raw]
    write_section("lp-presolve", "\n".join([
        "## The root LP with and without HiGHS's presolve (issue 3)",
        "",
        f"Command: `{meta['command']}`  ",
        f"{meta['machine']}  ",
        f"The strong formulation's LP relaxation solved from scratch (model loaded and solved, as a cold LP in "
        f"`ilp` costs), {RUNS} times each way, alternating; the median. The optima agree (asserted). `ilp` and "
        f"`lp-rounding` solve their LPs with presolve off.",
        "",
        table(["instance", "nodes", "columns", "rows", "LP optimum", "presolve on ms", "presolve off ms",
               "on / off"], rows),
        "",
        f"Presolve off was faster on {sum(x > 1 for x in ratios)} of {len(ratios)} instances; ratio "
        f"{min(ratios):.1f}x to {max(ratios):.1f}x, geometric mean {float(np.exp(np.mean(np.log(ratios)))):.1f}x.",
    ]))


if __name__ == "__main__":
    main()
