"""PyTorch adapter benchmark: executor overhead and plans vs torch.utils.checkpoint / torch.compile.

Run: ``.venv/bin/python benchmarks/bench_torch.py [--quick]``

(a) Executor overhead: checkpoint-all executed by remat_torch vs plain eager
    step time on a mid-size CNN (VGG-like, BatchNorm) on CPU; interleaved
    repeats, medians, ratio from one run (target <= 1.15x).
(b) At equal memory: ``checkpoint_sequential`` with k segments vs our plans
    (ilp, lp-rounding, linearized-sqrtn over a budget sweep) vs
    ``torch.compile`` with ``torch._functorch.config.activation_memory_budget``.
    Memory is measured the same way for all of them: a TorchDispatchMode that
    follows every storage allocated during the step (activations, temporaries,
    gradients) until it is freed (weakref finalizers), and reports the peak of
    live bytes. For each k, our fastest plan whose measured peak is <= the
    checkpoint_sequential peak is compared with it.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import _report  # noqa: E402

from remat_core import checkpoint_all_peak_bytes  # noqa: E402
from remat_torch import BudgetInfeasibleError, rematerialize  # noqa: E402
from remat_torch.models import mid_cnn  # noqa: E402


class StorageMeter(TorchDispatchMode):
    """Peak bytes of storages allocated while active (freed storages are subtracted)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.seen = set()

    def _free(self, key, nbytes):
        self.live -= nbytes
        self.seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = id(s)
                if key in self.seen or s.nbytes() == 0:
                    continue
                try:
                    weakref.finalize(s, self._free, key, s.nbytes())
                except TypeError:
                    continue
                self.seen.add(key)
                self.live += s.nbytes()
                self.peak = max(self.peak, self.live)
        return out


def loss_fn(y):
    return y.float().pow(2).mean()


def step(model, x):
    model.zero_grad(set_to_none=True)
    loss_fn(model(x)).backward()


def measure_peak(fn, model, x):
    model.zero_grad(set_to_none=True)
    with StorageMeter() as meter:
        fn(model, x)
    return meter.peak


def timed(fn, model, x):
    t0 = time.perf_counter()
    fn(model, x)
    return time.perf_counter() - t0


def interleaved(fns, reps):
    """Median seconds of each (name -> (fn, model, x)), runs interleaved round-robin."""
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, (fn, m, x) in fns.items():
            times[k].append(timed(fn, m, x))
    return {k: statistics.median(v) for k, v in times.items()}


