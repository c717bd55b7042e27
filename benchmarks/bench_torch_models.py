"""Hugging Face models under a memory budget: remat_torch (eager-executed and compiled) against HF
checkpointing and torch.compile's own ``activation_memory_budget``.

Run: ``.venv/bin/python benchmarks/bench_torch_models.py [--quick] [--device cuda]``

GPT-2, BERT, Llama, Qwen2, ViT and T5 (``benchmarks/_hf_models.py``: random
weights, each returning its own loss) sized so that activations dominate.
For every model, in one process:

* **ours**: ``rematerialize(..., method="auto", granularity="auto")`` at
  ``--fractions`` of activation memory (plans executed op by op by
  remat_torch; 1.0 is checkpoint-all; empty ``--fractions`` skips them);
* **ours compiled**: ``torch.compile(model, backend=remat_torch.backend(budget=f))``
  at ``--ours-compiled-budgets`` (remat's partitioner, Inductor compiling both
  halves; at the first infeasible budget once more at the smallest budget the
  error names, in bytes);
* **HF checkpointing**: eager (its unconstrained run) and
  ``activation_checkpointing_enable(every_n_layers=n)``, n = 1 and 2;
* **torch.compile** (Inductor) with ``torch._functorch.config.activation_memory_budget``
  at ``--compile-budgets``, each with a fresh compile (``torch._dynamo.reset()``
  and a partitioner object of its own, so no budget reuses another's cached
  code) and a check that the partitioner ran.

Memory: one meter for every method (CPU: :class:`remat_torch.meter.AllocatorMeter`;
CUDA: ``torch.cuda.max_memory_allocated``) over one step, gradients set to
``None`` before it, plus the bytes resident before the step (parameters,
buffers, inputs). Time: median of interleaved rounds (order rotated every
round; CUDA events on a GPU), after warm-up; reported over eager's and over
the method's own unconstrained run. *First step*: the wall time of the first
step (tracing, planning, compiling; ours compiled also runs its compile-time
check of the step's peak).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _report  # noqa: E402
from _hf_models import MODELS, make_model  # noqa: E402

import torch  # noqa: E402

from remat_core.errors import BudgetInfeasibleError  # noqa: E402
from remat_core.units import budget_fraction, format_bytes  # noqa: E402
from remat_torch import rematerialize  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

MiB = 2 ** 20


def step(model, inputs):
    model.zero_grad(set_to_none=True)
    model(*inputs).backward()


def resident_bytes(model, inputs) -> int:
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()) + list(inputs):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def measured_peak(model, inputs, resident: int) -> int:
    step(model, inputs)  # warm-up: one-off allocations
    model.zero_grad(set_to_none=True)
    if inputs[0].device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = model(*inputs)
        loss.backward()
        del loss
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base + resident
    with AllocatorMeter() as meter:
        loss = model(*inputs)
        loss.backward()
        del loss
    return meter.peak_bytes + resident


def timed_step(model, inputs) -> float:
    """One step's time: CUDA events on a GPU, the wall clock on CPU."""
    if inputs[0].device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        step(model, inputs)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    step(model, inputs)
    return time.perf_counter() - t0


def interleaved_times(variants: dict, inputs, rounds: int) -> dict:
    names = list(variants)
    times = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(timed_step(variants[k]["model"], inputs))
    return {k: statistics.median(v) for k, v in times.items()}


def hf_checkpointed(base, every_n: int):
    m = copy.deepcopy(base)
    hf = m.hf
    if hasattr(hf, "activation_checkpointing_enable"):
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False},
                                           every_n_layers=every_n)
    elif every_n == 1:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        return None
    m.train()
    return m


from torch._inductor.custom_graph_pass import CustomPartitionerFn  # noqa: E402


class CheckedMinCut(CustomPartitionerFn):
    """compile's own partitioner (``activation_memory_budget`` as set), counting its calls.

    A partitioner object of its own gives each budget its own Inductor cache key, so no budget reuses another's
    compiled code (the benchmark's earlier GPT-2 rows all showed the first budget's peak)."""

    def __init__(self):
        self.calls = 0
        self.nonce = os.urandom(8).hex()

    def __call__(self, gm, joint_inputs, **kwargs):
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        self.calls += 1
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    def uuid(self):
        return "checked-min-cut-" + self.nonce


def compiled(base, inputs, budget: float):
    """torch.compile with Inductor at ``activation_memory_budget=budget``: (model, time to first step, graphs)."""
    import torch._functorch.config as fconfig
    from torch._inductor.compile_fx import compile_fx

    m = copy.deepcopy(base)
    torch._dynamo.reset()
    part = CheckedMinCut()

    def be(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches={"custom_partitioner_fn": part})

    with fconfig.patch(activation_memory_budget=budget):
        cm = torch.compile(m, backend=be)
        t0 = time.perf_counter()
        step(cm, inputs)  # compiles forward and backward under this budget
        compile_s = time.perf_counter() - t0
    if part.calls == 0:
        raise RuntimeError(f"compile's partitioner did not run at budget {budget} (a cached graph was reused)")
    return cm, compile_s, part.calls


