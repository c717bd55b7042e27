"""How strong the cost lower bound of ``remat_core.bounds`` is, and what it costs, from 17 to 5,239 nodes.

Two parts, budgets 0.9 / 0.7 / 0.5 / 0.3 of activation memory (``remat_core.units.resolve_budget``):

* small graphs where ``ilp`` proves the optimum (within ``--limit`` seconds): each bound over the optimum:
  the sum of the node costs, the best single row (fractional knapsack), the cut LP of ``remat_core.bounds``
  without and with its closure rows (``closure=False`` / the default), and the Checkmate LP relaxation (the
  lower bound of ``lp-rounding``, the full LP over the MILP's n^2 variables);
* the eight shared DTR graphs: the bound over the sum of the costs (without and with the closure rows), its
  time and the peak RSS of the process that computes it (a child per graph: interpreter, graph and the bounds;
  its VmHWM), and the cheapest schedule known (``dtr``; at 0.5 also ``auto`` with 30 s) over the bound.

Writes ``results/bounds.json`` and the README section "bounds".

    nice -n 5 prlimit --as=6000000000 .venv/bin/python benchmarks/bench_bounds.py
    .venv/bin/python benchmarks/bench_bounds.py --shared-only   # the shared graphs again; the small graphs'
                                                                 # optima kept, their bounds computed again
    .venv/bin/python benchmarks/bench_bounds.py --report-only
    .venv/bin/python benchmarks/bench_bounds.py --tight --limit 30   # the bound near the smallest budget
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import (DTR_GRAPHS, RESULTS, command_line, dtr_graph_path, limit_arguments, machine_line,  # noqa: E402
                     rewrite_section_from_results, save_json, table, write_section)

FRACTIONS = (0.9, 0.7, 0.5, 0.3)
SMALL = ("linear-8", "linear-16", "random-8", "random-12", "keras_vgg16", "keras_vgg19", "keras_segnet", "keras_fcn8",
         "keras_unet", "torch_vgg16_b2")
AUTO_LIMIT_S = 30.0


def small_graph(name: str):
    from remat_core.zoo import linear_graph, random_training_graph, zoo_graph

    if name.startswith("linear-"):
        return linear_graph(int(name.split("-")[1]))
    if name.startswith("random-"):
        layers = int(name.split("-")[1])
        return random_training_graph(layers, 3, seed=layers)
    return zoo_graph(name)


def small_rows(limit: float) -> list[dict]:
    from remat_core import SolveStatus, solve
    from remat_core.units import resolve_budget

    rows = []
    for name in SMALL:
        g = small_graph(name)
        for f in FRACTIONS:
            b = resolve_budget(g, f)
            t0 = time.perf_counter()
            ilp = solve(g, b, method="ilp", time_limit_s=limit)
            ilp_s = time.perf_counter() - t0
            row = dict(graph=name, n=g.n, fraction=f, ilp_status=ilp.status.value, ilp_s=ilp_s,
                       optimum=ilp.objective if ilp.status is SolveStatus.OPTIMAL else None)
            if row["optimum"] is not None:
                row.update(small_bounds(g, b))
                t0 = time.perf_counter()
                lp = solve(g, b, method="lp-rounding", time_limit_s=limit)
                row.update(checkmate_lp=lp.lower_bound, checkmate_lp_s=time.perf_counter() - t0)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def small_bounds(g, b) -> dict:
    """The bound without and with the closure rows, for a small graph's row."""
    from remat_core.bounds import cost_lower_bound

    cuts = cost_lower_bound(g, b, closure=False)
    bound = cost_lower_bound(g, b)
    return dict(sum_cost=bound.sum_cost, knapsack=bound.knapsack, cut_lp=cuts.value, closure_lp=bound.value,
                cut_lp_s=bound.time_s, cut_method=bound.method)


def child(path: str, out_path: str) -> None:
    """The four bounds of one shared graph, in this process (its peak RSS is read by the parent)."""
    from remat_core import load_dtr_dag
    from remat_core.bounds import cost_lower_bound
    from remat_core.units import resolve_budget

    g = load_dtr_dag(path)
    out = {"n": g.n, "bounds": {}}
    for f in FRACTIONS:
        cuts = cost_lower_bound(g, resolve_budget(g, f), closure=False)
        r = cost_lower_bound(g, resolve_budget(g, f))
        out["bounds"][str(f)] = dict(value=r.value, sum_cost=r.sum_cost, knapsack=r.knapsack, method=r.method,
                                     rows=r.rows, cuts=r.cuts, converged=r.converged, time_s=r.time_s,
                                     cut_value=cuts.value, cut_time_s=cuts.time_s)
    with open("/proc/self/status") as fh:   # this process's own peak (ru_maxrss would include the parent's at fork)
        out["vm_hwm_mib"] = next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    with open(out_path, "w") as fh:
        json.dump(out, fh)


