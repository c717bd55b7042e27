"""Executor overhead: a training step with no recomputation (checkpoint-all) run by remat_torch vs eager.

Run: ``.venv/bin/python benchmarks/bench_torch_executor.py [--quick] [--threads 1]``

Small Hugging Face models (``benchmarks/_hf_models.py``: GPT-2, BERT, Llama,
ViT with 2 layers of width 64 on 4 x 64 tokens and of width 128 on 8 x 128
tokens, random weights, each returning its own loss) at op and module granularity. Three variants per row,
timed in interleaved rounds (the order rotated every round) in one process:

* eager: ``model(*inputs).backward()``;
* remat: ``rematerialize(..., method="checkpoint-all")``, the executor's
  generated code (the default);
* interpreter: the same plan run by ``Executor(track=True)``, which walks the
  plan statement by statement and tracks the live storages, as the executor
  did before it generated code.

Times are medians over the rounds, as wall clock and as the process's CPU
time (``time.process_time``); with one intra-op thread the CPU time is the
less disturbed by other processes on a loaded machine. Ratios are against
eager in the same round set.
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

from remat_torch import Executor, rematerialize  # noqa: E402


def step(model, inputs):
    model.zero_grad(set_to_none=True)
    model(*inputs).backward()


def timed_rounds(variants: dict, inputs, rounds: int, warmup: int = 3) -> dict:
    """name -> (median wall s, median CPU s); rounds interleaved, order rotated by one each round."""
    for _ in range(warmup):
        for m in variants.values():
            step(m, inputs)
    names = list(variants)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            w0, c0 = time.perf_counter(), time.process_time()
            step(variants[k], inputs)
            cpu[k].append(time.process_time() - c0)
            wall[k].append(time.perf_counter() - w0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--sizes", default="small,tiny", help="small: width 64 on 4 x 64 tokens; tiny: width 128 on 8 x 128")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rounds = 7 if args.quick else args.rounds
    rows, raw = [], []
    sizes = {"small": dict(hidden=64, seq=64, batch=4), "tiny": dict(hidden=128, seq=128, batch=8)}
    for size, name in [(z, m) for z in args.sizes.split(",") for m in args.models.split(",")]:
        for gran in ("op", "module"):
            model, inputs = make_model(name, layers=2, **sizes[size])
            try:
                rm = rematerialize(copy.deepcopy(model), inputs, budget=1.0, method="checkpoint-all",
                                   granularity=gran, cost_model="unit")
            except Exception as exc:  # report the model as not run, with the reason
                rows.append([name, size, gran, "-", "-", "-", "-", "-", f"not run: {type(exc).__name__}: {str(exc)[:120]}"])
                continue
            interp = copy.deepcopy(rm)
            interp._executor = Executor(interp.extracted, interp.plan, track=True)
            t = timed_rounds({"eager": copy.deepcopy(model), "remat": rm, "interpreter": interp}, inputs, rounds)
            e_w, e_c = t["eager"]
            row = [name, size, gran, rm.extracted.graph.n, e_w * 1e3, t["remat"][0] / e_w, t["remat"][1] / e_c,
                   t["interpreter"][0] / e_w, t["interpreter"][1] / e_c]
            rows.append(row)
            raw.append({"model": name, "size": size, "granularity": gran, "nodes": rm.extracted.graph.n, "times": t})
            print(row, flush=True)
    _report.save_json("torch_executor", {"machine": _report.machine_line(), "threads": args.threads,
                                         "rounds": rounds, "rows": raw})
    md = [
        "## torch-executor",
        "",
        f"Command: `{_report.command_line()}`  ",
        f"Machine: {_report.machine_line()}; torch {torch.__version__}, {args.threads} intra-op thread(s); "
        "the machine was shared with other jobs while this ran (noisy: compare ratios, not times).",
        "",
        "A training step (forward, the model's own loss, backward) with no recomputation (`checkpoint-all`) "
        "run by remat_torch against eager, on tiny Hugging Face models built from configs with random weights "
        "(2 layers; *small*: width 64, batch 4 x 64 tokens, *tiny*: width 128, batch 8 x 128 tokens; ViT: as "
        "many 8x8 patches; dropout as configured; per-op Python work weighs most on *small*). "
        f"Medians over {rounds} interleaved rounds in one process; ratios are over eager's median in the "
        "same run, as wall clock and as the process's CPU time. *remat*: the executor's generated code (each "
        "part of the plan compiled once into straight-line Python that calls the aten ops directly and "
        "`del`s freed registers). *interpreter*: the same plan walked statement by statement with storage "
        "tracking (`Executor(track=True)`), which is how every step ran before the generated code. "
        "Target: remat <= 1.10x eager.",
        "",
        _report.table(["model", "size", "granularity", "nodes", "eager ms (wall)", "remat / eager (wall)",
                       "remat / eager (CPU)", "interpreter / eager (wall)", "interpreter / eager (CPU)"], rows),
    ]
    _report.write_section("torch-executor", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