def ours_compiled(base, inputs, budget, time_limit: float):
    """torch.compile with ``remat_torch.backend(budget)``: (model, time to first step, the plan)."""
    from remat_torch import backend

    m = copy.deepcopy(base)
    torch._dynamo.reset()
    be = backend(budget, time_limit_s=time_limit)
    cm = torch.compile(m, backend=be)
    t0 = time.perf_counter()
    step(cm, inputs)  # traces, plans, compiles, checks the compiled step's peak
    compile_s = time.perf_counter() - t0
    if not be.partitioner.plans:
        raise RuntimeError("remat's partitioner did not run")
    return cm, compile_s, be.partitioner.plans


def run_model(name, args, log):
    base, inputs = make_model(name, layers=args.layers, hidden=args.hidden, seq=args.seq, batch=args.batch,
                              dropout=not args.no_dropout)
    base, inputs = base.to(args.device), tuple(x.to(args.device) for x in inputs)
    resident = resident_bytes(base, inputs)
    variants: dict = {"eager": {"method": "HF checkpointing", "label": "eager (no checkpointing)",
                                "model": copy.deepcopy(base), "unconstrained": "eager"}}
    for n in (1, 2):
        m = hf_checkpointed(base, n)
        if m is not None:
            variants[f"hf every {n}"] = {"method": "HF checkpointing", "label": f"checkpoint every {n} layer(s)",
                                         "model": m, "unconstrained": "eager"}
    t0 = time.perf_counter()
    full = graph = None
    if args.fractions:
        full = rematerialize(copy.deepcopy(base), inputs, budget=1.0, method="checkpoint-all", granularity="auto",
                             cost_model=args.cost_model, workspace="measure")
        graph = full.extracted.graph
        log(f"{name}: extracted {graph.n} nodes ({full.extracted.granularity}) in {time.perf_counter() - t0:.0f} s")
        variants["ours 1.0"] = {"method": "ours", "label": "checkpoint-all (1.0)", "model": full,
                                "unconstrained": "ours 1.0", "fraction": 1.0, "solve_s": 0.0,
                                "predicted": full.executor.peak_bytes}
    extract_s = time.perf_counter() - t0
    smallest = None
    for f in args.fractions:
        try:
            t0 = time.perf_counter()
            rm = full.replan(budget=f, method="auto", time_limit_s=args.time_limit)
            solve_s = time.perf_counter() - t0
        except BudgetInfeasibleError as exc:
            smallest = exc.min_budget_bytes
            log(f"{name}: {f} infeasible (smallest feasible {format_bytes(smallest) if smallest else '?'})")
            if smallest:
                f_min = round(budget_fraction(graph, smallest) + 0.01, 3)
                if f_min < 1.0 and all(v.get("fraction") != f_min for v in variants.values()):
                    try:
                        t0 = time.perf_counter()
                        rm = full.replan(budget=f_min, method="auto", time_limit_s=args.time_limit)
                        solve_s = time.perf_counter() - t0
                        f = f_min
                    except BudgetInfeasibleError:
                        break
                else:
                    break
            else:
                break
        variants[f"ours {f}"] = {"method": "ours", "label": f"auto @ {f}", "model": rm, "unconstrained": "ours 1.0",
                                 "fraction": f, "solve_s": solve_s, "predicted": rm.executor.peak_bytes,
                                 "solver": f"{rm.result.method} ({rm.result.status.value})",
                                 "recomputed": int((rm.result.schedule.compute_counts() - 1).sum())}
        log(f"{name}: ours @ {f} solved in {solve_s:.1f} s")
        if smallest:
            break
    if name in args.compile_models:
        for b in args.compile_budgets:
            try:
                cm, compile_s, graphs = compiled(base, inputs, b)
            except Exception as exc:  # no C++ compiler, unsupported op: say so in the table
                log(f"{name}: torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                break
            variants[f"compile {b}"] = {"method": "torch.compile", "label": f"activation_memory_budget={b}",
                                        "model": cm, "unconstrained": "compile 1.0", "compile_s": compile_s,
                                        "graphs": graphs}
            log(f"{name}: torch.compile @ {b} compiled in {compile_s:.0f} s ({graphs} graph(s))")
        budgets = list(args.ours_compiled_budgets)
        while budgets:
            b = budgets.pop(0)
            try:
                cm, compile_s, plans = ours_compiled(base, inputs, b, args.time_limit)
            except Exception as exc:
                from remat_torch import CompiledBudgetError

                err = exc
                while err is not None and not isinstance(err, CompiledBudgetError):
                    err = getattr(err, "inner_exception", None) or err.__cause__
                msg = " ".join(str(err or exc).split())[:600]
                log(f"{name}: ours compiled @ {b}: {type(err or exc).__name__}: {msg}")
                if err is not None and err.smallest_bytes and not isinstance(b, int):
                    budgets = [int(err.smallest_bytes * 1.02)]   # once more at the smallest found, then stop
                else:
                    budgets = []
                continue
            plan = plans[-1]
            label = f"{b:g}" if isinstance(b, float) else f"{b / MiB:.2f} MiB (smallest found)"
            variants[f"ours-compiled {label}"] = {
                "method": "ours compiled", "label": f"backend(budget={label})", "model": cm,
                "unconstrained": "compile 1.0", "compile_s": compile_s, "predicted": plan.predicted_peak_bytes
                + resident, "solver": f"{plan.source}, {plan.attempts} compile(s)", "solve_s": plan.plan_time_s,
                "recomputed": plan.n_recomputed, "graphs": len(plans)}
            log(f"{name}: ours compiled @ {label}: {plan.source}, predicted {plan.predicted_peak_bytes / MiB:.2f} "
                f"MiB, checked {(plan.measured_peak_bytes or 0) / MiB:.2f} MiB, first step {compile_s:.0f} s")
    for k, v in variants.items():
        v["peak"] = measured_peak(v["model"], inputs, resident)
    for v in variants.values():
        step(v["model"], inputs)
    times = interleaved_times(variants, inputs, args.rounds)
    rows = []
    for k, v in variants.items():
        base_key = v["unconstrained"] if v["unconstrained"] in times else None
        rows.append({
            "model": name, "key": k, "method": v["method"], "label": v["label"], "peak": v["peak"],
            "time_s": times[k], "overhead_own": times[k] / times[base_key] if base_key else None,
            "overhead_eager": times[k] / times["eager"], "fraction": v.get("fraction"),
            "solve_s": v.get("solve_s"), "predicted": v.get("predicted"), "solver": v.get("solver"),
            "recomputed": v.get("recomputed"), "compile_s": v.get("compile_s"), "graphs": v.get("graphs"),
        })
    meta = {"nodes": graph.n if graph else None, "granularity": full.extracted.granularity if full else None,
            "extract_s": extract_s, "resident": resident,
            "activation_bytes": int(full.executor.peak_bytes - graph.fixed_bytes) if full else None}
    for v in variants.values():
        v["model"] = None
    return rows, meta


def equal_memory(rows):
    """For every baseline point, our fastest plan whose measured peak is at or below it."""
    out = []
    for r in rows:
        if r["method"].startswith("ours") or r["key"] == "eager":
            continue
        fit = [o for o in rows if o["model"] == r["model"] and o["method"].startswith("ours")
               and o["peak"] <= r["peak"]]
        best = min(fit, key=lambda o: o["overhead_eager"]) if fit else None
        out.append((r, best))
    return out


def plot(all_rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in all_rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.8), squeeze=False)
    style = {"ours": ("o-", "C0"), "ours compiled": ("D-", "C3"), "HF checkpointing": ("s--", "C1"),
             "torch.compile": ("^:", "C2")}
    for ax, name in zip(axes[0], models):
        for method, (fmt, color) in style.items():
            pts = sorted((r["peak"] / MiB, r["overhead_eager"]) for r in all_rows
                         if r["model"] == name and r["method"] == method)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], fmt, color=color, label=method)
        ax.set_title(name)
        ax.set_xlabel("measured peak (MiB)")
        ax.set_ylabel("step time / eager")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(all_rows, metas, args, notes):
    table = []
    for r in all_rows:
        extra = []
        if r["solver"]:
            extra.append(f"{r['solver']}, plan {r['solve_s']:.1f} s, {r['recomputed']} recomputed nodes, "
                         f"predicted {r['predicted'] / MiB:.2f} MiB")
        if r["compile_s"]:
            graphs = f", {r['graphs']} graph(s)" if r.get("graphs") else ""
            extra.append(f"first step {r['compile_s']:.0f} s{graphs}")
        table.append([r["model"], r["method"], r["label"], r["peak"] / MiB, r["time_s"] * 1e3,
                      r["overhead_own"] if r["overhead_own"] is not None else "-", r["overhead_eager"],
                      "; ".join(extra)])
    eq = []
    for r, best in equal_memory(all_rows):
        if best is None:
            eq.append([r["model"], f"{r['method']}: {r['label']}", r["peak"] / MiB, r["overhead_eager"],
                       "none of ours at or below this peak", "-", "-", "-"])
        else:
            eq.append([r["model"], f"{r['method']}: {r['label']}", r["peak"] / MiB, r["overhead_eager"],
                       best["label"], best["peak"] / MiB, best["overhead_eager"],
                       "yes" if best["overhead_eager"] <= r["overhead_eager"] else "no"])
    solve = [[name, m["nodes"] or "-", m["granularity"] or "-", m["extract_s"],
              m["activation_bytes"] / MiB if m["activation_bytes"] else "-",
              max((r["solve_s"] or 0) for r in all_rows if r["model"] == name)] for name, m in metas.items()]
    md = [
        "## torch-models",
        "",
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}; torch {torch.__version__}, {args.threads} intra-op thread(s); the "
        "machine was shared with other jobs while this ran (noisy: compare ratios within a model, not times).",
        "",
        f"Models (`benchmarks/_hf_models.py`, random weights, own loss): {args.layers} layers, width {args.hidden}, "
        f"batch {args.batch} x {args.seq} tokens (ViT: {args.seq} patches of 8x8 pixels), eager attention, dropout "
        "as configured (GPT-2, BERT, ViT 0.1). *Measured peak*: the allocator meter's peak during one step plus "
        "the parameters, buffers and inputs resident before it, the same meter for every method. *Overhead*: "
        "median step time over the method's own unconstrained run (ours: checkpoint-all executed by remat_torch; "
        "HF: eager; torch.compile: budget 1.0), and over eager, from interleaved rounds in one run. Ours: "
        f"`method=\"auto\"`, `granularity=\"auto\"`, `cost_model=\"{args.cost_model}\"`, measured workspaces, "
        f"`time_limit_s={args.time_limit:g}`, fractions of activation memory; *predicted*: the executed plan's "
        "peak in the memory model.",
        "",
        *notes,
        "",
        _report.table(["model", "method", "setting", "measured peak MiB", "step ms", "overhead (own)",
                       "overhead (eager)", "notes"], table),
        "",
        "### At equal memory: our fastest plan at or below each baseline's measured peak",
        "",
        _report.table(["model", "baseline", "its peak MiB", "its step / eager", "our plan", "our peak MiB",
                       "our step / eager", "ours <= theirs"], eq),
        "",
        "### Extraction and solve time (default method `auto`)",
        "",
        _report.table(["model", "nodes", "granularity", "extract s (trace, costs, measured workspaces)",
                       "activation MiB", "longest solve s"], solve),
        "",
        "![measured peak vs overhead](results/torch_models.png)",
    ]
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two models, fewer budgets and rounds, no torch.compile")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--fractions", default="0.7,0.5,0.3,0.15")
    ap.add_argument("--time-limit", type=float, default=15.0)
    ap.add_argument("--compile-models", default=",".join(MODELS),
                    help="models run under torch.compile (its own partitioner and ours)")
    ap.add_argument("--compile-budgets", default="1.0,0.5,0.3,0.1,0.0")
    ap.add_argument("--ours-compiled-budgets", default="1.0,0.7,0.5,0.3,0.1",
                    help="fractions for remat_torch.backend; on the first infeasible one, once more at the smallest "
                         "budget found")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (peaks: max_memory_allocated; times: CUDA events)")
    ap.add_argument("--no-dropout", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cost-model", default="profile", help="node costs for our solver: profile (measured) or flops")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.quick:
        args.models, args.fractions, args.rounds, args.compile_models = "gpt2,vit", "0.5,0.2", 2, ""
    args.fractions = [float(f) for f in args.fractions.split(",") if f]
    args.ours_compiled_budgets = [float(b) for b in args.ours_compiled_budgets.split(",") if b]
    args.compile_models = [m for m in args.compile_models.split(",") if m]
    args.compile_budgets = [float(b) for b in args.compile_budgets.split(",") if b]
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - started:6.0f} s] {msg}", flush=True)

    all_rows, metas = [], {}
    for name in args.models.split(","):
        rows, meta = run_model(name, args, log)
        all_rows += rows
        metas[name] = meta
        _report.save_json("torch_models", {"machine": _report.machine_line(), "args": vars(args),
                                           "rows": all_rows, "meta": metas})
    png = os.path.join(_report.RESULTS, "torch_models.png")
    plot(all_rows, png)
    skipped = [m for m in args.models.split(",") if m not in args.compile_models]
    notes = [f"torch.compile ran on {', '.join(args.compile_models) or 'no model'} at budgets "
             f"{', '.join(map(str, args.compile_budgets))}"
             + (f"; not on {', '.join(skipped)} (each compile takes minutes on this CPU)." if skipped else ".")]
    notes.append(f"Whole run: {time.perf_counter() - started:.0f} s.")
    md = render(all_rows, metas, args, notes)
    _report.write_section("torch-models", md)
    print(md)


if __name__ == "__main__":
    main()
