"""Approximation ratios over a budget sweep (Checkmate Table 2) and the cost-vs-budget curves (Figure 5).

For each zoo model, :func:`remat_core.sweep` solves the training graph at
evenly spaced budgets between the smallest budget any schedule could need and
checkpoint-all's peak, with every registered method, in parallel (local
process pool; results are JSON lines in ``benchmarks/results/`` so an
interrupted run resumes). The ratio of a method is the geometric mean over
budgets of its cost divided by the optimal cost (the MILP's, when proven;
otherwise the MILP's proven lower bound, which makes the ratio an upper
bound and is flagged). Budgets where a method finds no schedule but the MILP
does are counted separately.

Usage::

    .venv/bin/python benchmarks/bench_approx_ratio.py           # full
    .venv/bin/python benchmarks/bench_approx_ratio.py --quick   # 2 models, 5 budgets, short limits
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _report  # noqa: E402

from remat_core import available_methods, sweep  # noqa: E402
from remat_core.solvers import get_method  # noqa: E402
from remat_core.sweep import SweepResult, budget_grid  # noqa: E402
from remat_core.zoo import zoo_graph  # noqa: E402

MODELS = ["vgg16", "vgg19", "mobilenet", "unet", "resnet50"]
QUICK_MODELS = ["vgg16", "unet"]
BATCH = 32
# What the paper reports (Table 2). Its exact per-model values could not be found here: the stored pages,
# docs and code were searched and no copy of the paper's table turned up; parasj/checkmate holds the script
# that built it, experiments/table_approx_speedup_ratios.py, but not its data. Only the range is quoted.
PAPER_TABLE2 = {"lp-rounding": "1.00-1.06 (range only)"}
PAPER_SETUP = {  # from parasj/checkmate experiments/table_approx_speedup_ratios.py
    "cost model": "profiled V100 (p32xlarge), not FLOPs",
    "batch": {"vgg16": 256, "vgg19": 256, "resnet50": 256, "mobilenet": 512, "unet": 32},
    "statistic": "geometric mean and max over feasible budgets of cost / MILP cost",
}
PAPER_NOTE = (
    "Paper (Checkmate Table 2): **the exact per-model values are not available here** (the stored pages, "
    "docs and code were searched; parasj/checkmate has the script that built the table, "
    "`experiments/table_approx_speedup_ratios.py`, but not its data), so only the range given in the "
    "project's issue is quoted (not checked against the paper here): two-phase LP rounding within "
    "1.00x-1.06x of the MILP's cost over the budget sweeps, the generalized baselines (AP / linearized "
    "sqrt(n) and greedy, Griewank log n) higher. The paper's sweeps differ from ours: the profiled V100 cost "
    "model (not FLOPs), batch 256 for VGG16, VGG19 and ResNet50, 512 for MobileNet and 32 for U-Net (ours: "
    "batch 32 throughout), geometric mean and max of cost / MILP cost over the feasible budgets (ours: the "
    "same statistic; where the MILP stops at its time limit, the ratio is taken against its proven lower "
    "bound and flagged \"vs bound\", an upper bound on the true ratio).")


def _options(method: str, time_limit_s: float, threads: int = 1) -> dict:
    params = inspect.signature(get_method(method)).parameters
    out = {"time_limit_s": time_limit_s} if "time_limit_s" in params else {}
    if "threads" in params:
        out["threads"] = threads
    return out


def _best_found(res: SweepResult) -> SweepResult:
    """Without an MILP: add a pseudo-method whose cost is the cheapest found at each budget."""
    best = {}
    for r in res.rows:
        if r["objective"] is not None:
            k = r["budget_bytes"]
            if k not in best or r["objective"] < best[k]["objective"]:
                best[k] = dict(r, method="best-found", status="optimal")
    return SweepResult(rows=res.rows + list(best.values()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 models, 5 budgets, 20 s MILP limit")
    p.add_argument("--models", default=None, help="comma-separated zoo models")
    p.add_argument("--num", type=int, default=None, help="budgets per model (default 8, quick 5)")
    p.add_argument("--time-limit", type=float, default=None, help="time_limit_s per solve (default 90, quick 20)")
    p.add_argument("--workers", type=int, default=2, help="parallel solves (default 2)")
    p.add_argument("--threads", type=int, default=1, help="MILP solver threads per solve (default 1)")
    p.add_argument("--fresh", action="store_true", help="ignore earlier results instead of resuming")
    args = p.parse_args(argv)
    models = args.models.split(",") if args.models else (QUICK_MODELS if args.quick else MODELS)
    num = args.num or (5 if args.quick else 8)
    limit = args.time_limit or (20.0 if args.quick else 90.0)
    methods = [m for m in available_methods() if m not in ("checkpoint-all", "dtr")] or ["checkpoint-all"]
    reference = "ilp" if "ilp" in methods else "best-found"
    os.makedirs(_report.RESULTS, exist_ok=True)
    ratio_rows, raw, plots = [], {}, []
    for model in models:
        g = zoo_graph(model, batch_size=BATCH)
        # from 5% above the hard lower bound (where few schedules exist) to checkpoint-all's peak
        lo = g.min_budget_lower_bound_bytes()
        grid = budget_grid(g, num=num + 1, low=lo)[1:]
        out = os.path.join(_report.RESULTS, f"approx_ratio_{model}_b{BATCH}.jsonl")
        if args.fresh and os.path.exists(out):
            os.remove(out)
        t0 = time.perf_counter()
        res = sweep(g, grid, methods, out=out, n_workers=args.workers,
                    method_options={m: o for m in methods if (o := _options(m, limit, args.threads))})
        dt = time.perf_counter() - t0
        print(f"{model}: {len(res)} rows ({res.computed} computed, {res.reused} reused) in {dt:.1f} s", flush=True)
        scored = _best_found(res) if reference == "best-found" else res
        try:
            ratios = scored.approximation_ratios(reference=reference)
        except ValueError as exc:
            print(f"{model}: no ratios ({exc})")
            continue
        raw[model] = {"ratios": ratios, "rows": res.rows, "budgets": grid}
        for m in methods:
            s = ratios.get(m)
            mrows = [r for r in res.rows if r["method"] == m]
            if mrows and all(r["status"] == "error" for r in mrows):
                ratio_rows.append([model, m, "not applicable", "", "", mrows[0]["message"].split(": ")[1][:60], ""])
                continue
            if s is None:
                continue
            gm = f"{s['geomean']:.3f}" + ("" if s["exact"] else " (vs bound)") if s["geomean"] else "-"
            mx = f"{s['max']:.3f}" if s["max"] else "-"
            ratio_rows.append([model, m, gm, mx, s["count"], s["infeasible"], PAPER_TABLE2.get(m, "")])
        try:
            from remat_core.plot import plot_tradeoff_curves

            path = os.path.join(_report.RESULTS, f"tradeoff_{model}.png")
            plot_tradeoff_curves(res, path, title=f"{model}, batch {BATCH}: cost vs budget")
            plots.append(os.path.relpath(path, HERE))
        except (ImportError, ValueError) as exc:
            print(f"{model}: no plot ({exc})")
    md = [
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}  ",
        f"Graphs: zoo models at batch {BATCH} (FLOP costs); {num} budgets per model evenly spaced from the "
        "hard lower bound to checkpoint-all's peak (the lowest point dropped); per-solve time limit "
        f"{limit:g} s, MILP threads {args.threads}; reference: `{reference}`"
        + (" (no MILP registered: ratios are relative to the cheapest schedule any method found)"
           if reference == "best-found" else "") + ".",
        "",
        PAPER_NOTE,
        "",
        _report.table(["model", "method", "geo-mean cost / optimal", "max", "budgets scored",
                       "no schedule where reference has one", "paper (Table 2)"], ratio_rows),
        "",
        "Cost-vs-budget curves (Figure 5): " + ", ".join(f"`{p}`" for p in plots),
    ]
    _report.write_section("approx-ratio", "\n".join(md))
    _report.save_json("approx_ratio", {"paper": {"table2": PAPER_TABLE2, "setup": PAPER_SETUP}, "models": raw})
    return 0


if __name__ == "__main__":
    sys.exit(main())