def ckpt_seq_step(segments):
    from torch.utils.checkpoint import checkpoint_sequential

    def fn(model, x):
        model.zero_grad(set_to_none=True)
        loss_fn(checkpoint_sequential(model, segments, x, use_reentrant=False)).backward()
    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and budgets")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    reps = 5 if args.quick else args.reps
    torch.manual_seed(0)
    base = mid_cnn()
    x = torch.randn(args.batch, 3, args.size, args.size)
    results = {"machine": _report.machine_line(), "batch": args.batch, "size": args.size,
               "threads": torch.get_num_threads()}

    # ---------------------------------------------------------------- (a) overhead
    eager = copy.deepcopy(base)
    ours = rematerialize(copy.deepcopy(base), x, budget=1.0, method="checkpoint-all", granularity="module",
                         cost_model="flops")
    for _ in range(2):  # warm-up
        step(eager, x)
        step(ours, x)
    t = interleaved({"eager": (step, eager, x), "remat checkpoint-all": (step, ours, x)}, reps)
    overhead = t["remat checkpoint-all"] / t["eager"]
    results["overhead"] = {"eager_s": t["eager"], "remat_checkpoint_all_s": t["remat checkpoint-all"],
                           "ratio": overhead, "nodes": ours.extracted.graph.n}

    # ----------------------------------------------------------- (b) equal memory
    probe = rematerialize(copy.deepcopy(base), x, budget=1.0, granularity="module", cost_model="profile")
    g = probe.extracted.graph
    peak_all = checkpoint_all_peak_bytes(g)
    fracs = [0.4, 0.5, 0.6, 0.7, 0.85] if not args.quick else [0.5, 0.7]
    plans = []
    for method in ["ilp", "lp-rounding", "linearized-sqrtn"]:
        for f in fracs:
            budget = int(f * peak_all)
            opts = {"time_limit_s": 30} if method == "ilp" else {}
            try:
                t0 = time.perf_counter()
                rm = rematerialize(copy.deepcopy(base), x, budget=budget, method=method, granularity="module",
                                   cost_model="profile", solver_options=opts)
                solve_s = time.perf_counter() - t0
            except BudgetInfeasibleError:
                continue
            plans.append({"method": method, "budget_fraction": f, "model": rm, "solve_s": solve_s,
                          "predicted_peak": rm.predicted_peak_bytes,
                          "recomputes": int((rm.result.schedule.compute_counts() - 1).sum())})
    for p in plans:
        step(p["model"], x)
        p["measured_peak"] = measure_peak(step, p["model"], x)
        p["tracked_peak"] = p["model"].last_peak_bytes
    baselines = {"eager (no checkpointing)": step}
    for k in (2, 4, 8):
        baselines[f"checkpoint_sequential k={k}"] = ckpt_seq_step(k)
    base_models = {k: copy.deepcopy(base) for k in baselines}
    base_peaks = {k: measure_peak(fn, base_models[k], x) for k, fn in baselines.items()}

    compiled = {}
    compile_note = "not run (--no-compile)"
    if not args.no_compile:
        import torch._functorch.config as fconfig

        for b in (0.5, 0.1):
            name = f"torch.compile activation_memory_budget={b}"
            try:
                m = copy.deepcopy(base)
                torch._dynamo.reset()
                with fconfig.patch(activation_memory_budget=b):
                    cm = torch.compile(m)
                    t0 = time.perf_counter()
                    step(cm, x)
                    ct = time.perf_counter() - t0
                    peak = measure_peak(step, cm, x)
                compiled[name] = (cm, peak, ct)
                compile_note = "ran (inductor, CPU C++ backend)"
            except Exception as exc:  # report why it does not run here
                compile_note = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                break

    # timing of everything in one interleaved run
    fns = {k: (fn, base_models[k], x) for k, fn in baselines.items()}
    for p in plans:
        fns[f"{p['method']} @{p['budget_fraction']}"] = (step, p["model"], x)
    for name, (cm, _, _) in compiled.items():
        fns[name] = (step, cm, x)
    for _ in range(1):
        for fn, m, xx in fns.values():
            fn(m, xx)
    times = interleaved(fns, max(3, reps // 2))

    rows_all = []
    for k in baselines:
        rows_all.append([k, base_peaks[k] / 2**20, times[k] * 1e3, "", ""])
    for p in plans:
        key = f"{p['method']} @{p['budget_fraction']}"
        rows_all.append([key, p["measured_peak"] / 2**20, times[key] * 1e3, p["recomputes"],
                         f"{p['tracked_peak'] / 2**20:.2f} / {p['predicted_peak'] / 2**20:.2f}"])
    for name, (cm, peak, ct) in compiled.items():
        rows_all.append([name, peak / 2**20, times[name] * 1e3, "", f"compile {ct:.0f} s"])

    eq_rows = []
    for k in (2, 4, 8):
        key = f"checkpoint_sequential k={k}"
        fit = [p for p in plans if p["measured_peak"] <= base_peaks[key]]
        if not fit:
            eq_rows.append([key, base_peaks[key] / 2**20, "no plan of ours at or below this peak", "", ""])
            continue
        best = min(fit, key=lambda p: times[f"{p['method']} @{p['budget_fraction']}"])
        bk = f"{best['method']} @{best['budget_fraction']}"
        eq_rows.append([key, base_peaks[key] / 2**20, bk, best["measured_peak"] / base_peaks[key],
                        times[bk] / times[key]])
    results["equal_memory"] = eq_rows
    results["all"] = rows_all
    results["compile"] = compile_note
    results["times_s"] = times
    results["peaks_bytes"] = {**base_peaks, **{f"{p['method']} @{p['budget_fraction']}": p["measured_peak"]
                                               for p in plans}}
    _report.save_json("torch", results)

    md = [
        "## torch",
        "",
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}; torch {torch.__version__}, {torch.get_num_threads()} threads. "
        "**No GPU was available for this run**, so there are no CUDA numbers "
        "(`torch.cuda.max_memory_allocated`); on a GPU the same script would need the meter replaced by it.",
        "",
        f"Model: `remat_torch.models.mid_cnn` (VGG-like, 6 conv-BN-ReLU, batch {args.batch}, "
        f"{args.size}x{args.size}), loss `mean(y**2)`. Memory = peak bytes of storages allocated during the step "
        "(activations, temporaries, gradients; parameters excluded), measured identically for every strategy "
        "by a TorchDispatchMode storage meter. Times are medians of interleaved repeats in one run.",
        "",
        "### Executor overhead (checkpoint-all executed by remat_torch vs eager)",
        "",
        _report.table(["eager ms", "remat checkpoint-all ms", "ratio", "target", "graph nodes"],
                      [[t["eager"] * 1e3, t["remat checkpoint-all"] * 1e3, overhead, "<= 1.15",
                        ours.extracted.graph.n]]),
        "",
        "### At equal memory: checkpoint_sequential vs our fastest plan that fits under its peak",
        "",
        _report.table(["baseline", "baseline peak MiB", "our plan (method @ budget fraction)",
                       "peak ratio ours/baseline", "step time ratio ours/baseline"], eq_rows),
        "",
        "### All strategies",
        "",
        "Our plans: module granularity, profiled CPU costs, budgets as fractions of the checkpoint-all peak "
        "(checkpoint-all keeps every value to the end of the step, so fraction 1.0 is above eager). Last column: executor-tracked peak / simulator prediction "
        "(both include parameters, gradients and inputs, so they are larger than the meter's peak).",
        "",
        _report.table(["strategy", "measured peak MiB", "step ms", "recomputed nodes",
                       "tracked / predicted MiB"], rows_all),
        "",
        f"torch.compile with `activation_memory_budget`: {compile_note}. Caveat: the storage meter does not see "
        "allocations inside compiled code (its torch.compile peaks equal eager to the byte), so the torch.compile "
        "memory column is not a valid measurement; only its step time is.",
    ]
    _report.write_section("torch", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
