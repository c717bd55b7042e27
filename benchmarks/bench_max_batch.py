"""Maximum batch size at a 16 GB budget with the FLOP cost model (Checkmate section 6.4, Figure 6).

For each (model, method) pair, :func:`remat_core.max_batch_size` searches the
largest batch whose layer-level Keras training graph (``remat_core.zoo``) has
a schedule within 16e9 bytes (parameters, their gradients and the input batch
included) costing at most one extra forward pass (eq. 10). "Checkmate" is the
MILP (``ilp``) and the LP rounding approximation (``lp-rounding``); methods
that are not registered in this build are reported as such.

Two more tables explain the differences from the paper:

* the hard ceiling of every model (:func:`remat_core.batch.batch_size_upper_bound`:
  above it, computing the largest node alone exceeds the budget, so no method
  of any kind fits), in our memory accounting and in Checkmate's (parameters
  and their gradients resident, the input batch not counted), next to the
  checkpoint-all schedule of Checkmate's code (every forward value kept until
  the end of the backward pass);
* ``lp-rounding`` and ``ilp`` rerun in Checkmate's accounting.

The MILP's search starts at the batch ``lp-rounding`` reached (the search
assumes smaller batches fit; every probe is a real MILP solve), warm-started
from lp-rounding's schedule there, and falls back to a search from 1 when the
MILP does not fit there.

Usage::

    .venv/bin/python benchmarks/bench_max_batch.py            # full (120 s per solve)
    .venv/bin/python benchmarks/bench_max_batch.py --quick    # 20 s per solve, no MILP on MobileNet
    .venv/bin/python benchmarks/bench_max_batch.py --resume --redo mobilenet:ilp   # rerun some searches
    .venv/bin/python benchmarks/bench_max_batch.py --from-json                     # only rewrite the README
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _report  # noqa: E402

from remat_core import (  # noqa: E402
    RematResult, SolveStatus, available_methods, max_batch_size, optimal_r_given_s, solve,
)
from remat_core.batch import batch_size_upper_bound, forward_pass_cost_cap  # noqa: E402
from remat_core.simulate import simulate  # noqa: E402
from remat_core.solvers import get_method, register_method  # noqa: E402
from remat_core.zoo import zoo_graph  # noqa: E402
from remat_core.zoo.models import load_spec  # noqa: E402

BUDGET = 16 * 10**9  # the paper's V100: 16 GB (checkmate's platform_memory("p32xlarge"))

# the paper's Figure 6 (FLOP cost model, 16 GB)
# Chen et al.'s methods need the plain chain form (remat_core.chain); on our layer-level graphs (whose
# backward nodes also read their users' outputs) the paper's generalization to DAGs, ap-* (identical to Chen
# on a chain: every node of a chain is an articulation point), plays their role.
PAPER = {
    ("vgg19", "checkpoint-all"): 167, ("vgg19", "ap-sqrtn"): 197, ("vgg19", "ap-greedy"): 266,
    ("vgg19", "checkmate"): 289,
    ("mobilenet", "checkpoint-all"): 217, ("mobilenet", "checkmate"): 1105,
    ("unet", "checkpoint-all"): 16, ("unet", "checkmate"): 61,
}
PLAN = {
    "vgg19": ["checkpoint-all", "ap-sqrtn", "ap-greedy", "lp-rounding", "ilp"],
    "mobilenet": ["checkpoint-all", "ap-sqrtn", "ap-greedy", "lp-rounding", "ilp"],
    "unet": ["checkpoint-all", "ap-sqrtn", "ap-greedy", "lp-rounding", "ilp"],
}
BIG = {"mobilenet"}  # graphs where the MILP inside a batch search is skipped with --quick
CHECKMATE_CKPT_ALL = "checkmate-code-checkpoint-all"  # registered by this script only


def _options(method: str, time_limit_s: float, threads: int) -> dict:
    params = inspect.signature(get_method(method)).parameters
    out = {"time_limit_s": time_limit_s} if "time_limit_s" in params else {}
    if "threads" in params:
        out["threads"] = threads
    return out


def _graph_fn(model: str, accounting: str):
    """``batch -> Graph`` in our accounting, or Checkmate's: fixed = params + gradients, no input batch."""
    if accounting == "ours":
        return functools.partial(zoo_graph, model)
    fixed = 8 * int(load_spec(model)["params"])  # checkmate's cost_ram_fixed = 2 * 4 bytes * params
    return lambda b: zoo_graph(model, b).replace(fixed_bytes=fixed)


