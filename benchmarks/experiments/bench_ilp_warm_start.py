"""Does a better warm start make the MILP prove optimality faster? Measured in one run.

``ilp`` warm-starts the MILP with lp-rounding's schedule. lp-rounding spends
most of its time in a local search (``polish_evals`` evaluations, 50000 by
default) that makes the schedule cheaper; this script measures what that buys
the MILP. On each instance of ``bench_ilp.py`` the strong formulation with
``ilp``'s path inequalities is solved with HiGHS (``ilp``'s options) four
times: without a warm start, and from lp-rounding's schedule with 0, 2000 and
50000 local-search evaluations. ``ilp`` uses 2000 on graphs of up to 120 nodes
(``_WARM_START_POLISH_EVALS`` in ``remat_core/solvers/ilp.py``).

    python benchmarks/experiments/bench_ilp_warm_start.py            # the six bench_ilp instances, 600 s per solve
    python benchmarks/experiments/bench_ilp_warm_start.py --quick    # the two smallest; prints, leaves the README alone
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import (command_line, limit_arguments, machine_line, rewrite_section_from_results,  # noqa: E402
                     save_json, table, write_section)
from bench_ilp import INSTANCES, QUICK  # noqa: E402

from remat_core import simulate, solve  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.solvers.backends import solve_arrays  # noqa: E402
from remat_core.solvers.ilp import _HIGHS_STRONG_DEFAULTS, _WARM_START_POLISH_EVALS, _strengthen  # noqa: E402

POLISH = (0, _WARM_START_POLISH_EVALS, 50000)


def render(raw: list[dict], meta: dict) -> str:
    rows = [[r["instance"], r["budget"], r["warm_start"],
             "-" if r["warm_start_cost"] is None else f"{r['warm_start_cost']:g}", f"{r['warm_start_s']:.2f}",
             r["status"], "-" if r["objective"] is None else f"{r['objective']:g}", f"{r['milp_s']:.1f}",
             r["nodes"] if r["nodes"] is not None else "", f"{r['vs_none']:.2f}"] for r in raw]
    # per instance: the MILP from the short search's schedule vs from the long one's, and the long one's extra cost
    notes = []
    for label in dict.fromkeys(r["instance"] for r in raw):
        by = {r["polish_evals"]: r for r in raw if r["instance"] == label}
        short, long_ = by.get(_WARM_START_POLISH_EVALS), by.get(POLISH[-1])
        if short and long_:
            notes.append(f"{label} {short['milp_s']:.1f} s vs {long_['milp_s']:.1f} s "
                         f"(search {round(long_['warm_start_s'] - short['warm_start_s'], 1) + 0.0:+.1f} s)")
    return "\n".join([
        "## ilp: what a better warm start buys the MILP (issue 3)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}  ",
        "Strong formulation with `ilp`'s path inequalities, HiGHS with `ilp`'s options, limit "
        f"{meta['limit']:.0f} s. *warm start*: none, or lp-rounding's schedule after that many local-search "
        "evaluations (its cost and seconds); *MILP s*: the MILP alone; *vs none*: MILP time relative to no "
        "warm start on the same instance, in this run.",
        "",
        table(["instance", "budget", "warm start", "its cost", "its s", "status", "optimum", "MILP s",
               "B&B nodes", "vs none"], rows),
        "",
        f"MILP seconds from the schedule after {_WARM_START_POLISH_EVALS} evaluations (what `ilp` runs) vs after "
        f"{POLISH[-1]}, and how much longer the longer search took: " + "; ".join(notes) + ".",
    ])


def main() -> None:
    args = limit_arguments(__doc__, "the two smallest instances", 600.0, "time limit per MILP solve (s)")
    if args.report_only:
        rewrite_section_from_results("ilp_warm_start", "ilp-warm-start", render,
                                     folder=EXPERIMENTS_RESULTS, readme=EXPERIMENTS_README)
        return
    chosen = [i for i in INSTANCES if i[0] in QUICK] if args.quick else INSTANCES
    solve(INSTANCES[0][1](), 100, method="lp-rounding")   # compile the kernels before timing
    raw = []
    for label, make, budget in chosen:
        g = make()
        sf, bound, cuts = _strengthen(build_milp(g, budget, "strong"), "highs", None, None)
        base = None
        for polish in (None,) + POLISH:
            x0, ws_cost, ws_s = None, None, 0.0
            if polish is not None:
                t0 = time.perf_counter()
                res = solve(g, budget, method="lp-rounding", polish_evals=polish)
                ws_s = time.perf_counter() - t0
                ws_cost = simulate(g, res.schedule, timeline=False).total_cost
                x0 = sf.encode(res.schedule)
            t0 = time.perf_counter()
            out = solve_arrays("highs", sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, sf.integrality,
                               time_limit_s=args.limit, mip_rel_gap=1e-4, start=x0,
                               options=dict(_HIGHS_STRONG_DEFAULTS))
            dt = time.perf_counter() - t0
            base = dt if base is None else base
            obj = None if out.objective is None else out.objective + sf.objective_offset
            name = "none" if polish is None else f"lp-rounding, {polish} evaluations"
            raw.append(dict(instance=label, budget=budget, warm_start=name, polish_evals=polish,
                            warm_start_cost=ws_cost, warm_start_s=ws_s, status=out.status.value, objective=obj,
                            milp_s=dt, vs_none=dt / base, nodes=out.stats.get("nodes"), root_lp_with_cuts=bound,
                            cut_rows=cuts["rows"]))
            print(label, name, ws_cost, f"{ws_s:.2f}s", out.status.value, obj, f"{dt:.1f}s", flush=True)
    meta = {"limit": args.limit, "command": command_line(), "machine": machine_line()}
    if args.quick:   # a smoke run: the recorded results and the README section stay the full run's
        save_json("ilp_warm_start_quick", {"meta": meta, "rows": raw}, folder=EXPERIMENTS_RESULTS)
        print(render(raw, meta))
        return
    save_json("ilp_warm_start", {"meta": meta, "rows": raw}, folder=EXPERIMENTS_RESULTS)
    write_section("ilp-warm-start", render(raw, meta), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