def large_rows() -> list[dict]:
    from remat_core import load_dtr_dag, solve
    from remat_core.units import resolve_budget

    rows = []
    for name in DTR_GRAPHS:
        path = dtr_graph_path(name)
        if not os.path.exists(path):
            continue
        with tempfile.TemporaryDirectory(prefix="bench-bounds-") as d:
            op = os.path.join(d, "out.json")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", path, op])
            _, status, _ = os.wait4(proc.pid, 0)
            data = json.load(open(op)) if os.path.exists(op) else None
        if data is None:
            rows.append(dict(graph=name, status=f"crashed ({os.waitstatus_to_exitcode(status)})"))
            continue
        g = load_dtr_dag(path)
        for f in FRACTIONS:
            bd = data["bounds"][str(f)]
            b = resolve_budget(g, f)
            dtr = solve(g, b, method="dtr")
            row = dict(graph=name, n=g.n, fraction=f, peak_rss_mib=data["vm_hwm_mib"], **bd,
                       dtr=dtr.objective)
            if f == 0.5:
                t0 = time.perf_counter()
                auto = solve(g, b, method="auto", time_limit_s=AUTO_LIMIT_S)
                row.update(auto=auto.objective, auto_s=time.perf_counter() - t0, auto_chosen=auto.stats.get("chosen"),
                           auto_bound=auto.lower_bound)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _x(value, base, digits=3) -> str:
    return "-" if value is None or base is None else f"{value / base:.{digits}f}"


def render(rows: list[dict], meta: dict) -> str:
    small = [r for r in rows if r.get("part") == "small"]
    large = [r for r in rows if r.get("part") == "large"]
    out = ["## bounds: a lower bound on schedule cost at every size (issue 26)", "",
           f"`{meta['command']}` on {meta['machine']}; a shared machine, loaded by other work: times are "
           "indicative." + (f" The small graphs' optima and Checkmate LP values come from "
                            f"`{meta['small_rows_from']}`; their other bounds are this run's."
                            if meta.get("small_rows_from") else ""), "",
           "**Small graphs, each bound over the optimum that `ilp` proved** (1.000 = the bound is the optimum). "
           "*sum*: the sum of the node costs; *knapsack*: the best single stage row of the relaxation; "
           "*cut LP*: `remat_core.bounds.cost_lower_bound(..., closure=False)`; *closure*: the same with its "
           "closure rows (the default; docs/large_graphs.rst); *Checkmate LP*: the LP relaxation of the MILP "
           f"(`lp-rounding`'s lower bound). Rows where `ilp` did not prove the optimum within {meta['limit']:g} s "
           "are left out.", ""]
    body = []
    for r in small:
        if r.get("optimum") is None:
            continue
        opt = r["optimum"]
        body.append([r["graph"], r["n"], r["fraction"], f"{opt:.6g}", _x(r["sum_cost"], opt), _x(r["knapsack"], opt),
                     _x(r["cut_lp"], opt), _x(r.get("closure_lp"), opt), _x(r["checkmate_lp"], opt),
                     f"{r['cut_lp_s']:.3f}", f"{r['checkmate_lp_s']:.1f}"])
    out.append(table(["graph", "nodes", "budget", "optimum", "sum", "knapsack", "cut LP", "closure",
                      "Checkmate LP", "bound s", "lp-rounding s"], body))
    for status, what in (("infeasible", "`ilp` proves that no schedule fits"),
                         (None, f"not proven within {meta['limit']:g} s")):
        left_out = [f"{r['graph']} @{r['fraction']}" for r in small if r.get("optimum") is None
                    and (r["ilp_status"] == "infeasible") == (status == "infeasible")]
        if left_out:
            out += ["", f"Left out, {what}: " + ", ".join(left_out) + "."]
    out += ["", "**The eight shared graphs**: the bound over the sum of the node costs without the closure rows "
            "(*cut LP*) and with them (*closure*, the bound the other columns divide by), the cutting-plane LP's "
            "rows (stages that must drop memory) and the rows it needed (cuts), the time of the bound with the "
            "closure rows, the peak RSS of the process computing "
            "the bounds of the graph, and the cheapest schedule known over the bound (`dtr`; at 0.5 also "
            f"`auto` with {AUTO_LIMIT_S:g} s). *infeasible*: no schedule found.", ""]
    body = []
    for r in large:
        if "value" not in r:
            body.append([r["graph"], "-", "-", r.get("status", ""), "", "", "", "", "", "", "", ""])
            continue
        best = [v for v in (r.get("dtr"), r.get("auto")) if v is not None]
        auto = "" if r["fraction"] != 0.5 else (
            f"{r['auto'] / r['value']:.3f} ({r['auto_chosen']})" if r.get("auto") is not None else "infeasible")
        body.append([r["graph"], r["n"], r["fraction"],
                     f"{r['cut_value'] / r['sum_cost']:.4f}" if "cut_value" in r else "-",
                     f"{r['value'] / r['sum_cost']:.4f}",
                     f"{r['knapsack'] / r['sum_cost']:.4f}", f"{r['cuts']}/{r['rows']}", f"{r['time_s']:.2f}",
                     f"{r['peak_rss_mib']:.0f}", _x(r.get("dtr"), r["value"]) if r.get("dtr") else "infeasible",
                     auto, _x(min(best), r["value"]) if best else "-"])
    out.append(table(["graph", "nodes", "budget", "cut LP / sum", "closure / sum", "knapsack / sum", "cuts/rows",
                      "bound s",
                      "peak RSS MiB", "dtr / bound", f"auto {AUTO_LIMIT_S:g} s / bound", "best / bound"], body))
    out += ["", "Reading the tables: see `docs/large_graphs.rst` (section *A lower bound at every size*) for what the "
            "relaxation drops. *bound s* of a graph's first budget includes importing HiGHS. Where *best / bound* "
            "stays well above 1, either the schedules or the bound are far from the optimum, and these numbers "
            "cannot tell which."]
    return "\n".join(out)