def _checkmate_code_checkpoint_all(graph, budget_bytes):
    """Checkpoint-all as Checkmate's code builds it (``gen_s_matrix_fixed_checkpoints(g, g.vfwd)``).

    Every forward value is kept from its computation to the end of the backward pass, every input of a
    node is kept into that node's stage, every backward value is kept until its last backward user; R
    is the cheapest R given that S. (Ours frees a forward value after its last backward use.)
    """
    n, m = graph.n, graph.meta["n_forward"]
    S = np.zeros((n, n), dtype=bool)
    for v in range(n):
        for u in graph.deps[v]:
            S[v, u] = True
            if u >= m and v >= m:  # an edge inside the backward part (the loss included)
                S[u + 1:v + 1, u] = True
    for i in range(m):
        S[i + 1:, i] = True
    sched = optimal_r_given_s(graph, S)
    sim = simulate(graph, sched, timeline=False)
    if sim.peak_memory_bytes > budget_bytes:
        return RematResult(SolveStatus.INFEASIBLE, message=f"peak {sim.peak_memory_bytes} bytes over the budget")
    return RematResult(SolveStatus.FEASIBLE, schedule=sched)


def _limit_note(res) -> str:
    """What stopped the search just above the maximum (the probe of batch_size + 1)."""
    nxt = [t for t in res.trace if t["batch_size"] == res.batch_size + 1]
    if res.hit_max_batch or not nxt:
        return ""
    t = nxt[0]
    if res.limited_by_lower_bound:
        return f"{t['batch_size']}: hard lower bound {t['lower_bound_bytes'] / 1e9:.3f} GB > 16 GB"
    if t["objective"] is not None and t["objective"] > t["cost_cap"] * (1 + 1e-9):
        note = f"{t['batch_size']}: cost {t['objective'] / t['cost_cap']:.3f} x cap ({t['status']})"
        if t.get("cost_lower_bound") is not None:
            lbr = t["cost_lower_bound"] / t["cost_cap"]
            note += f", proven >= {lbr:.3f} x cap" if lbr > 1 + 1e-9 else f", bound {lbr:.3f} x cap"
        return note
    return f"{t['batch_size']}: {t['status']} ({t['reason'][:100]})"


def _run(model, method, graph_fn, limit, threads, min_batch=1, cost_cap=None, **extra):
    opts = {**_options(method, limit, threads), **extra}
    res = max_batch_size(graph_fn, BUDGET, method=method, min_batch=min_batch, cost_cap=cost_cap, **opts)
    seeded = min_batch > 1
    if seeded and res.batch_size == 0:  # the MILP did not fit where lp-rounding did: search from 1
        res2 = max_batch_size(graph_fn, BUDGET, method=method, cost_cap=cost_cap, **opts)
        res2.trace[:0] = res.trace
        res2.time_s += res.time_s
        res, seeded = res2, False
    return res, seeded


def _ceilings(models) -> list:
    register_method(CHECKMATE_CKPT_ALL, _checkmate_code_checkpoint_all, overwrite=True)
    raw = []
    for model in models:
        spec = load_spec(model)
        ours, cm = _graph_fn(model, "ours"), _graph_fn(model, "checkmate")
        g1 = zoo_graph(model, 1)
        per_ex = g1.min_budget_lower_bound_bytes() - g1.fixed_bytes  # largest computation, bytes per example
        row = {
            "model": model, "params": int(spec["params"]),
            "input_bytes_per_example": 4 * int(spec["input_elements"]),
            "largest_computation_bytes_per_example": int(per_ex),
            "ceiling_ours": batch_size_upper_bound(ours, BUDGET),
            "ceiling_checkmate": batch_size_upper_bound(cm, BUDGET),
            "ckpt_all_ours": max_batch_size(ours, BUDGET, method="checkpoint-all").batch_size,
            "ckpt_all_checkmate_code": max_batch_size(cm, BUDGET, method=CHECKMATE_CKPT_ALL).batch_size,
        }
        raw.append(row)
    return raw


