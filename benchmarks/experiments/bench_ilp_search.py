"""Where ``search="branch-and-cut"`` beats HiGHS's MILP, where it does not, and the portfolio of both: one run.

On chains of several lengths and budgets (equal layer sizes and costs) and on
seeded random training graphs (unequal sizes and costs) at budgets a fixed
share of the way from the smallest one any node needs to checkpoint-all's
peak, ``solve(..., method="ilp")`` runs with ``search="milp"``, with
``search="branch-and-cut"`` and with the default ``search="auto"`` (on two
cores the portfolio: both at once, the first proof wins), one after the other
in this process, the order alternating between instances. Both include the same warm start and
root separation rounds; when the LP bound proves the warm start, neither
searches (*no search*). Paper-formulation times are in ``bench_ilp.py``.

    python benchmarks/experiments/bench_ilp_search.py            # all instances, 300 s limit per solve
    python benchmarks/experiments/bench_ilp_search.py --quick    # three small ones; prints, leaves the README alone
    python benchmarks/experiments/bench_ilp_search.py --report-only
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

from remat_core import checkpoint_all_peak_bytes, solve  # noqa: E402
from remat_core.zoo import linear_graph, random_training_graph  # noqa: E402


def _share(graph, share):
    lo, hi = graph.min_budget_lower_bound_bytes(), checkpoint_all_peak_bytes(graph)
    return int(lo + share * (hi - lo))


# (label, graph factory, budget or share of [smallest, checkpoint-all peak])
INSTANCES = [
    ("linear(10)", lambda: linear_graph(10), 4),
    ("linear(12)", lambda: linear_graph(12), 5),
    ("linear(14)", lambda: linear_graph(14), 5),
    ("linear(16)", lambda: linear_graph(16), 5),
    ("linear(16)", lambda: linear_graph(16), 7),
    ("linear(20)", lambda: linear_graph(20), 6),
    ("random(8 layers, seed 4)", lambda: random_training_graph(8, 2, seed=4), 0.2),
    ("random(8 layers, seed 4)", lambda: random_training_graph(8, 2, seed=4), 0.4),
    ("random(12 layers, seed 5)", lambda: random_training_graph(12, 2, seed=5), 0.2),
    ("random(12 layers, seed 5)", lambda: random_training_graph(12, 2, seed=5), 0.4),
    ("random(14 layers, seed 6)", lambda: random_training_graph(14, 2, seed=6), 0.3),
]
QUICK = 3
SEARCHES = ("milp", "branch-and-cut", "auto")


def run(graph, budget, limit, search):
    t0 = time.perf_counter()
    res = solve(graph, budget, method="ilp", time_limit_s=limit, search=search)
    return {"status": res.status.value, "objective": res.objective, "lower_bound": res.lower_bound,
            "time_s": time.perf_counter() - t0, "nodes": res.stats.get("nodes"),
            "no_search": bool(res.stats.get("milp_skipped")), "search": res.stats.get("search"),
            "winner": (res.stats.get("portfolio") or {}).get("winner")}


def cell(r, limit):
    if r["status"] != "optimal":
        gap = "-" if r["objective"] is None or r["lower_bound"] is None else \
            f"{(r['objective'] - r['lower_bound']) / r['objective']:.1%}"
        return f"> {limit:.0f} ({r['status']}, gap {gap})"
    return f"{r['time_s']:.1f}" + (" (no search)" if r["no_search"] else f" ({r['nodes']})")


def render(raw, meta) -> str:
    rows, faster, slower, proved_by_default = [], [], [], []
    for r in raw:
        m, b = r["milp"], r["branch-and-cut"]
        ratio = "-"
        where = f"{r['instance']} at {r['budget']}"
        if m["status"] == b["status"] == "optimal" and not (m["no_search"] or b["no_search"]):
            q = m["time_s"] / b["time_s"]
            ratio = f"{q:.2f}"
            (faster if q > 1 else slower).append(f"{where} ({q:.2f})")
        elif m["status"] == "optimal" and b["status"] != "optimal":
            ratio = f"< {m['time_s'] / b['time_s']:.2f}"
            slower.append(f"{where} (not proven within the limit; the MILP took {m['time_s']:.1f} s)")
        elif b["status"] == "optimal" and m["status"] != "optimal":
            ratio = f"> {m['time_s'] / b['time_s']:.2f}"
            faster.append(f"{where} (the MILP did not prove it within the limit; {b['time_s']:.1f} s)")
        a = r.get("auto")
        auto_cell, auto_ratio = "-", "-"
        if a is not None:
            auto_cell = cell(a, meta["limit"]) + (f", {a['winner']} won" if a.get("winner") else "")
            if m["status"] == a["status"] == "optimal":
                auto_ratio = f"{m['time_s'] / a['time_s']:.2f}"
            elif a["status"] == "optimal":
                auto_ratio = f"> {m['time_s'] / a['time_s']:.2f}"
                proved_by_default.append(f"{where} ({a['time_s']:.1f} s)")
        rows.append([r["instance"], r["nodes"], r["budget"], "-" if r["optimum"] is None else f"{r['optimum']:g}",
                     cell(m, meta["limit"]), cell(b, meta["limit"]), ratio, auto_cell, auto_ratio])
    return "\n".join([
        "## ilp: HiGHS's MILP vs our branch-and-cut search (issue 3)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}  ",
        f"`solve(..., method=\"ilp\")` with `search=\"milp\"` (HiGHS alone), `search=\"branch-and-cut\"` "
        "(ours alone) and, where a column *default* is shown, `search=\"auto\"` (the default: on this 2-core "
        "machine the portfolio, both searches at once in two processes, the first proof winning; which one won "
        f"after the nodes), limit {meta['limit']:.0f} s each, one after the other in one process (order "
        "alternating). Seconds "
        "include the warm start and root rounds; in brackets the B&B nodes (*no search*: the LP bound proved "
        "the warm start). Random graphs: budget a fixed share of the way from the smallest budget any node needs "
        "to checkpoint-all's peak. *MILP / B&C* and *MILP / default*: time ratios, above 1 where the "
        "second is faster.",
        "",
        table(["instance", "nodes", "budget", "optimum", "milp s (nodes)", "branch-and-cut s (nodes)",
               "MILP / B&C", "default s (nodes)", "MILP / default"], rows),
        "",
        "Branch-and-cut faster on: " + (", ".join(faster) or "none") + ". Slower on: "
        + (", ".join(slower) or "none") + ". Neither proved the others within the limit, or the LP bound "
        "proved the warm start for both."
        + (" The default proved, where HiGHS alone did not: " + ", ".join(proved_by_default) + "."
           if proved_by_default else ""),
    ])


def main() -> None:
    args = limit_arguments(__doc__, f"the first {QUICK} instances; the README stays", 300.0,
                           "time limit per solve (s)")
    if args.report_only:
        rewrite_section_from_results("ilp_search", "ilp-search", render,
                                     folder=EXPERIMENTS_RESULTS, readme=EXPERIMENTS_README)
        return
    solve(linear_graph(6), 4, method="ilp")   # compile the kernels before timing
    meta = {"limit": args.limit, "command": command_line(), "machine": machine_line()}
    raw = []
    chosen = INSTANCES[:QUICK] if args.quick else INSTANCES
    for k, (label, make, spec) in enumerate(chosen):
        g = make()
        budget = spec if isinstance(spec, int) else _share(g, spec)
        out = {}
        for search in (SEARCHES if k % 2 == 0 else SEARCHES[::-1]):
            out[search] = run(g, budget, args.limit, search)
        proved = [r["objective"] for r in out.values() if r["status"] == "optimal"]
        assert max(proved, default=0) - min(proved, default=0) < 1e-6 * max(1.0, max(proved, default=1)), out
        raw.append(dict(instance=label, nodes=g.n, budget=budget, optimum=proved[0] if proved else None, **out))
        print(label, budget, {s: (r["status"], round(r["time_s"], 1), r["nodes"]) for s, r in out.items()},
              flush=True)
        if not args.quick:   # after every instance, so that an interrupted run leaves what it measured
            save_json("ilp_search", {"meta": meta, "rows": raw}, folder=EXPERIMENTS_RESULTS)
            write_section("ilp-search", render(raw, meta), readme=EXPERIMENTS_README)
    if args.quick:
        save_json("ilp_search_quick", {"meta": meta, "rows": raw}, folder=EXPERIMENTS_RESULTS)
        print(render(raw, meta))


if __name__ == "__main__":
    main()
