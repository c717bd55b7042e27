"""The ``remat`` command.

Sub-commands: ``demo`` (the end-to-end job behind ``make demo``) and
``solve`` (one graph, one budget, one method; JSON out).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Sequence

from .graph import Graph
from .schedule import Schedule
from .simulate import simulate

__all__ = ["main", "load_graph_arg", "parse_budget"]


def load_graph_arg(spec: str) -> Graph:
    """A graph from a JSON file (remat format or the DTR DAG format) or a generator spec ``linear:N``."""
    from .graph import load_dtr_dag
    from .zoo import linear_graph

    if spec.startswith("linear:"):
        return linear_graph(int(spec.split(":", 1)[1]))
    if not os.path.exists(spec):
        raise SystemExit(f"remat: graph {spec!r} is neither a file nor a known generator (try linear:8)")
    with open(spec) as f:
        head = json.load(f)
    if head.get("format") == "remat-graph":
        return Graph.from_dict(head)
    return load_dtr_dag(spec)


def parse_budget(text: str, graph: Graph) -> int:
    """Budget as bytes (``123456``), binary units (``2.5GiB``, ``512MiB``) or a fraction of checkpoint-all's peak (``0.6x``)."""
    from .simulate import checkpoint_all_peak_bytes

    t = text.strip()
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "B": 1}
    if t.endswith("x"):
        return int(float(t[:-1]) * checkpoint_all_peak_bytes(graph))
    for suffix, mult in units.items():
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import solve
    from .plan import make_plan, replay
    from .plot import plot_memory_timeline
    from .solvers import available_methods
    from .zoo import linear_graph

    out = args.out
    os.makedirs(out, exist_ok=True)
    graph = linear_graph(args.layers)
    base = simulate(graph, Schedule.checkpoint_all(graph))
    print(f"graph: {graph!r}")
    print(f"checkpoint-all: cost {base.total_cost:g}, peak {base.peak_memory_bytes} bytes")
    rows = []
    schedules = [("checkpoint-all", Schedule.checkpoint_all(graph))]
    for frac in (1.0, 0.8, 0.6, 0.4):
        budget = max(1, int(round(frac * base.peak_memory_bytes)))
        for method in available_methods():
            t0 = time.perf_counter()
            res = solve(graph, budget, method=method, **({"time_limit_s": 60} if method == "ilp" else {}))
            rows.append((frac, budget, method, res.status.value, res.objective, res.peak_memory_bytes,
                         time.perf_counter() - t0))
            if res.success and frac == 0.6 and method != "checkpoint-all":
                schedules.append((f"{method} @ {budget}", res.schedule))
    print(f"\n{'budget':>12} {'method':>18} {'status':>11} {'cost':>8} {'overhead':>9} {'peak':>6} {'time_s':>8}")
    for frac, budget, method, status, obj, peak, dt in rows:
        over = f"{obj / base.total_cost:.3f}x" if obj is not None else "-"
        print(f"{frac:>5.1f}x={budget:<5d} {method:>18} {status:>11} {obj if obj is not None else '-':>8} "
              f"{over:>9} {peak if peak is not None else '-':>6} {dt:>8.3f}")
    plan = make_plan(graph, schedules[-1][1])
    rep = replay(graph, plan)
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump({"graph": graph.name, "schedule": schedules[-1][0], "replayed_peak_bytes": rep.peak_memory_bytes,
                   "plan": plan.to_dict()}, f)
    graph.save(os.path.join(out, "graph.json"))
    plot_memory_timeline(graph, schedules, os.path.join(out, "memory_timeline.png"))
    print(f"\nwrote {out}/graph.json, {out}/plan.json ({len(plan)} statements, replayed peak "
          f"{rep.peak_memory_bytes} bytes), {out}/memory_timeline.png")
    return 0


def _cmd_solve(args: argparse.Namespace) -> int:
    from . import solve

    graph = load_graph_arg(args.graph)
    budget = parse_budget(args.budget, graph)
    options = json.loads(args.options) if args.options else {}
    res = solve(graph, budget, method=args.method, **options)
    print(json.dumps(res.to_dict(include_schedule=args.schedule), indent=2))
    return 0 if res.success else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="remat", description="Tensor rematerialization planner.")
    p.add_argument("-v", "--verbose", action="store_true", help="log solver progress")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="solve a built-in graph at several budgets, write a plan and plots")
    d.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    d.add_argument("--layers", type=int, default=8, help="forward layers of the linear demo graph (default: 8)")
    d.set_defaults(fn=_cmd_demo)
    s = sub.add_parser("solve", help="solve one graph at one budget; prints the result as JSON")
    s.add_argument("graph", help="a graph JSON file (remat or DTR format) or linear:N")
    s.add_argument("budget", help="bytes, 512MiB / 2GiB, or 0.6x of checkpoint-all's peak")
    s.add_argument("--method", default="checkpoint-all", help="method name (see `remat_core.available_methods()`)")
    s.add_argument("--options", default="", help="method options as a JSON object, e.g. '{\"time_limit_s\": 30}'")
    s.add_argument("--schedule", action="store_true", help="include the schedule in the JSON output")
    s.set_defaults(fn=_cmd_solve)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