def _ceiling_table(ceil_raw, nocap) -> str:
    rows = []
    for row in ceil_raw:
        model = row["model"]
        nc = nocap.get(model)
        if nc is None:
            nc_txt = ""
        elif nc == "at ceiling":
            nc_txt = "(capped run already at the ceiling)"
        else:
            nc_txt = f"{nc['batch_size']} (overhead {nc['overhead']:.3f})" if nc["overhead"] else str(nc["batch_size"])
        rows.append([model, f"{row['params']:,}", f"{row['input_bytes_per_example'] / 1e6:.3f}",
                     f"{row['largest_computation_bytes_per_example'] / 1e6:.3f}", row["ceiling_ours"],
                     nc_txt, row["ceiling_checkmate"], PAPER.get((model, "checkmate"), ""),
                     row["ckpt_all_ours"], row["ckpt_all_checkmate_code"], PAPER.get((model, "checkpoint-all"), "")])
    return _report.table(
        ["model", "params", "input batch (MB / example)", "largest computation (MB / example)",
         "hard ceiling, ours", "lp-rounding without the cost cap, ours", "hard ceiling, Checkmate's accounting",
         "paper: Checkmate", "checkpoint-all, ours", "checkpoint-all of Checkmate's code, its accounting",
         "paper: checkpoint-all"], rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short time limits; skip the MILP on MobileNet")
    p.add_argument("--time-limit", type=float, default=None, help="time_limit_s per solve (default 120, quick 20)")
    p.add_argument("--threads", type=int, default=1, help="MILP solver threads (default 1)")
    p.add_argument("--models", default=",".join(PLAN), help="comma-separated models")
    p.add_argument("--checkmate-accounting", default=None,
                   help="models to rerun lp-rounding and ilp on in Checkmate's accounting "
                        "(default: all models; quick: vgg19; '' for none)")
    p.add_argument("--from-json", action="store_true",
                   help="only rewrite the README section from results/max_batch.json (of an interrupted run "
                        "given the same options); searches it lacks are marked as not run")
    p.add_argument("--resume", action="store_true",
                   help="reuse the searches in results/max_batch.json (same options) and run only the missing ones")
    p.add_argument("--redo", default="", help="with --resume: MODEL:METHOD pairs to run again (comma-separated)")
    args = p.parse_args(argv)
    limit = args.time_limit or (20.0 if args.quick else 120.0)
    models = args.models.split(",")
    if args.checkmate_accounting is None:
        cm_models = ["vgg19"] if args.quick else models
    else:
        cm_models = [m for m in args.checkmate_accounting.split(",") if m]
    have = set(available_methods())
    started = time.perf_counter()
    if args.from_json:
        return _render_from_json(args, models, cm_models, limit)
    ceil_raw = _ceilings(models)
    rows, raw, cm_rows, nocap = [], [], [], {}
    old: dict = {}
    if args.resume and os.path.exists(os.path.join(_report.RESULTS, "max_batch.json")):
        import json

        with open(os.path.join(_report.RESULTS, "max_batch.json")) as f:
            data = json.load(f)
        redo = {tuple(x.split(":")) for x in args.redo.split(",") if x}
        old = {(r["model"], r["method"], r["accounting"]): r for r in data["runs"]
               if (r["model"], r["method"]) not in redo}
        nocap.update(data.get("no_cost_cap", {}))
    reused = []

    def write(done: bool) -> None:
        timing = (f"Total run time {time.perf_counter() - started:.0f} s"
                  + ("." if done else " so far (run in progress: rows are added as they finish)."))
        if reused:
            timing += (f" Reused from an earlier run with the same options (`--resume`): {', '.join(reused)}; "
                       "their search times are that run's.")
        _write(args, limit, rows, cm_rows, ceil_raw, nocap, raw, timing)

    lp_max: dict[str, int] = {}

    def search(model: str, method: str, accounting: str):
        """One search (or the saved one); returns (result-like, seeded, warm-start batch)."""
        key = (model, method, accounting)
        if key in old:
            r = old[key]
            raw.append(r)
            reused.append(f"{model} {method}" + (" (Checkmate's accounting)" if accounting == "checkmate" else ""))
            res, seeded, warm = _Saved(r), r.get("seeded_at") is not None, r.get("warm_start_from")
        else:
            fn = _graph_fn(model, accounting)
            seed, warm, extra = 1, None, {}
            if method == "ilp" and lp_max.get(accounting + model, 0) > 1:
                # start at lp-rounding's maximum, warm-started from its schedule there (a schedule of one batch
                # is valid at every batch: the graphs differ only in sizes; the MILP ignores it where it does
                # not fit)
                seed = warm = lp_max[accounting + model]
                lp = solve(fn(warm), BUDGET, method="lp-rounding", time_limit_s=limit)
                if lp.success:
                    extra["warm_start"] = lp.schedule
                else:
                    warm = None
            res, seeded = _run(model, method, fn, limit, args.threads, seed, **extra)
            raw.append({"model": model, "method": method, "accounting": accounting,
                        "paper": PAPER.get((model, "checkmate" if method in ("ilp", "lp-rounding") else method), ""),
                        "seeded_at": seed if seeded else None, "warm_start_from": warm, **res.to_dict()})
        if method == "lp-rounding":
            lp_max[accounting + model] = res.batch_size
        return res, seeded, warm

    for model in models:
        for method in PLAN[model]:
            paper_key = "checkmate" if method in ("ilp", "lp-rounding") else method
            paper = PAPER.get((model, paper_key), "")
            if method not in have:
                rows.append([model, method, paper, "not registered", "", "", "", "", ""])
                continue
            if args.quick and method == "ilp" and model in BIG:
                rows.append([model, method, paper, "skipped (--quick)", "", "", "", "", ""])
                continue
            try:
                res, seeded, warm = search(model, method, "ours")
            except Exception as exc:  # a method that rejects the graph: reported, not fatal
                rows.append([model, method, paper, f"error: {type(exc).__name__}", "", "", "", "",
                             str(exc)[:120]])
                continue
            if method == "lp-rounding" and model not in nocap:
                if res.limited_by_lower_bound:
                    nocap[model] = "at ceiling"
                else:  # does memory or the cost cap stop it? the same search without the cap
                    nc, _ = _run(model, method, _graph_fn(model, "ours"), limit, args.threads,
                                 max(res.batch_size, 1), cost_cap=math.inf)
                    nocap[model] = {"batch_size": nc.batch_size, "overhead": nc.overhead,
                                    "limited_by_lower_bound": nc.limited_by_lower_bound, "time_s": nc.time_s,
                                    "trace": nc.trace}
                    print(f"{model:10s} {method:15s} without the cost cap: {nc.batch_size:5d}  ({nc.time_s:.1f} s)",
                          flush=True)
            rows.append(_row(model, method, paper, res, seeded, warm))
            print(f"{model:10s} {method:15s} paper {paper!s:>5}  ours {res.batch_size:5d}  ({res.time_s:.1f} s)",
                  flush=True)
            write(False)
    for model in cm_models:
        ceiling = next(r["ceiling_checkmate"] for r in ceil_raw if r["model"] == model)
        for method in ("lp-rounding", "ilp"):
            if method not in have or (args.quick and method == "ilp" and model in BIG):
                continue
            res, seeded, warm = search(model, method, "checkmate")
            r = _row(model, method, PAPER.get((model, "checkmate"), ""), res, seeded, warm)
            cm_rows.append([model, method, r[2], r[3], ceiling, r[4], r[6], r[7], r[8]])
            print(f"{model:10s} {method:15s} checkmate accounting: {res.batch_size:5d}  ({res.time_s:.1f} s)",
                  flush=True)
            write(False)
    write(True)
    return 0


def _write(args, limit, rows, cm_rows, ceil_raw, nocap, raw, timing: str) -> None:
    md = [
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}  ",
        f"Budget: 16 GB = 16e9 bytes in total (parameters + gradients + input batch + activations); cost cap: "
        f"one extra forward pass (eq. 10); per-solve time limit {limit:g} s where the method takes one, "
        f"MILP threads {args.threads}. {timing}",
        "",
        _report.table(["model", "method", "paper (Checkmate Fig. 6)", "paper / ckpt-all", "ours: max batch",
                       "ours / ckpt-all", "overhead at max", "status at max", "search time (s)",
                       "what stops batch max+1", "note"], _with_ratios(rows)),
        "",
        "Hard ceilings (no method can pass them) and checkpoint-all in both accountings:",
        "",
        _ceiling_table(ceil_raw, nocap),
    ]
    if cm_rows:
        md += ["", "`lp-rounding` and `ilp` in Checkmate's accounting (fixed bytes = parameters + gradients, "
                   "input batch not counted; same graphs, cost cap and time limit):", "",
               _report.table(["model", "method", "paper", "ours, Checkmate's accounting",
                              "hard ceiling, Checkmate's accounting", "overhead at max", "search time (s)",
                              "what stops batch max+1", "note"], cm_rows)]
    _report.write_section("max-batch", "\n".join(md) + "\n\n" + _explanation(ceil_raw, raw, nocap))
    _report.save_json("max_batch", {"ceilings": ceil_raw, "no_cost_cap": nocap, "runs": raw})


