"""LP rounding vs the MILP optimum: cost ratio per budget, geometric mean, and times.

For each graph, budgets are spread between the smallest budget any schedule
could need and checkpoint-all's peak (plus the issue's budget for the linear
graphs). At each budget: the ``ilp`` method (strong formulation, warm start,
time limit), ``lp-rounding`` as shipped (allowance search + local search), and
the paper's variant (allowance fixed at 10%, two-phase rounding only). The
ratio is cost / MILP optimum where the MILP proved optimality; where it did
not, cost / the MILP's proven lower bound, an upper bound on the true ratio
(marked "bound" and kept out of the geometric mean).

    python benchmarks/bench_lp_rounding.py            # linear, random and the two smallest real graphs
    python benchmarks/bench_lp_rounding.py --quick    # two small graphs, three budgets
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _report import command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import SolveStatus, checkpoint_all_peak_bytes, load_dtr_dag, solve  # noqa: E402
from remat_core.zoo import linear_graph, random_training_graph  # noqa: E402

# (label, factory, extra budgets, number of budgets, real graph?)
GRAPHS = [
    ("linear(8)", lambda: linear_graph(8), [4], 5, False),
    ("linear(16)", lambda: linear_graph(16), [6], 5, False),
    ("linear(24)", lambda: linear_graph(24), [8], 5, False),
    ("random(5 layers, seed 1)", lambda: random_training_graph(5, 2, seed=1), [], 5, False),
    ("random(10 layers, seed 2)", lambda: random_training_graph(10, 2, seed=2), [], 5, False),
    ("random(16 layers, seed 3)", lambda: random_training_graph(16, 2, seed=3), [], 5, False),
    ("U-Net_6", lambda: load_dtr_dag(dtr_graph_path("U-Net_6")), [], 2, True),
    ("ResNet-32_56", lambda: load_dtr_dag(dtr_graph_path("ResNet-32_56")), [], 2, True),
]
QUICK = {"linear(8)", "random(5 layers, seed 1)"}


def budgets_for(graph, k, extra):
    lo, hi = graph.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(graph)
    grid = np.linspace(lo, hi, k + 2)[1:-1]
    return sorted({int(round(b)) for b in grid} | set(extra))


def geo_mean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--limit", type=float, default=None, help="MILP time limit per budget (s)")
    ap.add_argument("--real-limit", type=float, default=300.0, help="MILP time limit on the real graphs (s)")
    ap.add_argument("--from-log", default=None, help="rewrite the README section from a run's printed rows")
    args = ap.parse_args()
    limit = args.limit or (60.0 if args.quick else 600.0)
    if args.from_log:
        from_log(args.from_log, limit, args.real_limit)
        return
    summary, per_budget, raw = [], [], []
    for label, make, extra, k, real in GRAPHS:
        if args.quick and label not in QUICK:
            continue
        g = make()
        budgets = budgets_for(g, 3 if args.quick else k, extra)
        ratios, ratios_paper, bound_ratios = [], [], []
        t_milp = t_round = t_paper = 0.0
        for b in budgets:
            t0 = time.perf_counter()
            milp = solve(g, b, method="ilp", time_limit_s=args.real_limit if real else limit)
            dt_milp = time.perf_counter() - t0
            if milp.status is SolveStatus.INFEASIBLE:
                continue
            t0 = time.perf_counter()
            rnd = solve(g, b, method="lp-rounding")
            dt_round = time.perf_counter() - t0
            t0 = time.perf_counter()
            paper = solve(g, b, method="lp-rounding", allowances=[0.1], polish_evals=0)
            dt_paper = time.perf_counter() - t0
            t_milp, t_round, t_paper = t_milp + dt_milp, t_round + dt_round, t_paper + dt_paper
            proven = milp.status is SolveStatus.OPTIMAL
            ref = milp.objective if proven else milp.lower_bound
            ratio = rnd.objective / ref if rnd.success and ref else None
            ratio_p = paper.objective / ref if paper.success and ref else None
            if proven and ratio is not None:
                ratios.append(ratio)
                if ratio_p is not None:
                    ratios_paper.append(ratio_p)
            elif ratio is not None:
                bound_ratios.append(ratio)
            row = dict(graph=label, budget=b, milp_status=milp.status.value, milp_cost=milp.objective,
                       milp_bound=milp.lower_bound, milp_s=dt_milp, rounding_status=rnd.status.value,
                       rounding_cost=rnd.objective, rounding_s=dt_round, rounding_lp_bound=rnd.lower_bound,
                       rounding_stats={k: v for k, v in rnd.stats.items() if k != "lp_objective"},
                       paper_cost=paper.objective, paper_s=dt_paper, ratio=ratio, paper_ratio=ratio_p,
                       ratio_is_bound=not proven)
            raw.append(row)
            per_budget.append([label, b, milp.status.value, f"{ref:.6g}" if ref is not None else "-",
                               f"{dt_milp:.1f}", f"{rnd.objective:.6g}" if rnd.success else rnd.status.value,
                               f"{dt_round:.1f}", (f"{ratio:.3f}" + ("" if proven else " (bound)")) if ratio else "-",
                               f"{ratio_p:.3f}" if ratio_p else (paper.status.value if not paper.success else "-")])
            print(per_budget[-1], flush=True)
        gm = geo_mean(ratios)
        summary.append([label, g.n, len(ratios) + len(bound_ratios),
                        f"{gm:.3f}" if gm else "-", f"{max(ratios):.3f}" if ratios else "-",
                        f"{geo_mean(ratios_paper):.3f}" if ratios_paper else "-",
                        f"<= {geo_mean(bound_ratios):.3f} ({len(bound_ratios)} budgets)" if bound_ratios else "",
                        f"{t_milp:.1f}", f"{t_round:.1f}", f"{t_milp / t_round:.1f}x" if t_round else "-"])
        print(summary[-1], flush=True)
    save_json("lp_rounding" + ("_quick" if args.quick else ""), raw)
    write_section("lp-rounding", render(summary, per_budget, limit, args.real_limit, command_line(), ""))


def render(summary, per_budget, limit, real_limit, command, note) -> str:
    md = [
        "## lp-rounding: cost / MILP optimum and time (issue 3)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine_line()}  ",
        f"MILP: the `ilp` method as shipped (strong formulation, warm start, HiGHS), limit {limit:.0f} s per "
        f"budget ({real_limit:.0f} s on the real graphs). LP rounding: `lp-rounding` as shipped (allowance "
        "search, threshold sweep + 32 Bernoulli samples, local search); *paper-style*: allowance fixed at 10%, "
        "two-phase rounding only. Ratios are geometric means over the budgets where the MILP proved optimality; "
        "where it did not, the ratio to the MILP's proven lower bound is an upper bound on the true ratio and is "
        "listed apart. Times are totals over the budgets.",
        "",
        table(["graph", "nodes", "budgets", "geo-mean cost / optimum", "max", "paper-style geo-mean",
               "vs proven bound (not optimal)", "MILP s", "LP rounding s", "LP rounding faster by"], summary),
        "",
        "Checkmate reports 1.00x to 1.06x for two-phase rounding (Table 2); the target here is at most 1.03x.",
    ]
    md += ["", speed_summary(summary, per_budget)]
    if note:
        md += ["", note]
    md += [
        "",
        "<details><summary>Per budget</summary>",
        "",
        table(["graph", "budget", "MILP status", "optimum / bound", "MILP s", "LP rounding cost", "LP rounding s",
               "ratio", "paper-style ratio"], per_budget),
        "",
        "</details>",
    ]
    return "\n".join(md)


def speed_summary(summary, per_budget) -> str:
    """Which graphs lp-rounding solved faster than the MILP, read from the summary rows' total seconds."""
    far, slower = [], []
    for row in summary:
        t_milp, t_round = float(row[7]), float(row[8])
        if t_round and t_milp / t_round >= 10:
            far.append(f"{row[0]} ({t_milp / t_round:.1f}x)")
        elif t_milp < t_round:
            slower.append(f"{row[0]} (MILP {t_milp:.1f} s, LP rounding {t_round:.1f} s)")
    text = ("LP rounding is 10x or more faster than the MILP on: " + (", ".join(far) if far else "none") + ".")
    if slower:
        labels = {row[0] for row in summary if float(row[7]) < float(row[8])}
        longest = max(float(r[4]) for r in per_budget if r[0] in labels)
        text += (" It is slower than the MILP on: " + ", ".join(slower) + ". There the shipped `ilp` proves "
                 f"each budget in {longest:.1f} s or less: it rounds its own strengthened root LP before any "
                 "search and its bound often proves that schedule, while `lp-rounding` searches the allowance "
                 "over several LPs.")
    return text


def from_log(path: str, limit: float, real_limit: float) -> None:
    """Rewrite the section from the rows a run printed (for a run that died before its end)."""
    import ast

    summary, per_budget = [], []
    for line in open(path):
        if not line.startswith("["):
            continue
        row = ast.literal_eval(line.strip())
        (summary if len(row) == 10 else per_budget).append(row)
    done = {r[0] for r in summary}
    missing = [label for label, *_ in GRAPHS if label not in done]
    note = (f"This table was assembled from the rows printed by the full run (`--from-log`): the run was killed "
            f"before it finished, without an error message (most likely for memory while building the LP of the next graph: "
            f"the strong formulation's cumulative memory rows grow as n^3). Not measured: "
            f"{', '.join(missing)}.") if missing else ""
    write_section("lp-rounding", render(summary, [r for r in per_budget if r[0] in done], limit, real_limit,
                                        "python benchmarks/bench_lp_rounding.py", note))


if __name__ == "__main__":
    main()
