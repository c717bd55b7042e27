"""The ``remat`` command.

Sub-commands:

* ``solve``: one graph, one budget, one method; prints the result as JSON.
* ``sweep``: one graph, many budgets and methods, in parallel (local processes
  or Dask), resumable through a JSON-lines file; prints the cost table and the
  approximation ratios, optionally plots the trade-off curves.
* ``max-batch``: the largest batch size that fits a budget at bounded cost.
* ``plot``: trade-off curves of a sweep file, R/S matrices or the memory
  timeline of a schedule.
* ``demo``: the end-to-end job behind ``make demo``.

Graphs are named by a zoo name (``vgg16``, see ``remat_core.zoo.list_zoo()``),
a JSON file (remat graph, zoo model or DTR format) or ``linear:N``. Budgets are
bytes (``123456``), binary or decimal units (``2GiB``, ``16GB``, ``512MiB``)
or a fraction of checkpoint-all's peak (``0.6x``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Sequence

from .errors import RematError
from .graph import Graph
from .schedule import Schedule
from .simulate import simulate

__all__ = ["main", "build_parser", "load_graph_arg", "graph_factory_arg", "parse_budget"]

_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "B": 1}


class CLIError(ValueError):
    """A bad command-line value (printed as ``remat: error: ...``)."""


def graph_factory_arg(spec: str) -> Callable[[int], Graph] | None:
    """``batch_size -> Graph`` for a graph spec that scales with the batch, else ``None``.

    Zoo models (``vgg19``) and zoo model files scale; ``linear:N`` scales its
    node sizes and costs linearly; other files are fixed-batch graphs.
    """
    from .zoo import linear_graph
    from .zoo.models import SPEC_FORMAT, graph_from_spec, load_spec, zoo_graph

    if spec.startswith("linear:"):
        n = _int_arg(spec.split(":", 1)[1], "linear:N")
        return lambda b: linear_graph(n, cost=float(b), memory_bytes=b).replace(name=f"linear-{n}-b{b}")
    if os.path.exists(spec):
        with open(spec) as f:
            data = json.load(f)
        if data.get("format") == SPEC_FORMAT:
            return lambda b: graph_from_spec(data, batch_size=b)
        return None
    try:
        data = load_spec(spec)
    except ValueError as exc:
        raise CLIError(f"graph {spec!r} is neither a file, linear:N, nor a zoo graph ({exc})") from None
    if data.get("format") == SPEC_FORMAT:
        return lambda b: zoo_graph(spec, batch_size=b)
    return None


def load_graph_arg(spec: str, batch_size: int | None = None) -> Graph:
    """A graph from a zoo name, a JSON file (remat graph, zoo model or DTR format) or ``linear:N``.

    Raises
    ------
    CLIError
        If ``spec`` names nothing known, or ``batch_size`` does not apply.
    """
    from .graph import load_dtr_dag
    from .zoo import linear_graph
    from .zoo.models import SPEC_FORMAT, graph_from_spec, zoo_graph

    if spec.startswith("linear:"):
        if batch_size not in (None, 1):
            return graph_factory_arg(spec)(batch_size)
        return linear_graph(_int_arg(spec.split(":", 1)[1], "linear:N"))
    if os.path.exists(spec):
        with open(spec) as f:
            try:
                head = json.load(f)
            except json.JSONDecodeError as exc:
                raise CLIError(f"graph file {spec!r} is not valid JSON: {exc}") from None
        if head.get("format") == SPEC_FORMAT:
            return graph_from_spec(head, batch_size=batch_size or 1)
        if batch_size is not None:
            raise CLIError(f"graph file {spec!r} has a fixed batch size; drop --batch-size")
        if head.get("format") == "remat-graph":
            return Graph.from_dict(head)
        return load_dtr_dag(spec)
    try:
        return zoo_graph(spec, batch_size=batch_size)
    except ValueError as exc:
        raise CLIError(f"graph {spec!r} is neither a file, linear:N, nor a usable zoo graph: {exc}") from None


def _int_arg(text: str, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise CLIError(f"`{what}` must be an integer; got {text!r}") from None
    if v < 1:
        raise CLIError(f"`{what}` must be >= 1; got {v}")
    return v


def parse_budget(text: str, graph: Graph | None = None) -> int:
    """Budget in bytes from ``123456``, ``2.5GiB``, ``16GB``, ``512MiB`` or ``0.6x`` (of checkpoint-all's peak).

    Examples
    --------
    >>> parse_budget("2KiB"), parse_budget("1.5GB")
    (2048, 1500000000)
    >>> from remat_core.zoo import linear_graph
    >>> parse_budget("0.5x", linear_graph(4))
    3
    """
    from .simulate import checkpoint_all_peak_bytes

    t = str(text).strip()
    try:
        if t.endswith("x"):
            if graph is None:
                raise CLIError(f"budget {text!r} is relative to a graph; none given")
            value = float(t[:-1]) * checkpoint_all_peak_bytes(graph)
        else:
            value = None
            for suffix, mult in _UNITS.items():
                if t.endswith(suffix):
                    value = float(t[: -len(suffix)]) * mult
                    break
            if value is None:
                value = float(t)
    except ValueError:
        raise CLIError(f"budget {text!r} is not bytes, a size like 2GiB / 16GB, or a fraction like 0.6x") from None
    if not value >= 1:
        raise CLIError(f"budget {text!r} must be at least 1 byte")
    return int(value)


def _parse_budgets(text: str, graph: Graph) -> list[int]:
    return [parse_budget(x, graph) for x in text.split(",") if x.strip()]


def _json_arg(text: str, what: str) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"`{what}` must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise CLIError(f"`{what}` must be a JSON object; got {text!r}")
    return value


def _accepts(method: str, option: str) -> bool:
    from .solvers import get_method

    params = inspect.signature(get_method(method)).parameters
    return option in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _with_time_limit(method: str, options: dict, time_limit_s: float | None) -> dict:
    """Add ``time_limit_s`` to ``options`` when given and the method takes it."""
    if time_limit_s is not None and "time_limit_s" not in options and _accepts(method, "time_limit_s"):
        return {**options, "time_limit_s": time_limit_s}
    return options


def _methods_arg(text: str | None) -> list[str]:
    from .solvers import available_methods, get_method

    if not text or text == "all":
        return available_methods()
    methods = [m.strip() for m in text.split(",") if m.strip()]
    for m in methods:
        get_method(m)
    return methods


def _fmt_bytes(x: float | None) -> str:
    if x is None:
        return "-"
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {unit}"
    return f"{int(x)} B"


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'budget':>14} {'method':>18} {'status':>11} {'overhead':>9} {'peak':>14} {'gap':>7} {'time_s':>8}")
    for r in rows:
        over = f"{r['objective'] / r['base_cost']:.4f}" if r["objective"] is not None and r["base_cost"] else "-"
        gap = "-"
        if r["objective"] is not None and r.get("lower_bound") is not None and r["objective"] > 0:
            gap = f"{max(0.0, 1 - r['lower_bound'] / r['objective']):.1%}"
        print(f"{_fmt_bytes(r['budget_bytes']):>14} {r['method']:>18} {r['status']:>11} {over:>9} "
              f"{_fmt_bytes(r['peak_memory_bytes']):>14} {gap:>7} {r['solve_time_s']:>8.2f}")


def _print_ratios(res, reference: str) -> dict | None:
    try:
        ratios = res.approximation_ratios(reference=reference)
    except ValueError as exc:
        print(f"\n(no approximation ratios: {exc})")
        return None
    print(f"\napproximation ratio vs {reference} (geometric mean of cost / optimal over budgets):")
    for m, s in ratios.items():
        gm = f"{s['geomean']:.4f}" if s["geomean"] is not None else "-"
        print(f"  {m:>18}: {gm}  (n={s['count']}, infeasible where {reference} fits: {s['infeasible']}"
              f"{'' if s['exact'] else ', vs lower bound'})")
    return ratios


# ---------------------------------------------------------------- commands
def _cmd_solve(args: argparse.Namespace) -> int:
    from . import solve

    graph = load_graph_arg(args.graph, args.batch_size)
    budget = parse_budget(args.budget, graph)
    options = _with_time_limit(args.method, _json_arg(args.options, "--options"), args.time_limit)
    res = solve(graph, budget, method=args.method, **options)
    text = json.dumps(res.to_dict(include_schedule=args.schedule), indent=2, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot and res.schedule is not None:
        from .plot import plot_schedule_matrices

        plot_schedule_matrices(graph, res.schedule, args.plot)
    return 0 if res.success else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .plot import plot_tradeoff_curves
    from .sweep import budget_grid, sweep

    graph = load_graph_arg(args.graph, args.batch_size)
    budgets = _parse_budgets(args.budgets, graph) if args.budgets else budget_grid(graph, args.num)
    methods = _methods_arg(args.methods)
    per_method = _json_arg(args.options, "--options")
    options = {m: _with_time_limit(m, dict(per_method.get(m, {})), args.time_limit) for m in methods}
    res = sweep(graph, budgets, methods, out=args.out, scheduler=args.scheduler, n_workers=args.workers,
                method_options={m: o for m, o in options.items() if o}, progress=not args.no_progress)
    ratios = None
    if args.json:
        try:
            ratios = res.approximation_ratios(reference=args.reference)
        except ValueError:
            ratios = None
        print(json.dumps({"graph": graph.name, "rows": res.table(), "approximation_ratios": ratios,
                          "computed": res.computed, "reused": res.reused}, indent=1, default=str))
    else:
        print(f"graph: {graph!r}; {res.computed} solves computed, {res.reused} reused")
        _print_table(res.table())
        _print_ratios(res, args.reference)
    if args.plot:
        plot_tradeoff_curves(res, args.plot)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0


def _cmd_max_batch(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .batch import max_batch_size

    factory = graph_factory_arg(args.graph)
    if factory is None:
        raise CLIError(f"graph {args.graph!r} has a fixed batch size; max-batch needs a zoo model or linear:N")
    budget = parse_budget(args.budget, None)
    options = _with_time_limit(args.method, _json_arg(args.options, "--options"), args.time_limit)
    bar = tqdm(desc=f"max-batch {args.method}", unit="probe", disable=args.no_progress, leave=False)

    def graph_fn(b: int) -> Graph:
        bar.set_postfix(batch=b)
        bar.update()
        return factory(b)

    try:
        res = max_batch_size(graph_fn, budget, method=args.method, cost_cap=args.cost_cap,
                             max_batch=args.max_batch, **options)
    finally:
        bar.close()
    out = res.to_dict()
    out["graph"] = args.graph
    print(json.dumps(out, indent=1, default=str))
    return 0 if res.batch_size > 0 else 1


def _cmd_plot(args: argparse.Namespace) -> int:
    from . import solve
    from .plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves
    from .sweep import load_sweep

    if args.kind == "curves":
        if not os.path.exists(args.source):
            raise CLIError(f"sweep file {args.source!r} does not exist")
        plot_tradeoff_curves(load_sweep(args.source), args.out, graph=args.graph_key)
    else:
        if args.budget is None:
            raise CLIError(f"`remat plot {args.kind}` needs a budget")
        graph = load_graph_arg(args.source, args.batch_size)
        budget = parse_budget(args.budget, graph)
        methods = _methods_arg(args.method)
        schedules = []
        for m in methods:
            res = solve(graph, budget, method=m, **_with_time_limit(m, {}, args.time_limit))
            if res.schedule is None:
                print(f"{m}: {res.status.value} ({res.message})", file=sys.stderr)
                continue
            schedules.append((m, res.schedule))
        if not schedules:
            raise CLIError(f"no method found a schedule within {budget} bytes")
        if args.kind == "schedule":
            plot_schedule_matrices(graph, schedules[0][1], args.out, title=None)
        else:
            plot_memory_timeline(graph, schedules, args.out, budget_bytes=budget)
    print(f"wrote {args.out}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .plan import make_plan, replay
    from .plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves
    from .simulate import checkpoint_all_peak_bytes
    from .solvers import available_methods
    from .sweep import sweep

    out = args.out
    os.makedirs(out, exist_ok=True)
    graph = load_graph_arg(args.graph, args.batch_size)
    base = simulate(graph, Schedule.checkpoint_all(graph))
    peak = checkpoint_all_peak_bytes(graph)
    print(f"graph: {graph!r}")
    print(f"checkpoint-all: cost {base.total_cost:.6g}, peak {_fmt_bytes(peak)} "
          f"(of which {_fmt_bytes(graph.fixed_bytes)} parameters, gradients and inputs)")
    fractions = [float(x) for x in args.fractions.split(",")]
    budgets = sorted({int(graph.fixed_bytes + f * (peak - graph.fixed_bytes)) for f in fractions}, reverse=True)
    methods = _methods_arg(args.methods) if args.methods else available_methods()
    # methods that do not apply to this graph (chain-only methods on a DAG) are noted and left out
    from . import solve as _solve
    from .errors import GraphValidationError

    applicable = []
    for m in methods:
        try:
            _solve(graph, peak, method=m, **_with_time_limit(m, {}, 1.0))
            applicable.append(m)
        except GraphValidationError as exc:
            print(f"not applicable: {m} ({str(exc).split(': ', 1)[0]})")
    methods = applicable
    options = {m: _with_time_limit(m, {}, args.time_limit) for m in methods}
    print(f"budgets: {', '.join(_fmt_bytes(b) for b in budgets)} (fixed bytes + {args.fractions} x activations)")
    print(f"methods: {', '.join(methods)}\n")
    t0 = time.perf_counter()
    if not args.resume and os.path.exists(os.path.join(out, "sweep.jsonl")):
        os.remove(os.path.join(out, "sweep.jsonl"))
    res = sweep(graph, budgets, methods, out=os.path.join(out, "sweep.jsonl"), scheduler=args.scheduler,
                n_workers=args.workers, method_options={m: o for m, o in options.items() if o},
                progress=not args.no_progress)
    _print_table(res.table())
    reference = "ilp" if "ilp" in methods else "checkpoint-all"
    _print_ratios(res, reference)
    print(f"\nsweep: {res.computed} solves computed, {res.reused} reused, {time.perf_counter() - t0:.1f} s")

    written = [os.path.join(out, "sweep.jsonl")]
    for ext in ("png", "svg"):
        p = os.path.join(out, f"tradeoff.{ext}")
        plot_tradeoff_curves(res, p)
        written.append(p)
    # the schedule at the tightest budget where the preferred method succeeded
    from . import solve

    preferred = [m for m in ("ilp", "lp-rounding") if m in methods] + [m for m in methods if m != "checkpoint-all"]
    chosen = None
    for m in preferred + ["checkpoint-all"]:
        ok = [r for r in res.rows if r["method"] == m and r["objective"] is not None]
        if ok:
            b = min(r["budget_bytes"] for r in ok)
            chosen = (m, b)
            break
    schedules = [("checkpoint-all", Schedule.checkpoint_all(graph))]
    if chosen is not None and chosen[0] != "checkpoint-all":
        r = solve(graph, chosen[1], method=chosen[0], **options.get(chosen[0], {}))
        if r.schedule is not None:
            schedules.append((f"{chosen[0]} @ {_fmt_bytes(chosen[1])}", r.schedule))
    label, sched = schedules[-1]
    plan = make_plan(graph, sched)
    rep = replay(graph, plan)
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump({"graph": graph.name, "schedule": label, "replayed_peak_bytes": rep.peak_memory_bytes,
                   "plan": plan.to_dict()}, f)
    graph.save(os.path.join(out, "graph.json"))
    written += [os.path.join(out, "plan.json"), os.path.join(out, "graph.json")]
    for ext in ("png", "svg"):
        p = os.path.join(out, f"schedule_matrices.{ext}")
        plot_schedule_matrices(graph, sched, p, title=f"{graph.name}: {label}")
        q = os.path.join(out, f"memory_timeline.{ext}")
        plot_memory_timeline(graph, schedules, q, budget_bytes=chosen[1] if chosen else None)
        written += [p, q]
    print(f"plan of {label}: {len(plan)} statements, replayed peak {_fmt_bytes(rep.peak_memory_bytes)}")
    print("wrote " + ", ".join(written))
    return 0


# ------------------------------------------------------------------ parser
_GRAPH_HELP = ("graph: a zoo name (vgg16, vgg19, mobilenet, resnet50, unet, fcn8, segnet, ...; see "
               "remat_core.zoo.list_zoo()), a JSON file (remat graph, zoo model or DTR format) or linear:N")
_BUDGET_HELP = "bytes, a size (512MiB, 2GiB, 16GB) or a fraction of checkpoint-all's peak (0.6x)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``remat`` command."""
    p = argparse.ArgumentParser(
        prog="remat", description="Tensor rematerialization planner: solve, sweep budgets, find the maximum "
        "batch size and plot schedules of training graphs.", epilog="Run `remat COMMAND --help` for each command.")
    p.add_argument("-v", "--verbose", action="store_true", help="log solver progress (INFO level)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("solve", help="solve one graph at one budget; prints the result as JSON",
                       description="Solve one graph at one budget with one method and print the RematResult as "
                       "JSON (exit status 1 if no schedule was found).")
    s.add_argument("graph", help=_GRAPH_HELP)
    s.add_argument("budget", help="memory budget, total bytes including parameters: " + _BUDGET_HELP)
    s.add_argument("--method", default="checkpoint-all", help="method name (see remat_core.available_methods())")
    s.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models (default 1)")
    s.add_argument("--options", default="", help="method options as a JSON object, e.g. '{\"time_limit_s\": 30}'")
    s.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    s.add_argument("--schedule", action="store_true", help="include the schedule in the JSON output")
    s.add_argument("--out", default=None, help="also write the JSON to this file")
    s.add_argument("--plot", default=None, help="write the R/S matrices of the schedule to this PNG/SVG file")
    s.set_defaults(fn=_cmd_solve)

    w = sub.add_parser("sweep", help="solve one graph at many budgets with many methods (parallel, resumable)",
                       description="Solve a graph at several budgets with several methods in parallel, print the "
                       "cost table and the approximation ratios (the paper's Figure 5 and Table 2).")
    w.add_argument("graph", help=_GRAPH_HELP)
    w.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models (default 1)")
    w.add_argument("--budgets", default=None, help="comma-separated budgets, each " + _BUDGET_HELP +
                   " (default: --num budgets from the lower bound to checkpoint-all's peak)")
    w.add_argument("--num", type=int, default=8, help="number of budgets when --budgets is not given (default 8)")
    w.add_argument("--methods", default="all", help="comma-separated method names (default: all registered)")
    w.add_argument("--options", default="", help="per-method options as JSON, e.g. '{\"ilp\": {\"mip_gap\": 0.01}}'")
    w.add_argument("--time-limit", type=float, default=None, help="time_limit_s for every method that takes one")
    w.add_argument("--out", default=None, help="JSON-lines results file; rerunning with the same file resumes")
    w.add_argument("--scheduler", default=None, help="where solves run: local (process pool, default), serial, "
                   "embedded (a Dask LocalCluster) or a Dask scheduler address such as tcp://host:8786")
    w.add_argument("--workers", type=int, default=None, help="parallel workers (default: CPU count)")
    w.add_argument("--reference", default="ilp", help="method whose costs are optimal for the ratios (default ilp)")
    w.add_argument("--plot", default=None, help="write the budget-vs-overhead curves to this PNG/SVG file")
    w.add_argument("--json", action="store_true", help="print rows and ratios as JSON instead of a table")
    w.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    w.set_defaults(fn=_cmd_sweep)

    m = sub.add_parser("max-batch", help="largest batch size that fits a budget at bounded cost",
                       description="Find the largest batch size whose training step fits the budget with a cost "
                       "of at most one extra forward pass (Checkmate eq. 10), by searching over batch sizes.")
    m.add_argument("graph", help="a zoo model (vgg19, mobilenet, unet, ...), a zoo model JSON file or linear:N")
    m.add_argument("--budget", default="16GB", help="memory budget in total bytes (default 16GB = 16e9 bytes, the paper's V100): "
                   "bytes or a size such as 16GB / 12GiB")
    m.add_argument("--method", default="checkpoint-all", help="method name (default checkpoint-all)")
    m.add_argument("--cost-cap", type=float, default=None, help="cost cap as a factor of the cost without "
                   "recomputation (default: one extra forward pass, eq. 10)")
    m.add_argument("--max-batch", type=int, default=1 << 16, help="largest batch size to try (default 65536)")
    m.add_argument("--options", default="", help="method options as a JSON object")
    m.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    m.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    m.set_defaults(fn=_cmd_max_batch)

    pl = sub.add_parser("plot", help="plot sweep curves, R/S matrices or a memory timeline",
                        description="curves SWEEP.jsonl: budget vs overhead for every method of a sweep file. "
                        "schedule GRAPH BUDGET: the R and S matrices of a method's schedule (paper Figure 7). "
                        "timeline GRAPH BUDGET: simulated memory over time for one or more methods.")
    pl.add_argument("kind", choices=["curves", "schedule", "timeline"], help="what to plot")
    pl.add_argument("source", help="sweep JSON-lines file (curves) or graph (schedule, timeline)")
    pl.add_argument("budget", nargs="?", default=None, help="budget for schedule/timeline: " + _BUDGET_HELP)
    pl.add_argument("-o", "--out", required=True, help="output file; .png or .svg")
    pl.add_argument("--method", default="checkpoint-all", help="method(s), comma-separated for timeline")
    pl.add_argument("--batch-size", type=int, default=None, help="batch size for zoo models")
    pl.add_argument("--time-limit", type=float, default=None, help="time_limit_s for methods that take one")
    pl.add_argument("--graph-key", default=None, help="for curves: which graph, when the file holds several")
    pl.set_defaults(fn=_cmd_plot)

    d = sub.add_parser("demo", help="solve a zoo model at several budgets with every method, write a plan and plots",
                       description="The end-to-end job behind `make demo`: sweep a zoo model over budgets with the "
                       "MILP, the LP rounding approximation and the baselines, print the table and the ratios, "
                       "write the trade-off curves, R/S matrices, memory timeline and an execution plan.")
    d.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    d.add_argument("--graph", default="vgg16", help="graph (default vgg16): " + _GRAPH_HELP)
    d.add_argument("--batch-size", type=int, default=32, help="batch size for zoo models (default 32)")
    d.add_argument("--fractions", default="1.0,0.9,0.8,0.7,0.6,0.5",
                   help="budgets as fixed bytes + FRACTION x checkpoint-all's activation memory")
    d.add_argument("--methods", default=None, help="comma-separated methods (default: all registered)")
    d.add_argument("--time-limit", type=float, default=30.0, help="time_limit_s for the MILP (default 30)")
    d.add_argument("--scheduler", default=None, help="local (default), serial, embedded or a Dask address")
    d.add_argument("--workers", type=int, default=None, help="parallel workers (default: CPU count)")
    d.add_argument("--resume", action="store_true", help="reuse the rows of an earlier demo_out/sweep.jsonl")
    d.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    d.set_defaults(fn=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``remat`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    for name in ("batch_size", "workers", "num", "max_batch"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {v}")
    try:
        return args.fn(args)
    except (CLIError, RematError, ValueError, TypeError) as exc:
        if args.verbose:
            raise
        print(f"remat: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