#: Issue 37's tight budgets: random training graphs (layers, seeds) and positions of the budget between the smallest
#: budget a heuristic finds (0) and the checkpoint-all peak (1).
TIGHT = {"layers": (4, 6, 8), "seeds": (0, 1, 2, 3), "positions": (0.0, 0.1, 0.25, 0.5)}


def tight_rows(limit: float) -> list[dict]:
    """At budgets near the smallest found, ``ilp``'s optimum (or its bounds when not proven in ``limit`` s) over
    the relaxation's bound: how far the bound auto reports on the large path lies below the optimum."""
    from bench_scale import smallest_found_budget

    from remat_core import SolveStatus, solve
    from remat_core.bounds import cost_lower_bound
    from remat_core.units import budget_fraction, resolve_budget
    from remat_core.zoo import random_training_graph

    rows = []
    for layers in TIGHT["layers"]:
        for seed in TIGHT["seeds"]:
            g = random_training_graph(layers, 3, seed=seed)
            base = float(g.cost.sum())
            smallest, peak = smallest_found_budget(g), resolve_budget(g, 1.0)
            for pos in TIGHT["positions"]:
                b = int(smallest + pos * (peak - smallest))
                t0 = time.perf_counter()
                r = solve(g, b, method="ilp", time_limit_s=limit)
                relax = cost_lower_bound(g, b)
                row = {"graph": f"random_training_graph({layers}, 3, seed={seed})", "n": g.n, "position": pos,
                       "fraction": round(budget_fraction(g, b), 4), "status": r.status.value,
                       "ilp": r.objective / base if r.objective is not None else None,
                       "ilp_bound": r.lower_bound / base if r.lower_bound is not None else None,
                       "relaxation": relax.value / base, "ilp_s": round(time.perf_counter() - t0, 1),
                       "load": round(os.getloadavg()[0], 1)}
                if r.status is SolveStatus.OPTIMAL:
                    row["ilp_bound"] = row["ilp"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def render_tight(rows: list[dict], meta: dict) -> str:
    """The section bounds-tight: the optimum (or the MILP's bracket) over the relaxation's bound, per position."""
    body = []
    for r in rows:
        lo = r["ilp_bound"] / r["relaxation"] if r.get("ilp_bound") else None
        hi = r["ilp"] / r["relaxation"] if r.get("ilp") else None
        body.append([r["graph"], r["n"], r["position"], r["fraction"], f"{r['relaxation']:.3f}",
                     "-" if r.get("ilp") is None else f"{r['ilp']:.3f}",
                     "-" if r.get("ilp_bound") is None else f"{r['ilp_bound']:.3f}",
                     "-" if lo is None else (f"{lo:.3f}" if abs(hi - lo) < 1e-9 else f"{lo:.3f}-{hi:.3f}"),
                     r["ilp_s"], r["load"]])
    summary = []
    for pos in sorted({r["position"] for r in rows}):
        at = [r for r in rows if r["position"] == pos and r.get("ilp_bound")]
        proven = [r["ilp"] / r["relaxation"] for r in at if r["status"] == "optimal"]
        open_lows = [r["ilp_bound"] / r["relaxation"] for r in at if r["status"] != "optimal"]
        line = f"* position {pos:g}: {len(proven)} of {len(at)} optima proven"
        if proven:
            line += f", {min(proven):.3f}-{max(proven):.3f} times the relaxation"
        if open_lows:
            line += f"; where not proven, the optimum is at least {max(open_lows):.3f} times it on one graph"
        summary.append(line)
    return "\n".join([
        "## bounds-tight: the relaxation's bound near the smallest budget (issue 37)", "",
        f"`{meta['command']}` ({meta['machine']}{', commit ' + meta['commit'] if meta.get('commit') else ''}). "
        "Random training graphs at budgets between the smallest one any "
        "DTR heuristic or the feasibility phase finds (position 0; `bench_scale.smallest_found_budget`) and the "
        "checkpoint-all peak (position 1); costs over the sum of the node costs. *relaxation*: "
        "`remat_core.bounds.cost_lower_bound` (the bound `auto` reports on the large path); *ilp*, *ilp bound*: "
        f"`ilp`'s schedule and proven bound with a {meta['limit']:g} s limit (equal when optimal); *opt / relaxation*: "
        "the optimum over the relaxation's bound (a range where `ilp` did not prove it). Load: one-minute load "
        "average on 2 shared cores.", "",
        table(["graph", "nodes", "position", "budget", "relaxation", "ilp", "ilp bound", "opt / relaxation",
               "ilp s", "load"], body), "", *summary])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    def extra(ap):
        ap.add_argument("--shared-only", action="store_true",
                        help="rerun the shared graphs only, keeping the small graphs' rows of results/bounds.json")
        ap.add_argument("--tight", action="store_true",
                        help="the relaxation against ilp's optimum near the smallest budget (section bounds-tight; "
                             "--limit is ilp's, default 60 s)")

    args = limit_arguments(__doc__, "small graphs only, no shared graphs", 60.0, "ilp / lp-rounding limit (s)", extra)
    if args.tight:
        if not args.report_only:
            meta = dict(command=command_line(), machine=machine_line(), limit=args.limit,
                        commit=os.environ.get("BENCH_COMMIT"))
            save_json("bounds_tight", {"meta": meta, "rows": tight_rows(args.limit)})
        rewrite_section_from_results("bounds_tight", "bounds-tight", render_tight)
        return
    if args.report_only:
        rewrite_section_from_results("bounds", "bounds", render)
        return
    meta = dict(command=command_line(), machine=machine_line(), limit=args.limit)
    if args.shared_only:
        with open(os.path.join(RESULTS, "bounds.json")) as fh:
            old = json.load(fh)
        rows = [r for r in old["rows"] if r.get("part") == "small"]
        for r in rows:   # the optima and the Checkmate LP stand; the bounds are this code's
            if r.get("optimum") is not None:
                from remat_core.units import resolve_budget

                g = small_graph(r["graph"])
                r.update(small_bounds(g, resolve_budget(g, r["fraction"])))
        meta.update(limit=old["meta"]["limit"], small_rows_from=old["meta"].get("small_rows_from")
                    or f"{old['meta']['command']} ({old['meta']['machine']})")
    else:
        rows = [dict(r, part="small") for r in small_rows(args.limit)]
    if not args.quick:
        rows += [dict(r, part="large") for r in large_rows()]
    save_json("bounds", {"meta": meta, "rows": rows})
    write_section("bounds", render(rows, meta))


if __name__ == "__main__":
    main()
