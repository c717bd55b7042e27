"""Rematerialized transformers under DDP and FSDP2: two gloo ranks on CPU, per-rank memory and gradients.

Run: ``.venv/bin/python benchmarks/bench_distributed.py [--quick]``

For each size, ``tests/torch/dist_worker.py ddp,fsdp`` runs two ranks (gloo,
one machine) of a pre-LN causal transformer with its loss inside, planned by
``remat_torch.distributed.rematerialize_shared`` at budget 0.5 (rank 0 solves,
rank 1 reuses the plan), wrapped in ``DistributedDataParallel`` or FSDP2
``fully_shard`` (whole module), and ``fsdp-blocks``: planned on each rank by
``rematerialize`` and sharded per block by
``remat_torch.distributed.fully_shard_blocks`` (``-on-use``: with
``gathered=1``, one block gathered at a time), against the same wrapper
around the plain model, three SGD steps each; ``fsdp-compiled``:
``torch.compile(fully_shard(model), backend=remat_torch.backend(0.5,
inductor=False))`` against eager FSDP2. Per rank:

* **plan peak**: the executed plan's peak in the memory model
  (``RematModule.predicted_peak_bytes``: full parameters, inputs and the
  plan's activations and gradients);
* **overhead**: :func:`remat_torch.distributed.comm_overhead_bytes` (DDP's
  gradient buckets; FSDP2's parameter and gradient shards and its all-gather
  output; per block, the root's all-gather output and the largest block's
  buffer); for the compiled plan, whose bytes are above the level before the
  step, also the gathered parameters, less the shard counted as resident;
* **measured**: the c10 allocator's peak rise during the third step
  (:class:`remat_torch.meter.AllocatorMeter`) plus what was resident before
  it (the storages of the rank's parameters or shards and of the inputs, and
  DDP's gradient buckets as DDP reports them, ``bucket_sizes``);
* **grad diff**: the largest absolute difference between the rank's reduced
  gradients with and without remat over the three steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _report  # noqa: E402

WORKER = os.path.join(HERE, "..", "tests", "torch", "dist_worker.py")
SCENARIOS = ("ddp", "fsdp", "fsdp-blocks", "fsdp-blocks-on-use", "fsdp-compiled")
SIZES = {"tiny": dict(D=32, LAYERS=2, SEQ=32, BATCH=4), "small": dict(D=128, LAYERS=4, SEQ=128, BATCH=8)}


def run(size: dict, timeout_s: float) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               **{f"REMAT_DIST_{k}": str(v) for k, v in size.items()})
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, WORKER, ",".join(SCENARIOS), out], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            text, _ = proc.communicate(timeout=timeout_s)
        except BaseException as exc:  # a timeout or Ctrl-C: the ranks are in their own session, kill them all
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise SystemExit(f"the ranks did not finish in {timeout_s} s") from None
            raise
        if proc.returncode != 0:
            raise SystemExit(text.decode(errors="replace")[-4000:])
        recs = {s: [json.load(open(os.path.join(out, f"{s}-rank{r}.json"))) for r in range(2)]
                for s in SCENARIOS}
    return {"records": recs, "wall_s": time.perf_counter() - t0}


STEP_TIME = r"""
import json, os, sys, time
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "tests", "torch")]
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
import dist_worker as W
from remat_torch import rematerialize
from remat_torch.distributed import fully_shard_blocks
mods = {}
for g in (None, 1):
    torch.manual_seed(0)
    m = W.TinyLM()
    ids, labels = W._batch(0, 0)
    rm = rematerialize(m, (ids, labels), budget=0.5, method="dtr", granularity="module", cost_model="flops")
    mods[g] = fully_shard_blocks(rm, m.blocks, gathered=g)
    mods[g](ids, labels).backward()
t = {None: [], 1: []}
for rep in range(int(sys.argv[2])):
    for g in (None, 1):  # interleaved
        c0 = time.process_time()
        mods[g](ids, labels).backward()
        t[g].append(time.process_time() - c0)