class _Saved:
    """A search read back from results/max_batch.json, with the attributes ``_row`` reads."""

    def __init__(self, d: dict):
        self.batch_size, self.overhead, self.time_s = d["batch_size"], d["overhead"], d["time_s"]
        self.trace, self.hit_max_batch = d["trace"], d["hit_max_batch"]
        self.limited_by_lower_bound = d["limited_by_lower_bound"]
        r = d.get("result")
        self.result = None if r is None else type("R", (), {"status": SolveStatus(r["status"])})()


def _render_from_json(args, models, cm_models, limit) -> int:
    import json

    with open(os.path.join(_report.RESULTS, "max_batch.json")) as f:
        data = json.load(f)
    ceil_raw, nocap, raw = data["ceilings"], data.get("no_cost_cap", {}), data["runs"]
    done = {(r["model"], r["method"], r["accounting"]): r for r in raw}
    rows, cm_rows, missing = [], [], []
    for model in models:
        for method in PLAN[model]:
            paper = PAPER.get((model, "checkmate" if method in ("ilp", "lp-rounding") else method), "")
            r = done.get((model, method, "ours"))
            if r is None:
                rows.append([model, method, paper, "not run", "", "", "", "", ""])
                missing.append(f"{model} {method}")
                continue
            rows.append(_row(model, method, paper, _Saved(r), r.get("seeded_at") is not None,
                             r.get("warm_start_from")))
    for model in cm_models:
        ceiling = next(c["ceiling_checkmate"] for c in ceil_raw if c["model"] == model)
        for method in ("lp-rounding", "ilp"):
            paper = PAPER.get((model, "checkmate"), "")
            r = done.get((model, method, "checkmate"))
            if r is None:
                cm_rows.append([model, method, paper, "not run", ceiling, "", "", "", ""])
                missing.append(f"{model} {method} (Checkmate's accounting)")
                continue
            x = _row(model, method, paper, _Saved(r), r.get("seeded_at") is not None, r.get("warm_start_from"))
            cm_rows.append([model, method, x[2], x[3], ceiling, x[4], x[6], x[7], x[8]])
    total = sum(r["time_s"] for r in raw) + sum(v["time_s"] for v in nocap.values() if isinstance(v, dict))
    timing = (f"Searches add up to {total:.0f} s. Rendered with `--from-json` from `results/max_batch.json`"
              + (f"; the run was stopped at its time box before: {', '.join(missing)} (\"not run\")." if missing
                 else "."))
    _write(args, limit, rows, cm_rows, ceil_raw, nocap, raw, timing)
    return 0


