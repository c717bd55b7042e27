"""Solvers at the scale of real models: the shared DTR graphs and random layered graphs of 500 to 5,000 nodes.

For each graph and budget (a fraction of activation memory, ``remat_core.units``), every solve runs in its own
child process (so that its peak RSS is its own, read from ``os.wait4``) under a 6 GB address-space cap:

* ``auto`` with each time limit (wall time, cost / lower bound, path taken, method that gave the schedule);
* the best baseline (the cheapest of the heuristics ``auto`` runs first) and ``dtr``, without a limit.

Writes ``results/scale.json``, ``results/scale.png`` and the README section "scale".

    .venv/bin/python benchmarks/bench_scale.py            # the recorded subset (see SUBSET)
    .venv/bin/python benchmarks/bench_scale.py --full     # every graph, budgets 0.9 .. 0.1, limits 10/60/300 s
    .venv/bin/python benchmarks/bench_scale.py --report-only
    .venv/bin/python benchmarks/bench_scale.py --size-rule   # ilp / lp-rounding / auto around auto's thresholds
    .venv/bin/python benchmarks/bench_scale.py --layered     # issue 37: random layered graphs, 250-2,000 nodes
    .venv/bin/python benchmarks/bench_scale.py --lns         # issue 37: the windowed MILP's time per program
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import DTR_GRAPHS, RESULTS, command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

FULL_FRACTIONS = (0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1)
FULL_LIMITS = (10.0, 60.0, 300.0)
#: random_training_graph(layers, 3, seed=0): about 4.2 nodes a layer (500, 1,000, 2,000 and 4,800 nodes)
RANDOM_LAYERS = (120, 240, 480, 1150)
#: The run recorded in the README (under 15 minutes on a shared 2-core machine).
SUBSET = {"graphs": ["U-Net_6", "ResNet-32_56", "InceptionV4_64", "Transformer_10", "DenseNet-121_84",
                     "Unrolled_GAN", "TreeLSTM_D.6", "LSTM_512", "random-240"],
          "fractions": (0.9, 0.5, 0.2), "limits": (10.0,)}
MEMORY_CAP_BYTES = 6_000_000_000


def load(name: str):
    from remat_core import load_dtr_dag
    from remat_core.zoo import random_training_graph

    if name.startswith("random-"):
        return random_training_graph(int(name.split("-")[1]), 3, seed=0)
    if name.startswith("layered-"):   # layered-<layers>-s<seed>: held out from the tests and the tuning (seed 0)
        _, layers, seed = name.split("-")
        return random_training_graph(int(layers), 3, seed=int(seed[1:]))
    return load_dtr_dag(dtr_graph_path(name))


def smallest_found_budget(g) -> int:
    """The smallest budget at which any DTR heuristic finds a schedule (their bisections, and auto's feasibility
    phase; a budget found, not a proof that nothing smaller works): the "smallest feasible" end of the range."""
    from remat_core import solve
    from remat_core.solvers.anytime import min_peak_schedules
    from remat_core.solvers.dtr import HEURISTICS

    found = [min_peak_schedules(g, lambda name, res: None, g.min_budget_lower_bound_bytes())]
    for h in HEURISTICS:
        if h == "random":
            continue
        # the stage run, as before 018ee95 made order="auto" dtr's default: the rows' smallest budgets stay comparable
        r = solve(g, g.min_budget_lower_bound_bytes(), method="dtr", heuristic=h, order="stages")
        found.append(r.peak_memory_bytes if r.success else r.stats.get("method_min_budget_bytes"))
    return int(min(x for x in found if x is not None))


def child_main(job_path: str, out_path: str) -> None:
    """One solve, in this (child) process: writes a result dict."""
    import numpy as np

    from remat_core import solve
    from remat_core.solvers.auto import BASELINES
    from remat_core.units import resolve_budget

    with open(job_path) as f:
        job = json.load(f)
    g = load(job["graph"])
    if job["method"] == "min-budget":
        with open(out_path, "w") as f:
            json.dump({"budget": smallest_found_budget(g)}, f)
        return
    budget = job["budget"] if job.get("budget") else resolve_budget(g, job["fraction"])
    base = float(np.sum(g.cost))
    t0 = time.perf_counter()
    from remat_core.units import budget_fraction

    out = {"n": g.n, "budget": budget, "budget_fraction": budget_fraction(g, budget)}
    if job["method"] == "baselines":
        best = None
        for name in BASELINES:
            if name == "dtr":
                continue
            try:
                r = solve(g, budget, method=name)
            except ValueError:
                continue
            if r.success and (best is None or r.objective < best[1]):
                best = (name, r.objective)
        out.update(status="feasible" if best else "infeasible", chosen=best and best[0],
                   cost=best and best[1] / base)
    else:
        opts = {"time_limit_s": job["limit"]} if job["limit"] else {}
        r = solve(g, budget, method=job["method"], **opts)
        out.update(status=r.status.value, cost=r.objective and r.objective / base,
                   bound=r.lower_bound and r.lower_bound / base, path=r.stats.get("path"),
                   chosen=r.stats.get("chosen"), message=r.message[:200],
                   anytime=r.stats.get("tried", {}).get("anytime"), lns=r.stats.get("tried", {}).get("lns"),
                   hint=r.stats.get("min_budget_bytes"))
    out["wall_s"] = time.perf_counter() - t0
    with open(out_path, "w") as f:
        json.dump(out, f)


def run_child(job: dict) -> dict:
    """Run one solve in a child process under the memory cap; its wall time (start-up included) and peak RSS."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
        jp, op = os.path.join(d, "job.json"), os.path.join(d, "out.json")
        with open(jp, "w") as f:
            json.dump(job, f)
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", jp, op],
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS,
                                                                      (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES)))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        res = json.load(open(op)) if os.path.exists(op) else {"status": f"crashed ({proc.returncode})"}
    res.update(job, process_wall_s=wall, peak_rss_mib=usage.ru_maxrss / 1024)
    return res