dist.destroy_process_group()
print(json.dumps({"all": t[None], "on_use": t[1]}))
"""


def step_cpu_time(size: dict, repeats: int, timeout_s: float) -> dict:
    """CPU seconds of a training step on one gloo rank: every block gathered for the step against
    ``gathered=1`` (the dispatch mode over the plan's operators), interleaved; one thread."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               **{f"REMAT_DIST_{k}": str(v) for k, v in size.items()})
    out = subprocess.run([sys.executable, "-c", STEP_TIME, os.path.join(HERE, ".."), str(repeats)], env=env,
                         capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny size only")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    sizes = ["tiny"] if args.quick else list(SIZES)
    rows, raw = [], {}
    for name in sizes:
        res = run(SIZES[name], args.timeout)
        raw[name] = res
        for strategy, recs in res["records"].items():
            for rec in recs:
                measured = rec["resident"] + rec["rises"][-1]
                if strategy == "fsdp-compiled":  # bytes above the step's start: the gathered parameters on top
                    (plan,) = rec["plans"]
                    shard = rec["resident"] - rec["input_bytes"]
                    overhead = rec["resident"] + rec["param_bytes"] + rec["overhead_bytes"] - shard
                    method, budget, peak = plan["source"], plan["budget_bytes"], plan["predicted_peak_bytes"]
                else:
                    overhead = rec["overhead_bytes"]
                    method, budget, peak = rec["method"], rec["budget_bytes"], rec["predicted_peak_bytes"]
                predicted = peak + overhead
                rows.append([name, strategy, rec["rank"], method, budget, peak, overhead, predicted, measured,
                             round(measured / predicted, 3), budget + overhead, f"{max(rec['diffs']):.1e}"])
    size_t = sizes[-1]
    times = step_cpu_time(SIZES[size_t], 6, args.timeout)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    load = os.getloadavg()[0]
    _report.save_json("distributed", {"machine": _report.machine_line(), "sizes": {s: SIZES[s] for s in sizes},
                                      "results": raw, "step_cpu_s": times})
    size_txt = "; ".join(f"{s}: d={v['D']}, {v['LAYERS']} layers, sequence {v['SEQ']}, batch {v['BATCH']} per rank"
                         for s, v in SIZES.items() if s in sizes)
    md = "\n\n".join([
        "## distributed (issue 39)",
        f"`{_report.command_line()}` on {_report.machine_line()}. Two gloo ranks on one machine (CPU), "
        f"budget 0.5 of activation memory, three SGD steps; sizes: {size_txt}. Bytes per rank. "
        "*per-rank model* = plan peak + overhead (`comm_overhead_bytes`); *per-rank budget* = the plan's budget + "
        "overhead; *measured* = allocator peak in the third step + resident bytes; *grad diff* = largest "
        "|reduced gradient with remat - without| over the three steps.",
        _report.table(["size", "wrapper", "rank", "method", "plan budget", "plan peak", "overhead",
                       "per-rank model", "measured", "measured / model", "per-rank budget", "grad diff"], rows),
        "DDP: the measured per-rank peak is at most the plan's peak plus one copy of the gradients (DDP's buckets). "
        "FSDP2 (`fully_shard` on the whole rematerialized module): the model is an upper bound; its all-gather "
        "output lives through the forward while the plan's peak is in the backward, so the rank stays below it. "
        "fsdp-blocks (`fully_shard_blocks`): every block is gathered when the step starts (the plan never calls a "
        "block's forward), so inside the step the rank holds the full parameters as with whole-module sharding; "
        "the overhead counts the root's all-gather output and one block's buffer instead of all parameters. "
        "fsdp-blocks-on-use (`gathered=1`): a block is gathered when the plan first reads it, one at a time; the "
        "overhead is less by the blocks not held (negative when they outweigh the shards and buffers). "
        "fsdp-compiled: the compiled plan's bytes are above the level before the step, so its overhead column "
        "also holds what was resident and the gathered parameters. "
        f"Step time of `gathered=1` (size {size_t}, one gloo rank, one thread, 6 steps interleaved with every block "
        f"gathered, load {load:.0f}): median {med['on_use']:.3f} CPU s per step against {med['all']:.3f} "
        f"({med['on_use'] / med['all']:.2f}x): every operator of the plan goes through a Python dispatch mode. "
        "No GPU was available: no NCCL or CUDA numbers are measured yet.",
    ])
    _report.write_section("distributed", md)
    print(md)


if __name__ == "__main__":
    main()