def _row(model, method, paper, res, seeded, warm=None) -> list:
    r = res.result
    status = r.status.value if r is not None else "-"
    notes = []
    # probes below the reported maximum's neighbour that found no schedule at all (heuristics are not
    # monotone in the batch; an MILP at its time limit may also stop without one)
    empty = [t for t in res.trace if not t["fits"] and t["status"] == "no_solution"]
    if empty:
        notes.append("no schedule at " + ", ".join(f"{t['batch_size']} ({t['reason'][:60]})" for t in empty))
    if seeded:
        notes.append(f"search started at lp-rounding's max ({res.trace[0]['batch_size']})"
                     + (", MILP warm-started from lp-rounding's schedule there" if warm else ""))
    return [model, method, paper, res.batch_size, f"{res.overhead:.3f}" if res.overhead else "-", status,
            f"{res.time_s:.1f}", _limit_note(res), "; ".join(notes)]


def _with_ratios(rows) -> list:
    """Insert the batch relative to checkpoint-all, the paper's and ours (the comparable quantity)."""
    base = {r[0]: r[3] for r in rows if r[1] == "checkpoint-all" and isinstance(r[3], int)}
    out = []
    for r in rows:
        r = list(r)
        ours_ratio = f"{r[3] / base[r[0]]:.2f}x" if isinstance(r[3], int) and base.get(r[0]) else ""
        pb = PAPER.get((r[0], "checkpoint-all"))
        paper_ratio = f"{r[2] / pb:.2f}x" if isinstance(r[2], int) and pb else ""
        r.insert(4, ours_ratio)
        r.insert(3, paper_ratio)
        out.append(r)
    return out