def _load_line(meta: dict) -> str:
    """What the machine's load was during the run (measured at its start and end), when recorded."""
    if "runs" in meta:
        loads = [m["load"] for m in meta["runs"] if "load" in m]
        return ("One-minute load averages at the start and end of each run on 2 cores: "
                + ", ".join(f"{a:g} / {b:g}" for a, b in loads)
                + ": wall times are upper bounds, and a solve given more of the machine may find more within the "
                  "same limit.")
    if "load" not in meta:
        return "The machine's load during the run was not recorded."
    a, b = meta["load"]
    return (f"One-minute load average {a:g} at the start and {b:g} at the end of the run on 2 cores: wall times "
            "are upper bounds, and a solve given more of the machine may find more within the same limit.")


def render(rows: list[dict], meta: dict) -> str:
    by_key: dict = {}
    # graphs by size, shared ones first, then budgets from the largest to the smallest found
    order = {g: (g.startswith("random-"), n) for g, n in ((r["graph"], r.get("n") or 0) for r in rows)}
    frac_key = lambda f: -1.0 if f == "min" else f  # noqa: E731
    for r in sorted(rows, key=lambda r: (order[r["graph"]], r["graph"], -frac_key(r["fraction"]))):
        by_key.setdefault((r["graph"], r["fraction"]), {})[(r["method"], r["limit"])] = r
    limits = sorted({r["limit"] for r in rows if r["method"] == "auto"})
    head = ["graph", "nodes", "budget"]
    for lim in limits:
        head += [f"auto {lim:g} s: cost/LB", "path (method)", "wall s", "RSS MiB"]
    head += ["LB / sum of costs", "best baseline", "dtr (h_dtr_eq)"]
    out = []

    def c(x):
        return "-" if x is None else f"{x:.3f}"

    for (graph, frac), d in by_key.items():
        first = next(iter(d.values()))
        n = first.get("n", "")
        row = [graph, n, frac if frac != "min" else f"smallest found ({first.get('budget_fraction', 0):.3f})"]
        for lim in limits:
            a = d.get(("auto", lim), {})
            if not a:   # not measured at this budget with this limit
                row += ["", "", "", ""]
                continue
            ratio = a["cost"] / a["bound"] if a.get("cost") and a.get("bound") else None
            row += [c(ratio) if ratio else a.get("status", "-"), f"{a.get('path')} ({a.get('chosen') or '-'})",
                    f"{a.get('wall_s', 0):.1f}", f"{a.get('peak_rss_mib', 0):.0f}"]
        b, t = d.get(("baselines", 0), {}), d.get(("dtr", 0), {})
        bounds = [d[("auto", lim)].get("bound") for lim in limits if d.get(("auto", lim), {}).get("bound")]
        row += [c(max(bounds)) if bounds else "-"]
        row += [f"{c(b.get('cost'))} ({b.get('chosen')})" if b.get("cost") else b.get("status", "-"),
                c(t.get("cost")) if t.get("cost") else t.get("status", "-")]
        out.append(row)
    text = ["## scale: auto on large graphs (issue 26)", "",
            (f"Measured on {meta['machine']}; `{meta['command']}`; {meta['scope']}. {_load_line(meta)}"
             if "runs" not in meta else
             "Measured in these runs, each row from the last run that measured it (one-minute load averages at "
             "the start and end of each run, on 2 cores: wall times are upper bounds, and a solve given more of "
             "the machine may find more within the same limit):\n\n"
             + "\n".join(f"* `{m['command']}` ({m['machine']}; load {m.get('load', ['?', '?'])[0]} / "
                         f"{m.get('load', ['?', '?'])[1]})" for m in meta["runs"])
             + (f"\n\n{meta['note']}" if meta.get("note") else "")),
            "",
            "*cost/LB*: the cost of auto's schedule over the lower bound auto itself reports (the MILP's or LP's "
            "on the `ilp` and `lp-rounding` paths; on the large path the relaxation of `remat_core.bounds`, "
            "benchmarks/README.md section bounds), so 1.05 means within 5% of the optimum at worst. "
            "*LB / sum of costs*: that bound over every node computed once; the baselines' and dtr's costs are "
            "over the sum of the node costs too. *wall s*: "
            "the `solve` call (the limit is on the call; the process's interpreter start-up and graph loading, "
            "2 to 4 s here, are not in it). "
            "*RSS MiB*: peak resident memory of the solve's process and its children. *best baseline*: the "
            "cheapest of the heuristics other than dtr at that budget; *dtr*: `method='dtr'`. Plot: "
            "`results/scale.png` (each method's cost and the lower bound over the sum of the node costs, against the budget; one panel per graph).", "",
            table(head, out)]
    return "\n".join(text)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = {r["graph"]: (r["graph"].startswith("random-"), r.get("n") or 0) for r in rows}
    graphs = sorted(size, key=lambda g: (size[g], g))     # as in the table: shared graphs by size, then random
    cols = 5
    fig, axes = plt.subplots((len(graphs) + cols - 1) // cols, cols, figsize=(3.2 * cols, 2.8 * ((len(graphs) + cols - 1) // cols)),
                             squeeze=False)
    for ax, gname in zip(axes.flat, graphs):
        rs = [r for r in rows if r["graph"] == gname]
        series = {}
        for r in rs:
            label = f"auto {r['limit']:g} s" if r["method"] == "auto" else r["method"]
            x = r.get("budget_fraction", r["fraction"])
            if r.get("cost"):
                series.setdefault(label, []).append((x, r["cost"]))
            if r["method"] == "auto" and r.get("bound"):
                bound = dict(series.get("lower bound", []))
                bound[x] = max(bound.get(x, 0.0), r["bound"])
                series["lower bound"] = sorted(bound.items())
        style = {"baselines": dict(marker="s", ls=":", color="tab:orange"), "dtr": dict(marker="x", ls="--", color="tab:green"),
                 "lower bound": dict(marker="_", ls="-", color="black", lw=0.8)}
        # auto last, with open circles, so that it shows where it equals dtr; the longer limits were measured at
        # a few budgets only: markers without lines, so that no line suggests the budgets between
        for label in sorted(series, key=lambda x: (x.startswith("auto"), x)):
            pts = sorted(series[label])
            st = style.get(label, dict(marker="o", ls="-" if label == "auto 10 s" else "none", mfc="none",
                                       ms={"auto 10 s": 9, "auto 60 s": 12}.get(label, 15),
                                       color={"auto 10 s": "tab:blue", "auto 60 s": "tab:purple"}.get(label, "tab:red")))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **st)
        # a baseline far above the rest would flatten every other line: the axis stops above the others
        rest = [c for label, pts in series.items() if label != "baselines" for _, c in pts]
        top = 1.15 * max(rest) if rest else None
        off = top is not None and any(c > top for _, c in series.get("baselines", []))
        if off:
            ax.set_ylim(bottom=0.98 * min(rest), top=top)
        ax.set_title(f"{gname} ({rs[0].get('n', '')} nodes)" + ("\nsome baselines above the axis" if off else ""),
                     fontsize=9)
        ax.set_xlabel("budget (fraction of activation memory)", fontsize=7)
        ax.set_ylabel("cost / sum of node costs", fontsize=7)
        ax.invert_xaxis()
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(graphs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


#: Issue 37's grid: random layered training graphs of about 250, 500, 1,000 and 2,000 nodes (seed 7, held out:
#: the tests and the tuning use seed 0), budgets 0.9 to 0.5 and the smallest found, auto with 10, 60 and 300 s.
LAYERED = {"graphs": ["layered-66-s7", "layered-128-s7", "layered-256-s7", "layered-505-s7"],
           "fractions": (0.9, 0.7, 0.6, 0.5, "min"), "limits": (10.0, 60.0, 300.0)}


def render_layered(rows: list[dict], meta: dict) -> str:
    """The section scale-layered: auto's cost over its bound per limit, wall times, and the goals met."""
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["graph"], r["fraction"]), {})[(r["method"], r["limit"])] = r
    limits = sorted({r["limit"] for r in rows if r["method"] == "auto"})
    head = ["graph", "nodes", "budget"]
    for lim in limits:
        head += [f"auto {lim:g} s: cost/LB", "wall s", "chosen", "load"]
    head += ["lns", "LB / sum", "best baseline", "dtr", "goal"]
    out, met, missed = [], 0, 0
    order = lambda k: (by_key[k].get(("auto", limits[0]), {}).get("n", 0), -(0.0 if k[1] == "min" else k[1]))  # noqa: E731
    for key in sorted(by_key, key=order):
        graph, frac = key
        d = by_key[key]
        first = next(iter(d.values()))
        row = [graph, first.get("n", ""),
               frac if frac != "min" else f"smallest found ({first.get('budget_fraction', 0):.3f})"]
        ratios = []
        for lim in limits:
            a = d.get(("auto", lim), {})
            ratio = a["cost"] / a["bound"] if a.get("cost") and a.get("bound") else None
            ratios.append(ratio)
            row += [f"{ratio:.3f}" if ratio else a.get("status", ""), f"{a.get('wall_s', 0):.1f}" if a else "",
                    a.get("chosen") or "-", f"{a.get('load', '')}"]
        b, t = d.get(("baselines", 0), {}), d.get(("dtr", 0), {})
        bounds = [d[("auto", lim)]["bound"] for lim in limits if d.get(("auto", lim), {}).get("bound")]
        lns = d.get(("auto", limits[-1]), {}).get("lns") or {}
        row += [f"{lns['windows']} / {lns['improved']}" if "windows" in lns else "-",
                f"{max(bounds):.3f}" if bounds else "-",
                f"{b['cost']:.3f}" if b.get("cost") else b.get("status", "-"),
                f"{t['cost']:.3f}" if t.get("cost") else t.get("status", "-")]
        anyone = bool(b.get("cost") or t.get("cost") or any(d.get(("auto", lim), {}).get("cost") for lim in limits)
                      or frac == "min")
        best_ratio = min((x for x in ratios if x), default=None)
        target = 1.15 if frac == "min" else (1.05 if frac >= 0.7 else None)
        goal = []
        if anyone and any(not d.get(("auto", lim), {}).get("cost") for lim in limits if d.get(("auto", lim))):
            goal.append("MISSED: no schedule")
        if target is not None and best_ratio is not None:
            goal.append(("met" if best_ratio <= target else "MISSED") + f" (<= {target:.2f})")
        # the longest limit strictly better than 60 s wherever 60 s is not within 1% of its bound
        at60 = ratios[limits.index(60.0)] if 60.0 in limits else None
        if len(limits) > 1 and limits[-1] > 60.0 and at60 is not None and at60 > 1.01 and ratios[-1] is not None:
            goal.append(("met" if ratios[-1] < at60 - 1e-9 else "MISSED") + f" ({limits[-1]:g} s < 60 s)")
        met += sum(g.startswith("met") for g in goal)
        missed += sum(g.startswith("MISSED") for g in goal)
        row.append("; ".join(goal) or "-")
        out.append(row)
    runs = meta.get("runs", [meta])
    return "\n".join([
        "## scale-layered: auto's anytime search on random layered training graphs (issue 37)", "",
        "Measured in these runs (one-minute load average at the start of each solve in the *load* columns, on a "
        "2-core machine shared with other jobs: wall times are upper bounds):", "",
        "\n".join(f"* `{m['command']}` ({m['machine']})" + (
            ": the rows of " + ", ".join(sorted({r["graph"] for r in rows if r.get("run") == k})) if len(runs) > 1 and
            any(r.get("run") == k for r in rows) else "") for k, m in enumerate(runs)), "",
        "Graphs: `random_training_graph(layers, 3, seed=7)` (seed 0 is the one the tests and the tuning used). "
        "*cost/LB*: auto's cost over the lower bound it reports; *LB / sum*: that bound over every node computed "
        "once; *best baseline* and *dtr* (h_dtr_eq, no limit): cost over the sum of the node costs. *smallest "
        "found*: the smallest budget any DTR heuristic's bisection (and auto's feasibility phase) reached. Goals "
        "(issue 37): a schedule wherever any method found one; within 5% of the bound at 0.7 and above; within "
        f"15% at the smallest found budget; the 300 s column strictly better than 60 s wherever 60 s is not within "
        f"1% of its bound. Goals met: {met}, missed: {missed}. auto ran with the defaults of the run's commit (see "
        "each run's commit; since 0998691/eb23e3e: `stop_gap` 1%, `patience_s` 8 s, between 1% and 5% of its bound the "
        "search ends once nothing has improved for 8 s, further it runs to the limit; before, `stop_gap` 5%; since "
        "7c80fb0/16707c2 that stall window is max(8 s, a tenth of the limit), and where the tenth is longer a stall "
        "ends only the restarts: the windowed MILP then runs to the limit). "
        "*lns*: windows re-optimized by the exact MILP / improved (remat_core.solvers.lns) in the longest limit's "
        "run. Each solve runs in a fresh process, which pays numba's start-up (3-5 s at a load of 10) out of its "
        "limit. No CP-SAT peer was built (ortools not installed): no peer column.", "",
        table(head, out)])


