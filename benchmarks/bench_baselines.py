"""Every registered method on linear graphs and the eight real DTR graphs.

Cost overhead (schedule cost / checkpoint-all cost) at 0.8x, 0.6x and 0.4x of
checkpoint-all's peak memory, and solve time. Writes the README section
"baselines" and ``results/baselines.json``.

    .venv/bin/python benchmarks/bench_baselines.py [--quick] [--ilp-time-limit 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import DTR_GRAPHS, command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import GraphValidationError, available_methods, load_dtr_dag, solve  # noqa: E402
from remat_core.simulate import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.zoo import linear_graph  # noqa: E402

FRACTIONS = (0.8, 0.6, 0.4)
MILP_METHODS = ("ilp", "lp-rounding")
#: Methods given ``--ilp-time-limit``: the exact solver only. lp-rounding runs to completion (it is the
#: polynomial-time method; its time is reported); with a limit it now stops when its first LP does not finish.
TIME_LIMITED = ("ilp",)


def run_one(g, method, budget, ilp_time_limit):
    opts = {"time_limit_s": ilp_time_limit} if method in TIME_LIMITED else {}
    t = time.perf_counter()
    try:
        try:
            res = solve(g, budget, method=method, **opts)
        except TypeError:
            res = solve(g, budget, method=method)
    except GraphValidationError:
        return {"status": "n/a", "time_s": time.perf_counter() - t}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"status": f"error: {type(exc).__name__}: {exc}"[:120], "time_s": time.perf_counter() - t}
    return {"status": res.status.value, "objective": res.objective, "peak": res.peak_memory_bytes,
            "time_s": time.perf_counter() - t, "stats": res.stats}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="linear graphs and the two smallest real graphs only")
    ap.add_argument("--ilp-time-limit", type=float, default=60.0, help="seconds per ilp solve (lp-rounding runs without a limit)")
    ap.add_argument("--max-milp-nodes", type=int, default=300, help="skip ilp/lp-rounding on larger graphs")
    args = ap.parse_args()

    graphs = [(f"linear-{n}", linear_graph(n)) for n in (8, 16, 32)]
    names = DTR_GRAPHS[:2] if args.quick else DTR_GRAPHS
    for name in names:
        path = dtr_graph_path(name)
        if os.path.exists(path):
            graphs.append((name, load_dtr_dag(path)))
        else:
            print(f"missing {path}; skipped", file=sys.stderr)
    methods = available_methods()
    rows, raw = [], []
    for gname, g in graphs:
        base_peak = checkpoint_all_peak_bytes(g)
        base_cost = float(g.cost.sum())
        for method in methods:
            cells, total_t, rec = [], 0.0, {"graph": gname, "nodes": g.n, "method": method, "budgets": {}}
            if method in MILP_METHODS and g.n > args.max_milp_nodes:
                rows.append([gname, g.n, method] + ["skipped (> %d nodes)" % args.max_milp_nodes] * 3 + ["-"])
                continue
            for frac in FRACTIONS:
                budget = max(1, int(base_peak * frac))
                r = run_one(g, method, budget, args.ilp_time_limit)
                total_t += r["time_s"]
                rec["budgets"][str(frac)] = r
                if r["status"] in ("optimal", "feasible"):
                    cells.append(f"{r['objective'] / base_cost:.3f}" + ("" if r["status"] == "optimal" else ""))
                else:
                    cells.append(r["status"].split(":")[0])
                print(f"{gname:18s} {method:18s} {frac}: {cells[-1]} ({r['time_s']:.2f}s)", flush=True)
            rows.append([gname, g.n, method] + cells + [f"{total_t:.2f}"])
            raw.append(rec)
    save_json("baselines", raw)
    md = [
        "Cost overhead = simulated cost / checkpoint-all cost (1.000 = no recomputation) at a budget of "
        "0.8x, 0.6x and 0.4x of checkpoint-all's simulated peak; `infeasible` = the method's family has no "
        "schedule that fits; `n/a` = chain-only method on a graph that is not a chain training graph "
        "(the DTR recordings carry no backward flags: `load_dtr_dag` infers the forward/backward split from "
        "the loss it locates, see docs/baselines.rst). Time = total seconds for the three budgets "
        "(the baseline families are simulated once per graph and cached, so the first budget pays most). "
        f"`ilp` gets {args.ilp_time_limit:g} s per budget (a call can overrun by one HiGHS presolve, which is "
        "not interruptible); `lp-rounding` runs without a limit.",
        "",
        f"Command: `{command_line()}`  ",
        f"Machine: {machine_line()}",
        "",
        table(["graph", "nodes", "method", "0.8x", "0.6x", "0.4x", "time (s)"], rows),
    ]
    write_section("baselines", "\n".join(md))


if __name__ == "__main__":
    main()
