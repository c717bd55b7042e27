"""The end-to-end demo behind ``make demo`` (``remat demo``).

1. Train a small transformer and a CNN (:mod:`remat_torch.models`) for a few
   steps under a memory budget well below what they need without
   rematerialization, and print for each: the budget, the peak of the plan
   that recomputes nothing ("no remat (keep all)", the core's ``checkpoint-all``),
   the plan's predicted and *measured* peak, the step time against eager
   PyTorch, what ``torch.utils.checkpoint`` gives at that memory, and the
   solve time.
2. Sweep a zoo model's budgets from the hard lower bound (no schedule exists
   below it) to the no-remat peak with every method that applies.
3. Write the plots: the trade-off curves of the sweep, the R/S matrices and
   the memory timeline of the transformer's plan.

Operators' temporary memory is measured while tracing (``workspace="measure"``),
so the plan's predicted peak covers it. Peaks are measured with :class:`remat_torch.meter.AllocatorMeter` (the c10
CPU allocator's events) around one training step, plus the parameters and
inputs that exist before the step: the same total the budget counts.

Run ``remat demo --help`` for the options; ``python -m remat_torch.demo``
does the same.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch

from remat_core import available_methods, checkpoint_all_peak_bytes
from remat_core.units import budget_fraction, format_bytes, min_budget_bytes

from . import BudgetInfeasibleError, rematerialize
from .meter import AllocatorMeter
from .models import TransformerLM, mid_cnn

__all__ = ["run_demo", "main", "add_demo_command"]

#: What the demo calls methods in its output: the core's ``checkpoint-all`` keeps every activation (no
#: rematerialization), the opposite of what PyTorch users call checkpointing.
DISPLAY_NAMES = {"checkpoint-all": "no remat (keep all)"}


def _display(method: str) -> str:
    return DISPLAY_NAMES.get(method, method)


class _WithLoss(torch.nn.Module):
    """A model and its training loss (cross-entropy against fixed labels) as one module.

    The loss is part of what :func:`rematerialize` plans, so the predicted peak
    covers its temporaries too (the logits' softmax is as large as the logits).
    """

    def __init__(self, net: torch.nn.Module, labels: torch.Tensor):
        super().__init__()
        self.net = net
        self.register_buffer("labels", labels)

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.labels.reshape(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(self.net(x))


def _models(seed: int = 0) -> list[tuple[str, torch.nn.Module, torch.Tensor, Callable, tuple[int, ...]]]:
    """(name, model with its loss, input, loss with checkpoint_sequential(k), the k to try) of the two models."""
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(seed)
    lm = _WithLoss(TransformerLM(vocab=512, dim=128, heads=4, n_layers=4, seq_len=128, p_drop=0.0),
                   torch.randint(0, 512, (8, 128)))
    tokens = torch.randint(0, 512, (8, 128))

    def lm_ckpt(model, x, k):
        net = model.net
        h = net.embed(x) + net.pos[:, : x.shape[1]]
        h = checkpoint_sequential(net.blocks, k, h, use_reentrant=False)
        return model.loss(net.head(net.ln(h)))

    cnn = _WithLoss(mid_cnn(), torch.randint(0, 10, (16,)))
    images = torch.randn(16, 3, 32, 32)

    def cnn_ckpt(model, x, k):
        return model.loss(checkpoint_sequential(model.net, k, x, use_reentrant=False))

    return [("transformer (4 blocks, dim 128, 8 x 128 tokens)", lm, tokens, lm_ckpt, (1, 2, 4)),
            ("CNN (VGG-like, BatchNorm, 16 x 3 x 32 x 32)", cnn, images, cnn_ckpt, (1, 2, 4, 8))]


def _step(model, x, forward=None) -> float:
    model.zero_grad(set_to_none=True)
    loss = forward(model, x) if forward else model(x)
    loss.backward()
    return float(loss.detach())


def _peak(model, x, outside: int, forward=None) -> int:
    """Total bytes at the peak of one training step: the allocator's rise plus what existed before it."""
    model.zero_grad(set_to_none=True)
    with AllocatorMeter() as meter:
        _step(model, x, forward)
    return int(meter.peak_bytes) + outside


def _times(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median seconds of each function, run interleaved (the machine's drift falls on all alike)."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def _train_one(name, model, x, ckpt_forward, segments, fraction: float, method: str, steps: int, time_limit_s: float,
               reps: int) -> dict[str, Any]:
    outside = sum(t.nbytes for t in [*model.parameters(), *model.buffers(), x])
    eager = copy.deepcopy(model)
    t0 = time.perf_counter()
    note = ""
    try:
        rm = rematerialize(copy.deepcopy(model), x, budget=fraction, method=method, time_limit_s=time_limit_s,
                           workspace="measure")
    except BudgetInfeasibleError as exc:
        if not exc.min_budget_bytes:
            raise
        # below what any plan can reach: the error says how low a budget can go; take 10% above that
        budget = int(exc.min_budget_bytes * 1.1)
        note = (f"{fraction:g} of activation memory is below the smallest feasible budget "
                f"{format_bytes(exc.min_budget_bytes)}; 10% above it instead")
        rm = rematerialize(copy.deepcopy(model), x, budget=budget, method=method, time_limit_s=time_limit_s,
                           workspace="measure")
    plan_s = time.perf_counter() - t0
    graph = rm.extracted.graph
    budget = rm.result.budget_bytes
    opt = torch.optim.Adam(rm.parameters(), lr=2e-3)
    losses = []
    for _ in range(steps):
        losses.append(_step(rm, x))
        opt.step()
    _step(eager, x)
    measured = _peak(rm, x, outside)
    eager_peak = _peak(eager, x, outside)
    # torch.utils.checkpoint: every segment count measured; at this budget, the fewest segments (the least
    # recomputation) whose measured peak fits
    ckpt = {}
    for k in segments:
        m = copy.deepcopy(model)
        fwd = (lambda mm, xx, k=k: ckpt_forward(mm, xx, k))
        _step(m, x, fwd)
        ckpt[k] = (m, fwd, _peak(m, x, outside, fwd))
    best = next((k for k, v in ckpt.items() if v[2] <= budget), None)
    # remat's smallest plan: the smallest budget a method finds (what torch.utils.checkpoint cannot reach)
    try:
        rm.replan(budget="1B")   # below every floor (a zero budget is refused outright, naming no smallest)
        smallest = None  # pragma: no cover - 1 byte is below the gradients' floor on these models
    except BudgetInfeasibleError as exc:
        smallest = exc.min_budget_bytes
    low_rm = None
    if smallest:
        try:
            low_rm = rm.replan(budget=int(smallest))
            _step(low_rm, x)
            smallest = (int(smallest), _peak(low_rm, x, outside))
        except BudgetInfeasibleError:
            smallest, low_rm = None, None
    fns = {"eager": lambda: _step(eager, x), "remat": lambda: _step(rm, x)}
    if best is not None:
        fns["ckpt"] = lambda: _step(ckpt[best][0], x, ckpt[best][1])
    t = _times(fns, reps)
    return {
        "name": name, "nodes": graph.n, "budget": budget, "fraction": budget_fraction(graph, budget),
        "checkpoint_all_peak": checkpoint_all_peak_bytes(graph), "eager_peak": eager_peak,
        "predicted": rm.predicted_peak_bytes, "measured": measured, "method": rm.result.method,
        "status": rm.result.status.value, "solve_s": rm.result.solve_time_s, "plan_s": plan_s,
        "eager_s": t["eager"], "remat_s": t["remat"], "losses": losses,
        "ckpt_best": (best, t["ckpt"], ckpt[best][2]) if best is not None else None,
        "ckpt_smallest": min((v[2], k) for k, v in ckpt.items()),
        "remat_smallest": smallest,
        "recomputations": rm.result.stats.get("recomputations"), "module": rm, "note": note,
    }


def _print_model(r: dict[str, Any]) -> None:
    over = r["remat_s"] / r["eager_s"] - 1
    note = ""
    if r["measured"] > r["budget"]:
        note = f" ({format_bytes(r['measured'] - r['budget'])} ABOVE the budget)"
    elif r["measured"] > r["predicted"]:
        note = f" ({format_bytes(r['measured'] - r['predicted'])} above the prediction, within the budget)"
    print(f"{r['name']}: {r['nodes']} nodes")
    if r["note"]:
        print(f"  ({r['note']})")
    print(f"  budget {format_bytes(r['budget'])} ({r['fraction']:.2f} of activation memory); without remat: "
          f"eager {format_bytes(r['eager_peak'])}, remat's plan with no recomputation (keep all) "
          f"{format_bytes(r['checkpoint_all_peak'])}")
    print(f"  remat {_display(r['method'])} ({r['status']}, solved in {r['solve_s']:.1f} s): peak predicted "
          f"{format_bytes(r['predicted'])}, measured {format_bytes(r['measured'])}; step "
          f"{1e3 * r['remat_s']:.0f} ms vs eager {1e3 * r['eager_s']:.0f} ms ({100 * over:+.0f}%){note}")
    if r["ckpt_best"] is not None:
        k, s, peak = r["ckpt_best"]
        print(f"  torch.utils.checkpoint at this memory: checkpoint_sequential({k}) peak {format_bytes(peak)}, "
              f"step {1e3 * s:.0f} ms ({100 * (s / r['eager_s'] - 1):+.0f}%)")
        if r["remat_s"] <= s:
            print("  at this memory remat's step is as fast or faster than torch.utils.checkpoint's")
        else:
            print(f"  at this memory remat's step is {100 * (r['remat_s'] / s - 1):.0f}% slower than "
                  "torch.utils.checkpoint's: the plan runs every aten op one by one from Python-generated code "
                  "(no fused kernels), which on a model this small costs more than the recomputation it saves")
    else:
        peak, k = r["ckpt_smallest"]
        print(f"  torch.utils.checkpoint at this memory: nothing fits (smallest: checkpoint_sequential({k}) "
              f"at {format_bytes(peak)})")
    ck_low, ck_k = r["ckpt_smallest"]
    if r.get("remat_smallest"):
        planned, measured_low = r["remat_smallest"]
        below = measured_low < ck_low
        print(f"  smallest memory: remat {format_bytes(measured_low)} measured (plan at {format_bytes(planned)}), "
              f"torch.utils.checkpoint {format_bytes(ck_low)} (checkpoint_sequential({ck_k}))"
              + (f": {format_bytes(ck_low - measured_low)} that only remat reaches" if below else
                 ": remat does not reach below it on this model"))
    print(f"  trained {len(r['losses'])} steps: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")


def _sweep_table(res, methods: list[str], budgets: list[int]) -> list[str]:
    cells = {(r["method"], r["budget_bytes"]): r for r in res.rows}
    width = max(len(_display(m)) for m in methods)
    unproven = False
    head = " " * width + "".join(f"{format_bytes(b):>10}" for b in budgets) + "   mean solve"
    lines = [head]
    for m in methods:
        row, times = [], []
        for b in budgets:
            r = cells.get((m, b))
            if r is None:
                row.append("?")
                continue
            times.append(r.get("solve_time_s") or 0.0)
            cell = (f"+{100 * (r['objective'] / r['base_cost'] - 1):.1f}%" if r.get("objective") is not None
                    else "-")
            if m == "ilp" and r.get("objective") is not None and r.get("status") != "optimal":
                cell += "*"  # stopped at its time limit: a feasible schedule, optimality not proven
                unproven = True
            row.append(cell)
        lines.append(f"{_display(m):<{width}}" + "".join(f"{c:>10}" for c in row)
                     + f"   {statistics.mean(times):8.2f} s")
    lines.append("(-: no schedule at that budget" + ("; *: ilp stopped at its time limit, not proven optimal"
                                                      if unproven else "") + ")")
    return lines


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo with the options of ``remat demo`` (see :func:`remat_core.cli.build_parser`)."""
    from remat_core.cli import load_graph_arg
    from remat_core.plot import plot_memory_timeline, plot_schedule_matrices, plot_tradeoff_curves
    from remat_core.sweep import applicable_methods, sweep
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(args.threads)
    fraction = args.fraction
    out = args.out
    method = "auto" if "auto" in available_methods() else "ilp"
    t_start = time.perf_counter()
    print(f"remat demo: training under a memory budget on {torch.get_num_threads()} CPU threads "
          f"(torch {torch.__version__.split('+')[0]}); peaks measured with the allocator\n")
    trained = []
    for name, model, x, ckpt_forward, segments in _models():
        r = _train_one(name, model, x, ckpt_forward, segments, fraction, method, args.steps, args.time_limit, reps=3)
        _print_model(r)
        trained.append(r)
    sys.stdout.flush()

    graph = load_graph_arg(args.graph, args.batch_size)
    low, culprit = min_budget_bytes(graph)
    high = checkpoint_all_peak_bytes(graph)
    n = max(2, args.num)
    budgets = sorted({int(low + (high - low) * i / (n - 1)) for i in range(n)})
    methods, skipped = applicable_methods(graph, available_methods())
    print(f"\nbudget sweep of {graph.name} ({graph.n} nodes): every schedule needs >= {format_bytes(low)} "
          f"(node {culprit!r}), no remat (keep all) needs {format_bytes(high)}; compute overhead per budget:")
    if skipped:
        print(f"(skipped {', '.join(skipped)}: chain-only methods, and {graph.name} is not a chain)")
    opts = {m: {"time_limit_s": args.time_limit} for m in methods if _takes_time_limit(m)}
    t0 = time.perf_counter()
    sweep_file = os.path.join(out, "sweep.jsonl")
    if os.path.exists(sweep_file):
        os.remove(sweep_file)
    res = sweep(graph, budgets, methods, out=sweep_file, n_workers=args.workers, method_options=opts,
                progress=not args.no_progress and sys.stderr.isatty())
    print("\n".join(_sweep_table(res, methods, budgets)))
    sweep_s = time.perf_counter() - t0

    lm = trained[0]["module"]
    g = lm.extracted.graph
    from remat_core import Schedule

    # the figure names methods as the table does, and says when ilp's points are not proven optimal
    from remat_core.sweep import SweepResult

    unproven = any(r["method"] == "ilp" and r.get("objective") is not None and r.get("status") != "optimal"
                   for r in res.rows)
    ilp_label = "ilp (time limit)" if unproven else "ilp"
    shown = SweepResult(rows=[{**r, "method": ilp_label if r["method"] == "ilp" else _display(r["method"])}
                              for r in res.rows])
    written = []
    for ext in ("png", "svg"):
        written.append(os.path.join(out, f"tradeoff.{ext}"))
        plot_tradeoff_curves(shown, written[-1], title=f"{graph.name}: compute overhead vs memory budget",
                             min_budget_bytes=low, show_lower_bound=ilp_label)
        written.append(os.path.join(out, f"schedule_matrices.{ext}"))
        plot_schedule_matrices(g, lm.result.schedule, written[-1],
                               title=f"transformer plan ({lm.result.method}) at {format_bytes(lm.result.budget_bytes)}: "
                                     f"{lm.result.stats.get('recomputations', 0)} recomputations")
        written.append(os.path.join(out, f"memory_timeline.{ext}"))
        plot_memory_timeline(g, [(_display("checkpoint-all"), Schedule.checkpoint_all(g)),
                                 (lm.result.method, lm.result.schedule)],
                             written[-1], budget_bytes=lm.result.budget_bytes,
                             title="transformer: memory during one training step")
    print(f"\nsweep {sweep_s:.0f} s, demo {time.perf_counter() - t_start:.0f} s; wrote "
          f"{', '.join(os.path.basename(p) for p in written if p.endswith('.png'))} (and .svg), sweep.jsonl "
          f"in {out}/")
    return 0


def _takes_time_limit(method: str) -> bool:
    import inspect

    from remat_core.solvers import get_method

    params = inspect.signature(get_method(method)).parameters
    return "time_limit_s" in params


def _cmd_demo(args: argparse.Namespace) -> int:
    from remat_core.cli import CLIError, check_out_dir

    text = args.fraction.strip()
    try:
        args.fraction = float(text[:-1] if text.endswith("x") else text)
    except ValueError:
        raise CLIError(f"`--fraction` must be a fraction of activation memory such as 0.4; got {text!r}") from None
    if not 0 < args.fraction <= 1:
        raise CLIError(f"`--fraction` of activation memory must be in (0, 1]; got {text!r}")
    check_out_dir(args.out, "--out")
    return run_demo(args)


def add_demo_command(subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``remat demo`` to the ``remat`` command (the ``remat.cli_commands`` entry point ``demo``)."""
    from remat_core.cli import GRAPH_HELP

    d = subparsers.add_parser(
        "demo", parents=[common], help="train models under a memory budget, sweep budgets, plot",
        description="The end-to-end job behind `make demo`: train a small transformer and a CNN "
        "for a few steps under a budget well below what they need without rematerialization, "
        "compare with torch.utils.checkpoint, sweep a zoo model's budgets from its lower bound "
        "and write the plots. Needs PyTorch.")
    d.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    d.add_argument("--graph", default="unet",
                   help="zoo graph of the budget sweep (default unet: the methods differ there): " + GRAPH_HELP)
    d.add_argument("--batch-size", type=int, default=32, help="batch size of the zoo graph (default 32)")
    d.add_argument("--fraction", default="0.4",
                   help="budget of the trained models as a fraction of their activation memory (default 0.4)")
    d.add_argument("--steps", type=int, default=3, help="training steps per model (default 3)")
    d.add_argument("--num", type=int, default=6, help="budgets in the sweep (default 6)")
    d.add_argument("--time-limit", type=float, default=5.0, help="time_limit_s of each solve (default 5)")
    d.add_argument("--workers", type=int, default=None, help="parallel workers of the sweep (default: CPU count)")
    d.add_argument("--threads", type=int, default=1, help="torch threads for training (default 1: steady timings "
                   "on a shared machine)")
    d.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    d.set_defaults(fn=_cmd_demo)


def main(argv: list[str] | None = None) -> int:
    """``python -m remat_torch.demo [options]``: the same as ``remat demo``."""
    from remat_core.cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
