"""polish on DTR schedules (issue 27): how far keeping recomputed values, the simulator judging, brings the
simulated DTR schedules down on the large graphs, and what ``auto`` returns.

For each graph and budget (a fraction of the checkpoint-all peak: ``fixed + f * (peak - fixed)``), the
overhead (simulated cost over the sum of the node costs) of: the cheapest DTR schedule over the heuristics
(``solve(method="dtr")``: the default freeing rule, the ``keep_dead`` rule where the default fails), that
schedule after :func:`remat_core.solvers.segments.polish`, the cheapest schedule of the ``keep_dead`` rule
alone and its polish, and ``solve(method="auto")`` at each of the ``--auto-limit`` time limits (seconds). Polish runs to convergence (no
deadline). Times are wall seconds on a machine shared with other work: noisy.

    python benchmarks/bench_polish.py [--graphs TreeLSTM_D.6,LSTM_512] [--fractions 0.5] [--auto-limit 60,120]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import DTR_GRAPHS, command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

import numpy as np  # noqa: E402

from remat_core import load_dtr_dag, simulate, solve  # noqa: E402
from remat_core.simulate import checkpoint_all_peak_bytes  # noqa: E402
from remat_core.solvers.dtr import HEURISTICS  # noqa: E402
from remat_core.solvers.segments import polish  # noqa: E402


def _cheapest(g, budget, keep_dead):
    best = None
    for h in HEURISTICS:
        if h == "random":
            continue
        res = solve(g, budget, method="dtr", heuristic=h, keep_dead=keep_dead, find_min_budget=False)
        if res.success and (best is None or res.objective < best[1].objective):
            best = (h, res)
    return best


def _polished(g, budget, res, total):
    t0 = time.perf_counter()
    sim = simulate(g, polish(g, res.schedule, budget))
    assert sim.peak_memory_bytes <= budget
    return sim.total_cost / total, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", default="TreeLSTM_D.6,LSTM_512", help="comma-separated, or 'all'")
    ap.add_argument("--fractions", default="0.5")
    ap.add_argument("--auto-limit", default="60,120", help="auto's time limits, comma-separated ('': no auto)")
    args = ap.parse_args()
    names = DTR_GRAPHS if args.graphs == "all" else args.graphs.split(",")
    limits = [float(x) for x in args.auto_limit.split(",") if x.strip()]
    rows, raw = [], []
    for name in names:
        g = load_dtr_dag(dtr_graph_path(name))
        total = float(np.sum(g.cost))
        peak = checkpoint_all_peak_bytes(g)
        for f in (float(x) for x in args.fractions.split(",")):
            budget = int(g.fixed_bytes + f * (peak - g.fixed_bytes))
            entry = {"graph": name, "fraction": f}
            row = [name, f]
            for label, keep_dead in (("dtr", None), ("keep_dead", True)):
                best = _cheapest(g, budget, keep_dead)
                if best is None:
                    row += ["infeasible", "-", "-"]
                    continue
                over, secs = _polished(g, budget, best[1], total)
                entry[label] = {"heuristic": best[0], "overhead": best[1].objective / total,
                                "polished": over, "polish_s": secs}
                row += [f"{best[1].objective / total:.3f} ({best[0]})", f"{over:.3f}", f"{secs:.1f}"]
            for limit in limits:
                t0 = time.perf_counter()
                res = solve(g, budget, method="auto", time_limit_s=limit)
                secs = time.perf_counter() - t0
                entry[f"auto_{limit:g}"] = {"overhead": res.objective / total if res.success else None,
                                            "chosen": res.stats.get("chosen"), "time_s": secs}
                row += [f"{res.objective / total:.3f}" if res.success else res.status.value,
                        str(res.stats.get("chosen")), f"{secs:.1f}"]
            rows.append(row)
            raw.append(entry)
            print(row, flush=True)
    save_json("polish", raw)
    headers = ["graph", "fraction", "best dtr", "polished", "polish s", "best keep_dead", "polished", "polish s"]
    for limit in limits:
        headers += [f"auto ({limit:g} s)", "auto chose", "auto s"]
    md = ("## polish: DTR schedules polished, and auto, on the large graphs (issue 27)\n\n"
          "Overhead = simulated cost / sum of node costs (1.0: nothing recomputed), at `fraction` of the\n"
          "checkpoint-all peak. `polished`: `remat_core.solvers.segments.polish` of the schedule to its left\n"
          "(each round drops kept values nothing reads, `trim_keeps`, then keeps recomputed values where the\n"
          "stage memory leaves room). One run on a machine shared with other engineers: times are noisy.\n\n"
          f"`{command_line()}`  \n{machine_line()}\n\n" + table(headers, rows) + "\n")
    write_section("polish", md)


if __name__ == "__main__":
    main()