#: The size rule's evidence: graphs around auto's two thresholds, each method with the same limit.
SIZE_RULE = {"graphs": ["random-10", "random-18", "random-25", "random-40", "U-Net_6"], "fraction": 0.5, "limit": 60.0,
             "methods": ("ilp", "lp-rounding", "auto")}


def render_size_rule(rows: list[dict], meta: dict) -> str:
    from remat_core.formulation.size import estimate_milp_size

    head = ["graph", "nodes", "est. nonzeros", "method", "status", "cost / its bound", "cost / best cost",
            "wall s", "RSS MiB", "auto's path"]
    best = {}
    for r in rows:
        if r.get("cost"):
            best[r["graph"]] = min(best.get(r["graph"], 1e18), r["cost"])
    out = []
    for r in rows:
        est = estimate_milp_size(load(r["graph"])).nonzeros
        ratio = r["cost"] / r["bound"] if r.get("cost") and r.get("bound") else None
        out.append([r["graph"], r.get("n"), f"{est / 1e6:.2f} M", r["method"], r.get("status"),
                    "-" if ratio is None else f"{ratio:.4f}", "-" if not r.get("cost") else f"{r['cost'] / best[r['graph']]:.4f}",
                    f"{r.get('wall_s', 0):.1f}", f"{r.get('peak_rss_mib', 0):.0f}", r.get("path") or ""])
    return "\n".join([
        "## scale-size-rule: ilp, lp-rounding and auto around auto's thresholds (issue 26)", "",
        f"Measured on {meta['machine']}; `{meta['command']}`; budget 0.5 of activation memory, every method with "
        f"`time_limit_s={SIZE_RULE['limit']:g}`, each solve in its own process (peak RSS from `wait4`); the machine "
        "was shared with other jobs (load average 8 to 11 on 2 cores). *cost / its bound*: over the lower bound "
        "the method itself reports; *cost / best cost*: over the cheapest of the three. auto's rule "
        "(`remat_core.solvers.auto`): `ilp` up to 0.6 M estimated nonzeros, `lp-rounding` up to 20 M, each only "
        "if the program has at most 120 k nonzeros per second of the limit; the large-graph path beyond.", "",
        table(head, out)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="every graph, budgets 0.9 .. 0.1, limits 10/60/300 s")
    ap.add_argument("--graphs", help="comma-separated graph names (DTR names or random-<layers>)")
    ap.add_argument("--fractions", help="comma-separated budgets (fractions of activation memory)")
    ap.add_argument("--limits", help="comma-separated time limits of auto (s)")
    ap.add_argument("--methods", default="auto,baselines,dtr",
                    help="which of auto, baselines (the best of the heuristics but dtr) and dtr to run")
    ap.add_argument("--append", action="store_true",
                    help="add this run's rows to results/scale.json (a row of the same graph, budget, method and "
                         "limit is replaced) instead of starting a new file")
    ap.add_argument("--report-only", action="store_true", help="rewrite the README section from the results")
    ap.add_argument("--size-rule", action="store_true", help="the size rule's evidence (section scale-size-rule)")
    ap.add_argument("--layered", action="store_true",
                    help="issue 37's grid (section scale-layered): random layered training graphs of 250 to 2,000 "
                         "nodes; --graphs/--fractions/--limits narrow it, --append adds to its results")
    ap.add_argument("--references", action="store_true",
                    help="ilp references on small graphs for docs/large_graphs.rst (results/scale_references.json)")
    ap.add_argument("--planning", action="store_true",
                    help="the default auto call's wall time on 119-181-node zoo models (section scale-planning)")
    ap.add_argument("--lns", action="store_true",
                    help="the windowed MILP's time per program at the smallest found budgets (section scale-lns)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(*args.child)
        return
    if args.size_rule:
        path = os.path.join(RESULTS, "scale_size_rule.json")
        if args.report_only:
            data = json.load(open(path))
        else:
            rows = []
            for gname in SIZE_RULE["graphs"]:
                for m in SIZE_RULE["methods"]:
                    r = run_child({"graph": gname, "fraction": SIZE_RULE["fraction"], "method": m,
                                   "limit": SIZE_RULE["limit"]})
                    rows.append(r)
                    print(json.dumps({k: r.get(k) for k in ("graph", "method", "status", "cost", "bound", "path",
                                                            "wall_s", "peak_rss_mib")}), flush=True)
            data = {"meta": {"machine": machine_line(), "command": command_line()}, "rows": rows}
            save_json("scale_size_rule", data)
        write_section("scale-size-rule", render_size_rule(data["rows"], data["meta"]))
        return
    if args.layered:
        layered_main(args)
        return
    if args.references:
        references_main()
        return
    if args.lns:
        lns_main(args)
        return
    if args.planning:
        planning_main()
        return
    json_path = os.path.join(RESULTS, "scale.json")
    if args.report_only:
        data = json.load(open(json_path))
        plot(data["rows"], os.path.join(RESULTS, "scale.png"))
        write_section("scale", render(data["rows"], data["meta"]))
        return
    if args.full:
        graphs = DTR_GRAPHS + [f"random-{k}" for k in RANDOM_LAYERS]
        fractions, limits = FULL_FRACTIONS, FULL_LIMITS
        scope = "the full grid"
    else:
        graphs, fractions, limits = SUBSET["graphs"], SUBSET["fractions"], SUBSET["limits"]
        scope = (f"the recorded subset: graphs {', '.join(graphs)}; budgets {', '.join(map(str, fractions))}; "
                 f"auto's limit {', '.join(f'{x:g} s' for x in limits)} (`--full`: budgets 0.9 to 0.1, limits 10, "
                 "60 and 300 s, random graphs of 500 to 4,800 nodes)")
    if args.graphs:
        graphs = args.graphs.split(",")
    if args.fractions:
        fractions = tuple(x if x == "min" else float(x) for x in args.fractions.split(","))
    if args.limits:
        limits = tuple(float(x) for x in args.limits.split(","))
    if args.graphs or args.fractions or args.limits:
        scope = (f"graphs {', '.join(graphs)}; budgets {', '.join(map(str, fractions))}; "
                 f"auto's limits {', '.join(f'{x:g} s' for x in limits)}")
    load_before = os.getloadavg()
    rows = []
    for gname in graphs:
        methods = args.methods.split(",")
        for frac in fractions:
            budget = run_child({"graph": gname, "fraction": frac, "method": "min-budget", "limit": 0})["budget"] \
                if frac == "min" else None
            jobs = [{"graph": gname, "fraction": frac, "method": "auto", "limit": lim} for lim in limits
                    if "auto" in methods]
            jobs += [{"graph": gname, "fraction": frac, "method": m, "limit": 0} for m in ("baselines", "dtr")
                     if m in methods]
            for job in jobs:
                job["budget"] = budget
                r = run_child(job)
                rows.append(r)
                print(json.dumps({k: r.get(k) for k in ("graph", "fraction", "method", "limit", "status", "cost",
                                                        "bound", "path", "chosen", "wall_s", "peak_rss_mib")}),
                      flush=True)
    meta = {"machine": machine_line(), "command": command_line(), "scope": scope,
            "load": [round(load_before[0], 1), round(os.getloadavg()[0], 1)]}
    if args.append and os.path.exists(json_path):
        old = json.load(open(json_path))
        key = lambda r: (r["graph"], r["fraction"], r["method"], r["limit"])  # noqa: E731
        new_keys = {key(r) for r in rows}
        rows = [r for r in old["rows"] if key(r) not in new_keys] + rows
        runs = old["meta"].get("runs", [old["meta"]]) + [meta]
        meta = {"machine": meta["machine"], "command": "; ".join(f"`{m['command']}`" for m in runs).strip("`"),
                **({"note": old["meta"]["note"]} if old["meta"].get("note") else {}),
                "scope": "; ".join(m["scope"] for m in runs), "runs": runs,
                "load": [min(m.get("load", [0, 0])[0] for m in runs), max(m.get("load", [0, 0])[1] for m in runs)]}
    save_json("scale", {"meta": meta, "rows": rows})
    plot(rows, os.path.join(RESULTS, "scale.png"))
    write_section("scale", render(rows, meta))


#: Small graphs where ``ilp`` gives a reference for "how far from optimal" (docs/large_graphs.rst).
REFERENCES = [(12, 7), (15, 7), (12, 8)]


def references_main() -> None:
    """At 0.5 and at the smallest found budget of small random training graphs: the relaxation's bound, auto
    forced onto the large path (10 s) and ``ilp`` (200 s, its schedule and bound); results/scale_references.json."""
    from remat_core import solve
    from remat_core.bounds import cost_lower_bound
    from remat_core.solvers.anytime import min_peak_schedules
    from remat_core.units import budget_fraction, resolve_budget
    from remat_core.zoo import random_training_graph

    rows = []
    for layers, seed in REFERENCES:
        g = random_training_graph(layers, 3, seed=seed)
        tot = float(g.cost.sum())
        for budget in (min_peak_schedules(g, lambda name, res: None, 0), resolve_budget(g, 0.5)):
            row = {"graph": f"layered-{layers}-s{seed}", "n": g.n, "fraction": budget_fraction(g, budget),
                   "load": round(os.getloadavg()[0], 1),
                   "relaxation": cost_lower_bound(g, budget, time_limit_s=20).value / tot}
            a = solve(g, budget, method="auto", time_limit_s=10, memory_limit_bytes=10**6)
            row["auto_large"] = a.objective and a.objective / tot
            t0 = time.perf_counter()
            r = solve(g, budget, method="ilp", time_limit_s=200)
            row.update(ilp_status=r.status.value, ilp=r.objective and r.objective / tot,
                       ilp_bound=r.lower_bound and r.lower_bound / tot, ilp_s=time.perf_counter() - t0)
            rows.append(row)
            print(json.dumps(row), flush=True)
            save_json("scale_references", {"meta": {"machine": machine_line(), "command": command_line()},
                                           "rows": rows})


#: Issue 36's planning time: the default auto call (time_limit_s=60) on the zoo's 119-181-node models.
PLANNING = {"graphs": ["torch_transformer_b4", "torch_unet_b1", "torch_mobilenet_b2", "keras_mobilenet"],
            "fractions": (0.5, 0.3, 0.05)}


def planning_main() -> None:
    """Wall time of ``solve(g, budget, method="auto")`` with its defaults, each in this process after the graph
    is loaded; results/scale_planning.json and the README section scale-planning."""
    from remat_core import solve
    from remat_core.units import resolve_budget
    from remat_core.zoo import zoo_graph

    rows = []
    for name in PLANNING["graphs"]:
        g = zoo_graph(name)
        for frac in PLANNING["fractions"]:
            load = round(os.getloadavg()[0], 1)
            t0 = time.perf_counter()
            r = solve(g, resolve_budget(g, frac), method="auto")
            rows.append({"graph": name, "n": g.n, "fraction": frac, "status": r.status.value,
                         "wall_s": time.perf_counter() - t0, "load": load, "path": r.stats.get("path"),
                         "gap": r.stats.get("gap"), "chosen": r.stats.get("chosen")})
            print(json.dumps(rows[-1]), flush=True)
    meta = {"machine": machine_line(), "command": command_line()}
    save_json("scale_planning", {"meta": meta, "rows": rows})
    body = [[r["graph"], r["n"], r["fraction"], r["status"], f"{r['wall_s']:.1f}",
             "-" if r["gap"] is None else f"{100 * r['gap']:.1f}%", r["path"], r["chosen"] or "-", r["load"]]
            for r in rows]
    write_section("scale-planning", "\n".join([
        "## scale-planning: the default auto call on 119-181-node models (issues 36, 37)", "",
        f"Measured on {meta['machine']}; `{meta['command']}`; `solve(g, budget, method=\"auto\")` with its "
        "defaults (`time_limit_s` 60, `stop_gap` 1%, `patience_s` 8 s; between 1% and 5% of its bound the search "
        "ends once nothing has improved for 8 s, further it runs to the limit); *load*: one-minute load average at the "
        "start of each call, on 2 cores. *gap*: cost over auto's lower bound minus one (none: optimal or no "
        "schedule).", "",
        table(["graph", "nodes", "budget", "status", "wall s", "gap", "path", "chosen", "load"], body)]))


#: The windowed-MILP search's time per program (section scale-lns): from auto's 10 s schedule at the smallest found
#: budget, :func:`remat_core.solvers.lns.improve_windows` alone with each ``window_s``, to the same limit.
LNS = {"graphs": ["layered-66-s7", "layered-128-s7"], "window_s": (1.0, 4.0), "limit": 120.0}


def lns_main(args) -> None:
    """Section scale-lns: cost over the bound after ``improve_windows`` with each time per program; its CPU time."""
    from remat_core.bounds import cost_lower_bound
    from remat_core.solvers.lns import improve_windows

    if args.report_only:
        data = json.load(open(os.path.join(RESULTS, "scale_lns.json")))
        write_section("scale-lns", render_lns(data["rows"], data["meta"]))
        return
    limit = float(args.limits) if args.limits else LNS["limit"]
    rows = []
    meta = {"machine": machine_line(), "command": command_line()}
    for gname in (args.graphs.split(",") if args.graphs else LNS["graphs"]):
        g = load(gname)
        from remat_core.solvers.anytime import min_peak_schedules

        # the smallest budget with a stage schedule (the feasibility phase's; DTR's runs recorded as they ran,
        # since 44a60c0, may reach smaller budgets without one)
        budget = min_peak_schedules(g, lambda name, res: None, 0)
        # the start: the feasibility phase's cheapest schedule there (deterministic; auto's own 10 s result
        # depends on the load), the bound: the relaxation auto reports on the large path
        found: list = []
        min_peak_schedules(g, lambda name, res: found.append(res), budget)
        sched = min(found, key=lambda r: r.schedule.cost(g)).schedule
        lower = cost_lower_bound(g, budget, time_limit_s=30).value
        for window_s in LNS["window_s"]:
            row = {"graph": gname, "n": g.n, "budget": budget, "window_s": window_s, "limit": limit,
                   "load": round(os.getloadavg()[0], 1), "start": sched.cost(g) / lower}
            t0, c0 = time.perf_counter(), time.process_time()
            trace: list = []
            best, info = improve_windows(
                g, sched, budget, deadline=t0 + limit, window_s=window_s, lower_bound=lower,
                offer=lambda s: trace.append((round(time.perf_counter() - t0, 1), s.cost(g) / lower)))
            assert simulate_peak(g, best) <= budget
            row.update(end=best.cost(g) / lower, cpu_s=time.process_time() - c0,
                       wall_s=time.perf_counter() - t0, trace=trace, **info)
            rows.append(row)
            print(json.dumps(row), flush=True)
            save_json("scale_lns", {"meta": meta, "rows": rows})
    write_section("scale-lns", render_lns(rows, meta))


def render_lns(rows: list[dict], meta: dict) -> str:
    """The section scale-lns."""
    out = [[r["graph"], r["n"], r["window_s"], f"{r['start']:.4f}", f"{r['end']:.4f}", r["windows"], r["improved"],
            f"{r['cpu_s']:.1f}", f"{r['wall_s']:.0f}", r["load"]] for r in rows]
    return "\n".join([
        "## scale-lns: the windowed MILP's time per program (issue 37)", "",
        f"`{meta['command']}` ({meta['machine']}). At the smallest budget the feasibility phase finds (a stage "
        "schedule exists there), from that phase's cheapest schedule, "
        "`remat_core.solvers.lns.improve_windows` alone with each `window_s` (the time one window's program may run) "
        f"for {rows[0]['limit'] if rows else 0:g} s of wall time; *start*, *end*: cost over the relaxation's bound "
        "(`remat_core.bounds.cost_lower_bound`, the one auto reports on the large path); "
        "*cpu s*: this process's CPU time in that wall time (the machine is shared: the load is the one-minute load "
        "average at the start).", "",
        table(["graph", "nodes", "window_s", "start", "end", "windows", "improved", "cpu s", "wall s", "load"], out)])


def simulate_peak(g, schedule) -> int:
    from remat_core import simulate

    return simulate(g, schedule).peak_memory_bytes


def layered_main(args) -> None:
    """Issue 37's grid; results/scale_layered.json is rewritten after every solve, so a stopped run keeps its rows."""
    json_path = os.path.join(RESULTS, "scale_layered.json")
    if args.report_only:
        data = json.load(open(json_path))
        write_section("scale-layered", render_layered(data["rows"], data["meta"]))
        return
    graphs = args.graphs.split(",") if args.graphs else LAYERED["graphs"]
    fractions = (tuple(x if x == "min" else float(x) for x in args.fractions.split(","))
                 if args.fractions else LAYERED["fractions"])
    limits = tuple(float(x) for x in args.limits.split(",")) if args.limits else LAYERED["limits"]
    meta = {"machine": machine_line(), "command": command_line()}
    rows: list[dict] = []
    runs = [meta]
    if args.append and os.path.exists(json_path):
        old = json.load(open(json_path))
        rows, runs = old["rows"], old["meta"].get("runs", [old["meta"]]) + [meta]
    key = lambda r: (r["graph"], r["fraction"], r["method"], r["limit"])  # noqa: E731
    for gname in graphs:
        for frac in fractions:
            budget = run_child({"graph": gname, "fraction": frac, "method": "min-budget", "limit": 0})["budget"] \
                if frac == "min" else None
            methods = args.methods.split(",")   # --methods auto: keep the heuristics' rows of an earlier run
            jobs = [{"graph": gname, "fraction": frac, "method": "auto", "limit": lim} for lim in limits
                    if "auto" in methods]
            jobs += [{"graph": gname, "fraction": frac, "method": m, "limit": 0} for m in ("baselines", "dtr")
                     if m in methods]
            for job in jobs:
                job["budget"] = budget
                load = round(os.getloadavg()[0], 1)
                r = run_child(job)
                r["load"] = load
                r["run"] = len(runs) - 1   # which of meta["runs"] measured this row
                rows = [x for x in rows if key(x) != key(r)] + [r]
                print(json.dumps({k: r.get(k) for k in ("graph", "n", "fraction", "method", "limit", "status", "cost",
                                                        "bound", "chosen", "wall_s", "load", "anytime")}), flush=True)
                save_json("scale_layered", {"meta": {**meta, "runs": runs}, "rows": rows})
    write_section("scale-layered", render_layered(rows, {**meta, "runs": runs}))


if __name__ == "__main__":
    main()
