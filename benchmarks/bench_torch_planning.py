"""Time to plan with ``remat_torch.rematerialize`` on Hugging Face models (issue 40, "Planning in seconds").

For each model (built from a ``transformers`` config with random weights by
``benchmarks/_hf_models.py``, the same builder as ``bench_torch_models.py``;
4 layers, width 128, batch 8 x 256 tokens by default), in a fresh process:

* **first plan**: ``rematerialize(model, inputs, budget=0.5)`` with every
  default (``method="auto"``, ``granularity="auto"``, 60 s limit), wall
  clock and CPU seconds (this process and its children: the solver's child
  process included), split into tracing, grouping, costs, workspace
  measurement and solving (by wrapping the adapter's functions of those
  names; a phase the code does not have is left out);
* **first step**: the first training step after it;
* **another budget**: ``rematerialize`` of the same model and inputs at
  0.4 (the graph may come from the cache of traced graphs);
* **new batch**: the first step of a batch of 6 (a new shape: traced, then
  planned or given an earlier schedule), and how its plan was made.

Usage::

    python benchmarks/bench_torch_planning.py [--models gpt2 bert llama qwen2] [--layers 4] [--hidden 128]
        [--seq 256] [--batch 8] [--out benchmarks/results/torch_planning.json] [--label after]
        [--pythonpath DIR]

``--pythonpath DIR`` puts ``DIR`` first on the workers' path, to time another
version of ``remat_torch`` (for example one exported with
``git archive <commit> remat_torch | tar -x -C DIR``) on the same models.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = {  # phase -> (module, function)
    "trace": [("remat_torch.extract", "_fake_metadata"), ("remat_torch.extract", "_trace_joint")],
    "reads": [("remat_torch.extract", "_record_reads")],   # the real forward run when the trace reads a value
    "group": [("remat_torch.extract", "_group")],
    "costs": [("remat_torch.profile", "node_costs")],
    "workspace": [("remat_torch.profile", "measure_workspace")],
    "solve": [("remat_torch.api", "_solve")],
}


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the solver's child process)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _wrap_phases(spent: dict) -> None:
    import functools
    import importlib

    for phase, where in PHASES.items():
        for mod_name, fn_name in where:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, fn_name, None)
            if fn is None:
                continue

            def timed(*a, _fn=fn, _phase=phase, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    spent[_phase] = spent.get(_phase, 0.0) + time.perf_counter() - t0

            setattr(mod, fn_name, functools.wraps(fn)(timed))


def _timed(fn):
    w0, c0 = time.perf_counter(), _cpu_s()
    out = fn()
    return out, time.perf_counter() - w0, _cpu_s() - c0


def worker(name: str, layers: int, hidden: int, seq: int, batch: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, HERE)
    import torch

    from _hf_models import make_model

    spent: dict = {}
    t_import = time.perf_counter()
    import remat_torch

    _wrap_phases(spent)
    import_s = time.perf_counter() - t_import
    model, inputs = make_model(name, layers=layers, hidden=hidden, seq=seq, batch=batch)

    def step(m, xs):
        m.zero_grad(set_to_none=True)
        loss = m(*xs)
        loss.backward()
        return float(loss)

    rm, wall, cpu = _timed(lambda: remat_torch.rematerialize(model, inputs, budget=0.5))
    phases = {k: round(v, 2) for k, v in spent.items()}
    res = rm.result
    eg = rm.extracted
    _, step_s, _ = _timed(lambda: step(rm, inputs))
    spent.clear()
    rm2, wall2, cpu2 = _timed(lambda: remat_torch.rematerialize(model, inputs, budget=0.4))
    phases2 = {k: round(v, 2) for k, v in spent.items()}
    spent.clear()
    small = tuple(x[:6] for x in inputs)
    _, new_wall, new_cpu = _timed(lambda: step(rm, small))
    return {
        "model": name, "layers": layers, "hidden": hidden, "seq": seq, "batch": batch,
        "torch": torch.__version__, "import_s": round(import_s, 2),
        "nodes": int(eg.graph.n), "granularity": eg.granularity, "method": res.method,
        "message": res.message, "gap": (res.stats or {}).get("gap"),
        "first_plan_wall_s": round(wall, 2), "first_plan_cpu_s": round(cpu, 2), "first_plan_phases_s": phases,
        "first_step_s": round(step_s, 2),
        "other_budget_wall_s": round(wall2, 2), "other_budget_cpu_s": round(cpu2, 2),
        "other_budget_phases_s": phases2, "other_budget_method": rm2.result.method,
        "new_batch_step_wall_s": round(new_wall, 2), "new_batch_step_cpu_s": round(new_cpu, 2),
        "new_batch_phases_s": {k: round(v, 2) for k, v in spent.items()},
        "new_batch_method": rm.result.method,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "bert", "llama", "qwen2"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--label", default="current")
    ap.add_argument("--pythonpath", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "torch_planning.json"))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.layers, args.hidden, args.seq, args.batch)))
        return 0
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([args.pythonpath, os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    rows = []
    for name in args.models:
        load = os.getloadavg()[0]
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--layers", str(args.layers),
               "--hidden", str(args.hidden), "--seq", str(args.seq), "--batch", str(args.batch)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name}: worker failed\n{proc.stderr[-3000:]}", file=sys.stderr)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["label"] = args.label
        row["load_before"] = round(load, 1)
        row["load_after"] = round(os.getloadavg()[0], 1)
        rows.append(row)
        print(f"{args.label:>8} {name:>6}: first plan {row['first_plan_wall_s']:6.1f} s wall "
              f"({row['first_plan_cpu_s']:5.1f} s CPU) {row['first_plan_phases_s']}; {row['nodes']} nodes "
              f"{row['granularity']}, {row['method']}, gap {row['gap']}; first step {row['first_step_s']} s; "
              f"another budget {row['other_budget_wall_s']} s; new batch step {row['new_batch_step_wall_s']} s "
              f"({row['new_batch_method']}); load {row['load_before']}-{row['load_after']}", flush=True)
    if args.out:
        old = []
        if os.path.exists(args.out):
            with open(args.out) as f:
                # a row per label and model: running the models one by one keeps the others' rows
                done = {(args.label, r["model"]) for r in rows}
                old = [r for r in json.load(f) if (r.get("label"), r.get("model")) not in done]
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(old + rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
