"""Memory floors of remat_torch against eager PyTorch and Hugging Face's gradient checkpointing (issues 36, 40).

For Hugging Face models built from configs (random weights, nothing
downloaded), called the way a training loop calls them
(``loss = model(input_ids=..., labels=...).loss``, so the model returns
``loss`` and ``logits``), on CPU:

* eager PyTorch's measured peak, and Hugging Face's per-layer gradient
  checkpointing's (``gradient_checkpointing_enable(use_reentrant=False)``);
* remat's plan without recomputation (``method="checkpoint-all"``, op
  granularity, ``budget=1.0``): its measured peak against eager's;
* remat planned at HF checkpointing's measured peak (``method="auto"``,
  ``granularity="auto"``): whether a plan exists, its measured and
  predicted peak, and the step time of both over eager's (median of
  interleaved repetitions, so load drift falls on all alike).

Peaks are the c10 allocator's rise during one step
(:class:`remat_torch.meter.AllocatorMeter`, second step of each, gradients
set to ``None`` before it) plus the parameters and inputs resident before it.

Usage::

    python benchmarks/bench_torch_floors.py [--models gpt2 bert llama qwen2] [--reps 5]
        [--out benchmarks/results/torch_floors.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from remat_torch import BudgetInfeasibleError, rematerialize  # noqa: E402
from remat_torch.meter import AllocatorMeter  # noqa: E402

# the tests' helper (one copy of it): parameters, buffers and batch tensors resident before a step
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "torch"))
from hf_cases import resident_bytes  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, BATCH, VOCAB = 2, 128, 2, 128, 4, 2048


def make(name: str, seed: int = 0):
    """``(model, batch)``: a Hugging Face model with random weights and a batch of keyword inputs."""
    import transformers as tr

    tr.logging.set_verbosity_error()
    torch.manual_seed(seed)
    common = dict(attn_implementation="eager")
    if name == "gpt2":
        cfg = tr.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=SEQ,
                            bos_token_id=0, eos_token_id=0, **common)
        model = tr.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = tr.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=4 * HIDDEN, max_position_embeddings=SEQ, **common)
        model = tr.BertForMaskedLM(cfg)
    elif name in ("llama", "qwen2"):
        kind = tr.LlamaConfig if name == "llama" else tr.Qwen2Config
        cfg = kind(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                   num_key_value_heads=1, intermediate_size=4 * HIDDEN, max_position_embeddings=SEQ,
                   bos_token_id=0, eos_token_id=0, pad_token_id=0, **common)
        model = (tr.LlamaForCausalLM if name == "llama" else tr.Qwen2ForCausalLM)(cfg)
    else:
        raise KeyError(name)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    model.train()
    return model, {"input_ids": ids, "labels": ids.clone()}


def step(model, batch) -> None:
    model.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()


def peak(model, batch) -> int:
    for _ in range(2):  # the first step makes one-off allocations
        model.zero_grad(set_to_none=True)
        with AllocatorMeter() as meter:
            step(model, batch)
    return int(meter.peak_bytes)


def times(fns: dict, reps: int) -> dict:
    out = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def run(name: str, reps: int, time_limit_s: float) -> dict:
    model, batch = make(name)
    res = resident_bytes(model, batch)
    eager = copy.deepcopy(model)
    hf = copy.deepcopy(model)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    row = {"model": name, "resident": res, "eager": res + peak(eager, batch), "hf_ckpt": res + peak(hf, batch)}
    t0 = time.perf_counter()
    none = rematerialize(copy.deepcopy(model), example_kwargs=batch, budget=1.0, method="checkpoint-all",
                         granularity="op", cost_model="unit")
    row["no_remat_plan"] = res + peak(none, batch)
    row["no_remat_predicted"] = int(none.predicted_peak_bytes)
    row["no_remat_plan_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        rm = rematerialize(copy.deepcopy(model), example_kwargs=batch, budget=row["hf_ckpt"], method="auto",
                           time_limit_s=time_limit_s)
    except BudgetInfeasibleError as exc:
        row["at_hf_ckpt"] = {"plan": None, "error": str(exc)[:300]}
        return row
    plan_s = time.perf_counter() - t0
    measured = res + peak(rm, batch)
    t = times({"eager": lambda: step(eager, batch), "hf_ckpt": lambda: step(hf, batch),
               "remat": lambda: step(rm, batch)}, reps)
    row["at_hf_ckpt"] = {"plan": rm.result.method, "granularity": rm.extracted.granularity,
                         "nodes": int(rm.extracted.graph.n), "budget": int(rm.result.budget_bytes),
                         "measured": measured, "predicted": int(rm.predicted_peak_bytes), "plan_s": plan_s,
                         "eager_s": t["eager"], "hf_ckpt_s": t["hf_ckpt"], "remat_s": t["remat"]}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "bert", "llama", "qwen2"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "torch_floors.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models:
        r = run(name, args.reps, args.time_limit)
        rows.append(r)
        mib = 2.0 ** 20
        a = r["at_hf_ckpt"]
        line = (f"{name}: eager {r['eager'] / mib:.2f} MiB, HF ckpt {r['hf_ckpt'] / mib:.2f}, no-remat plan "
                f"{r['no_remat_plan'] / mib:.2f}")
        if a["plan"] is None:
            line += f"; at HF ckpt's peak: no plan ({a['error']})"
        else:
            line += (f"; at HF ckpt's peak: {a['plan']} ({a['granularity']}) measured {a['measured'] / mib:.2f} "
                     f"MiB, predicted {a['predicted'] / mib:.2f}, step x{a['remat_s'] / a['eager_s']:.2f} vs HF "
                     f"ckpt x{a['hf_ckpt_s'] / a['eager_s']:.2f} of eager")
        print(line, flush=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(__file__)).stdout.strip()
    except OSError:
        commit = ""
    meta = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "commit": commit,
            "torch": torch.__version__, "threads": args.threads, "load1": os.getloadavg()[0],
            "config": dict(layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq=SEQ, batch=BATCH, vocab=VOCAB)}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