def _probe(raw, model, method, accounting="ours"):
    """The probe of batch max+1 of a run, or None."""
    for r in raw:
        if (r["model"], r["method"], r["accounting"]) == (model, method, accounting):
            nxt = [t for t in r["trace"] if t["batch_size"] == r["batch_size"] + 1]
            return r, (nxt[0] if nxt else None)
    return None, None


def _explanation(ceil_raw, raw, nocap) -> str:
    c = {r["model"]: r for r in ceil_raw}
    out = [
        "How to read this. The paper's \"Chen sqrt(n)\" and \"Chen greedy\" rows are compared with `ap-sqrtn` and "
        "`ap-greedy`: Chen's methods in `remat_core` accept only the plain chain form, and on a chain the "
        "articulation-point generalization is Chen's method. The paper's \"Checkmate\" row is compared with both "
        "`ilp` and `lp-rounding`. Graphs: Keras 3 re-extractions (`benchmarks/export_keras_zoo.py`) with the "
        "dependency rule of Checkmate's `dfgraph_from_keras` (a backward node reads its layer's output and the "
        "outputs and gradients of the layer's users), 4-byte values, backward = 2 x forward FLOPs; the U-Net is "
        "our re-implementation of `keras_segmentation`'s vgg_unet design (416x608, 19 classes). The memory "
        "accounting inside a stage is Checkmate's U recurrence (DESIGN.md), judged by our simulator.",
    ]
    if "vgg19" in c:
        v = c["vgg19"]
        out.append(
            f"**VGG19: why every method stops at the same batch.** The hard ceiling decides it. The largest "
            f"single computation is `grad/block1_conv1`: its inputs `block1_conv1`, `block1_conv2`, "
            f"`grad/block1_conv2` and its own output are 4 x 12.85 MB = "
            f"{v['largest_computation_bytes_per_example'] / 1e6:.2f} MB per example, on top of the fixed bytes "
            f"(parameters + gradients {8 * v['params'] / 1e9:.3f} GB, input batch "
            f"{v['input_bytes_per_example'] / 1e6:.3f} MB per example). At batch {v['ceiling_ours'] + 1} that "
            f"exceeds 16e9 bytes, so no schedule of any method fits (column \"what stops batch max+1\"), and a "
            f"method that reaches {v['ceiling_ours']} has found the true maximum. The paper's 289 is the same "
            f"ceiling in Checkmate's accounting: `dfgraph_from_keras` does not make the Keras input layer a node "
            f"and its `cost_ram_fixed` is parameters + gradients only (2 x 4 bytes x {v['params']:,}), so the "
            f"input batch is not counted; (16e9 - {8 * v['params']:,}) / "
            f"{v['largest_computation_bytes_per_example']:,} = "
            f"{(BUDGET - 8 * v['params']) / v['largest_computation_bytes_per_example']:.2f}, and the authors' "
            f"artifact notes (`mlsys20_artifact.md` in parasj/checkmate) quote the VGG19 max-batch MILP's "
            f"incumbent as 289.03459. In that accounting the ceiling is {v['ceiling_checkmate']}"
            + "".join(f"; our `{r['method']}` reaches {r['batch_size']}" for r in raw
                      if r["model"] == "vgg19" and r["accounting"] == "checkmate")
            + " (last table).")
    if c:
        parts = ", ".join(f"{m} {r['ckpt_all_checkmate_code']} (paper {PAPER.get((m, 'checkpoint-all'), '-')})"
                          for m, r in c.items())
        out.append(
            "**Checkpoint-all.** Checkmate's code builds checkpoint-all with `gen_s_matrix_fixed_checkpoints(g, "
            "g.vfwd)`: every forward value stays resident until the end of the backward pass. Our checkpoint-all "
            "frees a forward value after its last backward user, so it fits a larger batch. Checkmate's schedule "
            f"rebuilt on our graphs, in its accounting, gives {parts}. The artifact notes say the paper's "
            "checkpoint-all numbers were computed \"optimistically via a calculation that assumes activation "
            "memory scales linearly with batch size\", and that the code itself gives 164 on VGG19; its baseline "
            "script also tests batch sizes on a grid of step 8 (4, 12, 20, ...). The ratio to checkpoint-all "
            "therefore mixes two accountings; the hard ceilings and the last table compare like with like.")
    out.append(
        "**Chen baselines.** Our `ap-sqrtn` and `ap-greedy` take the cheapest member of their family (every "
        "segment count, every greedy `b`) that fits, and the search reads their maximum off exactly; the paper's "
        "Chen sqrt(n) is a single schedule, and its baseline batch sizes were tested on the step-8 grid. So ours "
        "are higher; on VGG19 they reach the hard ceiling too.")
    if "mobilenet" in c:
        m = c["mobilenet"]
        r, t = _probe(raw, "mobilenet", "lp-rounding")
        reach = ""
        if r is not None:
            reach = (f" Our `lp-rounding` reaches {r['batch_size']}" +
                     (" = the hard ceiling" if r.get("limited_by_lower_bound") else "") + ".")
        cm = [r for r in raw if r["model"] == "mobilenet" and r["accounting"] == "checkmate"]
        if cm:
            reach += (" In Checkmate's accounting " + " and ".join(f"`{r['method']}` reaches {r['batch_size']}"
                                                                for r in cm)
                      + f" ({cm[0]['batch_size'] / 1105:.2f}x the paper's 1105).")
        out.append(
            f"**MobileNet.** Hard ceiling {m['ceiling_ours']} in our accounting, {m['ceiling_checkmate']} in "
            f"Checkmate's; the paper's Checkmate reached 1105.{reach} The MILP's row equals lp-rounding's: it is "
            "warm-started from lp-rounding's schedule, and in 120 s it does not improve on it.")
    if "unet" in c:
        u = c["unet"]
        g1 = zoo_graph("unet", 1)
        cap_ratio = forward_pass_cost_cap(g1) / float(g1.cost.sum())
        txt = (f"**U-Net: 61 in the paper.** The cost cap (one extra forward pass) is {cap_ratio:.3f} x the "
               f"no-remat cost. The paper's 61 is again exactly the hard ceiling in Checkmate's "
               f"accounting ({u['ceiling_checkmate']}; {u['ceiling_ours']} in ours, with the input batch of "
               f"{u['input_bytes_per_example'] / 1e6:.2f} MB per example).")
        for method in ("lp-rounding", "ilp"):
            r, t = _probe(raw, "unet", method)
            if r is None or t is None:
                continue
            cap = t["cost_cap"]
            txt += (f" `{method}` stops at {r['batch_size']}: at batch {t['batch_size']} the hard bound "
                    f"({t['lower_bound_bytes'] / 1e9:.2f} GB) still fits, and the method returned "
                    f"{t['status']} with cost {t['objective'] / cap:.3f} x the cap"
                    if t["objective"] is not None else
                    f" `{method}` stops at {r['batch_size']}: at batch {t['batch_size']} it returned {t['status']}")
            if t["objective"] is not None and t.get("cost_lower_bound") is not None:
                lb = t["cost_lower_bound"] / cap
                txt += (f" and a proven cost lower bound of {lb:.3f} x the cap"
                        + (" (so that batch provably does not fit within one extra forward pass)." if lb > 1 + 1e-9
                           else " (the gap is open: the batch is not proven not to fit)."))
            else:
                txt += "."
        nc = nocap.get("unet")
        if isinstance(nc, dict):
            txt += (f" Without the cost cap the same `lp-rounding` search reaches {nc['batch_size']}"
                    + (" = the hard ceiling" if nc["limited_by_lower_bound"] else "")
                    + (f", at {nc['overhead']:.3f} x the no-remat cost" if nc["overhead"] else "")
                    + " (cap: one extra forward pass)"
                    + ("; so memory is not what stops the capped search" if nc["batch_size"] > u["ceiling_ours"] - 1
                       or nc["limited_by_lower_bound"] else "") + ".")
        txt += (" So what limits our U-Net is the cost cap of one extra forward pass together with the solver: "
                "the memory ceiling is not reached, and where the MILP's gap stays open at the time limit a better "
                "schedule may exist. The paper's max-batch MILP (`experiment_max_batchsize_ilp.py`) is a different "
                "program, maximizing the batch directly, solved by Gurobi with `TimeLimit: inf`.")
        out.append(txt)
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
