"""The strong formulation's root LP with and without HiGHS's presolve.

``ilp`` and ``lp-rounding`` solve their LPs with presolve off
(``remat_core.solvers.backends.highs.LPSequence``). This script solves the
root LP of each instance from scratch both ways, in one run, alternating the
two, each several times (median), and checks that the optima agree. A second
table does the same for the LPs of the portfolio's short branch-and-cut (at most
0.5 s, its cap, after ``ilp``'s root rounds, from the rounded root point or
RENS), switching ``remat_core.solvers.backends.highs._LP_PRESOLVE`` (which the
short search reads when it starts).
Instances: the six of ``bench_ilp.py``, the fifteen of ``bench_ilp_random.py``,
and larger random graphs (24, 32 and 50 layers, seed 1) at the same budget
rule; ``--quick`` takes the first three only.

    python benchmarks/experiments/bench_lp_presolve.py
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import command_line, machine_line, quick_arguments, save_json, table, write_section  # noqa: E402

from bench_ilp import INSTANCES  # noqa: E402
from bench_ilp_random import FRACTION  # noqa: E402
from bench_ilp_random import instances as random_instances  # noqa: E402

from remat_core import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers import branch_and_cut as bc_module  # noqa: E402
from remat_core.solvers.backends import highs as highs_backend  # noqa: E402
from remat_core.solvers import ilp as ilp_module  # noqa: E402
from remat_core.solvers.portfolio import _QUICK_NODES, _QUICK_S  # noqa: E402
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


def quick_search(label, g, budget) -> dict:
    """The portfolio's short branch-and-cut with the node LPs' presolve on and off, alternating, RUNS times each."""
    sf = build_milp(g, budget, "strong")
    strong, _bound, stats = ilp_module._strengthen(sf, "highs", None, None)
    schedule, cost = ilp_module._rounded(g, strong, stats["x"], budget)
    if schedule is None:
        schedule, cost, _info = ilp_module._rens(g, strong, stats["x"], budget, ilp_module._RENS_TIME_S, None)
    start = strong.encode(schedule)
    out = {"instance": label, "start": cost}
    times = {"on": [], "off": []}
    for _ in range(RUNS):
        for mode in ("on", "off"):
            highs_backend._LP_PRESOLVE = mode
            t0 = time.perf_counter()
            res = bc_module.branch_and_cut(strong, start=start, node_limit=_QUICK_NODES, cover_rows=True,
                                           time_limit_s=_QUICK_S)
            times[mode].append(time.perf_counter() - t0)
            out[mode] = {"status": res.stats["backend_status"].replace("branch-and-cut: ", ""),
                         "nodes": res.stats["nodes"], "objective": res.objective + strong.objective_offset}
    highs_backend._LP_PRESOLVE = "off"
    for mode in ("on", "off"):
        out[mode]["time_s"] = float(np.median(times[mode]))
    out["times_s"] = times
    return out


def cases(quick: bool):
    out = [(label, make(), budget) for label, make, budget in INSTANCES]
    out += list(random_instances(quick=False))
    for layers in (24, 32, 50):
        g = random_training_graph(layers, 2, seed=1)
        lo, hi = g.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(g)
        out.append((f"random({layers} layers, seed 1)", g, int(round(lo + FRACTION * (hi - lo)))))
    return out[:3] if quick else out


def main() -> None:
    args = quick_arguments(__doc__, "three instances, print only")
    raw = []
    for label, g, budget in cases(args.quick):
        builds = []
        for _ in range(RUNS):   # the program's build, which ilp pays once before its first LP
            t0 = time.perf_counter()
            sf = build_milp(g, budget, "strong")
            builds.append(time.perf_counter() - t0)
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
        row = {"instance": label, "nodes": g.n, "columns": sf.n_cols, "rows": sf.n_rows, "objective": every[0], "build_s": float(np.median(builds)),
               "on_s": float(np.median(times["on"])), "off_s": float(np.median(times["off"])), "times_s": times}
        raw.append(row)
        print(f"{label}: {row['on_s'] * 1e3:.1f} ms with presolve, {row['off_s'] * 1e3:.1f} ms without", flush=True)
    quick_rows = []
    for label, g, budget in cases(args.quick)[:21]:
        r = quick_search(label, g, budget)
        quick_rows.append(r)
        print(f"{label}: short search {r['on']['time_s'] * 1e3:.1f} ms ({r['on']['status']}) with presolve, "
              f"{r['off']['time_s'] * 1e3:.1f} ms ({r['off']['status']}) without", flush=True)
    if args.quick:
        return
    meta = {"command": command_line(), "machine": machine_line()}
    save_json("lp_presolve", {"meta": meta, "rows": raw, "short_search": quick_rows}, folder=EXPERIMENTS_RESULTS)
    ratios = [r["on_s"] / r["off_s"] for r in raw]
    both = [r for r in quick_rows if r["on"]["status"] == r["off"]["status"] == "optimal"]
    rows = [[r["instance"], r["nodes"], r["columns"], r["rows"], f"{r['build_s'] * 1e3:.1f}", f"{r['objective']:.2f}",
             f"{r['on_s'] * 1e3:.1f}",
             f"{r['off_s'] * 1e3:.1f}", f"{r['on_s'] / r['off_s']:.1f}x"] for r in raw]
    write_section("lp-presolve", "\n".join([
        "## The root LP with and without HiGHS's presolve (issue 3)",
        "",
        f"Command: `{meta['command']}`  ",
        f"{meta['machine']}  ",
        f"The strong formulation's LP relaxation solved from scratch (model loaded and solved, as a cold LP in "
        f"`ilp` costs), {RUNS} times each way, alternating; the median. *build ms*: `build_milp(..., 'strong')`, "
        f"median of {RUNS}. The optima agree (asserted). `ilp` and "
        f"`lp-rounding` solve their LPs with presolve off.",
        "",
        table(["instance", "nodes", "columns", "rows", "build ms", "LP optimum", "presolve on ms", "presolve off ms",
               "on / off"], rows),
        "",
        f"Presolve off was faster on {sum(x > 1 for x in ratios)} of {len(ratios)} instances; ratio "
        f"{min(ratios):.1f}x to {max(ratios):.1f}x, geometric mean {float(np.exp(np.mean(np.log(ratios)))):.1f}x.",
        "",
        f"The portfolio's short branch-and-cut (at most "
        f"{'' if _QUICK_NODES is None else f'{_QUICK_NODES} nodes and '}{_QUICK_S} s, path and cover rows "
        f"of the root rounds, from the rounded root point or else RENS: *start*) with HiGHS's presolve on and off "
        f"for its node LPs (`backends.highs._LP_PRESOLVE`; only the first LP, solved cold, is affected, but its "
        f"vertex steers the search), {RUNS} runs each way, alternating; the median and the last run's status "
        f"and nodes.",
        "",
        table(["instance", "start", "presolve on", "presolve off", "on / off"],
              [[r["instance"], f"{r['start']:g}"]
               + [f"{r[m]['time_s'] * 1e3:.1f} ms ({r[m]['status']}, {r[m]['nodes']} nodes, {r[m]['objective']:g})"
                  for m in ("on", "off")]
               + [f"{r['on']['time_s'] / r['off']['time_s']:.2f}x"] for r in quick_rows]),
        "",
        f"Both proved the optimum on {len(both)} instances; presolve off was faster on "
        f"{sum(r['on']['time_s'] > r['off']['time_s'] for r in both)} of them.",
    ]), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
