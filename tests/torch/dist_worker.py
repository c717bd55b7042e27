"""Two-rank gloo runs for ``test_distributed.py``, started as a script in a fresh process.

``python tests/torch/dist_worker.py SCENARIO OUT_DIR`` spawns two ranks
(``torch.multiprocessing.spawn``) on one machine with the gloo backend; each
rank runs SCENARIO and writes ``OUT_DIR/rank{r}.json`` with what it measured.
The test starts this script in its own session with a timeout and kills the
whole group if it overruns, so no rank outlives the test.

Scenarios
---------
``ddp``, ``fsdp``
    A small causal transformer (two pre-LN blocks, loss inside) with remat at
    budget 0.5 under ``DistributedDataParallel`` / FSDP2 ``fully_shard``,
    against the same wrapper around the plain model: three optimizer steps,
    each rank's gradients after the reduce compared on every step, and the
    rank's measured peak (the c10 allocator's rise during a step plus what was
    resident before it) against the plan's per-rank budget.
``fsdp-blocks``
    FSDP2 per block: ``fully_shard`` on each block and the root around the plain model, and
    ``remat_torch.distributed.fully_shard_blocks`` around the rematerialized one; as ``fsdp``.
``fsdp-blocks-plain``
    Plain ``fully_shard`` on the blocks of a rematerialized module: the error it gets.
``fsdp-compiled``, ``fsdp-compiled-blocks``
    ``torch.compile`` of an FSDP2-sharded model (whole, or per block) with remat's backend (see ``FSDP_COMPILED``).
``ddp-dtr``, ``fsdp-dtr``, ``fsdp-dtr-local``
    The live DTR runtime (budget: half the step's activation memory; ``-local``: heuristic ``h_dtr_local``) around
    the steps of the wrapped plain model, after two steps without it, against
    the same wrapper without DTR: gradients after the reduce on every step.
``ddp-compiled``, ``ddp-compiled-buckets``, ``ddp-compiled-one-graph``, ``ddp-compiled-inductor``
    ``torch.compile(DDP(model), backend=remat_torch.backend(budget))`` against eager DDP: three steps, the
    reduced gradients on every step, each step's measured rise, the plans (see ``DDP_COMPILED``).
``accelerate``
    Accelerate's ``prepare`` (DDP) and ``accelerator.backward``, three steps.
``trainer``
    Hugging Face ``Trainer`` with DDP (gloo, CPU) for three steps on a
    rematerialized tiny GPT-2, against the same Trainer run without remat.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F

TIMEOUT = datetime.timedelta(seconds=60)  # every collective gives up after this
STEPS = 3
# the transformer's size; the tests use the defaults, benchmarks/bench_distributed.py sets larger ones
D, LAYERS, SEQ, BATCH = (int(os.environ.get(f"REMAT_DIST_{k}", v))
                         for k, v in (("D", 32), ("LAYERS", 2), ("SEQ", 32), ("BATCH", 4)))


class Block(torch.nn.Module):
    """Pre-LN transformer block: causal self-attention and an MLP, residual around both."""

    def __init__(self, d, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(torch.nn.Module):
    """Token embedding, ``n_layers`` blocks, final LayerNorm and head; returns the LM loss."""

    def __init__(self, vocab=64, d=None, n_layers=None, seq=None):
        d, n_layers, seq = d or D, n_layers or LAYERS, seq or SEQ
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n_layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids, labels):
        x = self.tok(ids) + self.pos[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _batch(rank, step, batch=None, seq=None, vocab=64):
    batch, seq = batch or BATCH, seq or SEQ
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data, as a sampler gives
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return ids, ids.roll(-1, dims=1)


def _resident_bytes(tensors):
    """Bytes of the distinct storages of ``tensors`` (views and shared storages counted once)."""
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _local(t):
    """The rank's own shard of a DTensor (FSDP2), else the tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


def _train(model, rank, measure):
    """Three steps of SGD; per step the rank's gradients (after the reduce) and its measured rise."""
    from remat_torch.meter import AllocatorMeter

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads, rises, losses = [], [], []
    for step in range(STEPS):
        ids, labels = _batch(rank, step)
        opt.zero_grad(set_to_none=True)
        if measure:
            try:
                with AllocatorMeter() as m:
                    loss = model(ids, labels)
                    loss.backward()
                    del loss
                rises.append(m.peak_bytes)
            except RuntimeError as exc:   # the step compiled, and the backend measured it with meters of its own
                if "after the one that compiles" not in str(exc):
                    raise
                rises.append(None)   # the step ran; its rise cannot be measured
            loss = torch.tensor(0.0)  # dropped inside the meter
        else:
            loss = model(ids, labels)
            loss.backward()
        grads.append([_local(p.grad).detach().clone() for p in model.parameters()])
        losses.append(float(loss.detach()))
        opt.step()
    return grads, rises


def run_wrapped(rank, world, scenario, out_dir):
    """DDP or FSDP2 around the plain model and around the rematerialized one."""
    from remat_torch import distributed as rdist

    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    ids, labels = _batch(rank, 0)
    rm = rdist.rematerialize_shared(base, (ids, labels), budget=0.5, method="dtr", granularity="module",
                                    cost_model="flops")
    budget_bytes = int(rm.result.budget_bytes)
    if scenario == "ddp":
        from torch.nn.parallel import DistributedDataParallel as wrap
    else:
        from torch.distributed.fsdp import fully_shard as wrap
    ref, ours = wrap(plain), wrap(rm)
    resident = _resident_bytes([_local(p) for p in ours.parameters()] + list(ours.buffers()) + [ids, labels])
    g_ref, _ = _train(ref, rank, measure=False)
    g_ours, rises = _train(ours, rank, measure=True)
    diffs = [max(float((a - b).abs().max()) for a, b in zip(ga, gb)) for ga, gb in zip(g_ours, g_ref)]
    scale = max(float(g.abs().max()) for g in g_ref[0])
    overhead = rdist.comm_overhead_bytes(base, scenario, world)
    if scenario == "ddp":
        # DDP's gradient buckets (allocated when it is built, rebuilt in the second step), in DDP's own count:
        # measuring its construction with the allocator also catches the transient buffers of the parameter
        # broadcast, which gloo frees at a time that varies with load
        import re

        resident += sum(int(b) for b in re.findall(r"\d+", str(ours._get_ddp_logging_data()["bucket_sizes"])))
    rec = {"rank": rank, "diffs": diffs, "grad_scale": scale, "rises": rises, "resident": resident,
           "budget_bytes": budget_bytes, "predicted_peak_bytes": int(rm.predicted_peak_bytes),
           "fixed_bytes": int(rm.extracted.graph.fixed_bytes), "overhead_bytes": overhead,
           "recomputed": int(rm.result.schedule.compute_counts().max()), "solves": int(rm.solves),
           "method": rm.result.method}
    _write(out_dir, scenario, rank, rec)


def _train_compiled_beside(step, ref, be, rank):
    """Three steps of the compiled ``step`` (backend ``be``) and of the eager ``ref``: per step the largest
    gradient difference, the scale of the first step's gradients, our measured rises, and the backend's plans."""
    g_ref, _ = _train(ref, rank, measure=False)
    g_ours, rises = _train(step, rank, measure=True)
    diffs = [max(float((a - b).abs().max()) for a, b in zip(ga, gb)) for ga, gb in zip(g_ours, g_ref)]
    scale = max(float(g.abs().max()) for g in g_ref[0])
    plans = [{"budget_bytes": p.budget_bytes, "predicted_peak_bytes": p.predicted_peak_bytes,
              "measured_peak_bytes": p.measured_peak_bytes, "fixed_bytes": p.fixed_bytes,
              "default_peak_bytes": p.default_peak_bytes, "recomputed": p.n_recomputed, "source": p.source}
             for p in be.partitioner.plans]
    return diffs, scale, rises, plans


#: the compiled scenarios: (Inductor compiles the halves, 40 KB gradient buckets, Dynamo's DDPOptimizer, budget)
DDP_COMPILED = {
    "ddp-compiled": (False, False, True, 0.5),
    "ddp-compiled-buckets": (False, True, True, 0.9),
    "ddp-compiled-one-graph": (False, True, False, 0.5),
    "ddp-compiled-inductor": (True, False, True, 0.7),
}


def run_ddp_compiled(rank, world, scenario, out_dir):
    """``torch.compile(DDP(model), backend=remat_torch.backend(budget))`` against eager DDP around the plain
    model: three SGD steps, the reduced gradients compared on every step, the rank's measured rise in each step.

    With 40 KB gradient buckets (the model has 120 KB of parameters) Dynamo's DDPOptimizer splits the step into
    one graph per bucket, each planned on its own at ``budget`` of its own activation memory (``-buckets``);
    with ``optimize_ddp`` off the step stays one graph with one plan and DDP reduces the buckets after the
    compiled backward (``-one-graph``)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat_torch
    from remat_torch import distributed as rdist

    inductor, small_buckets, optimize_ddp, budget = DDP_COMPILED[scenario]
    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    buckets = {}
    if small_buckets:
        buckets = {"bucket_cap_mb": 0.04}
        # DDPOptimizer refuses a first bucket larger than the others; the first one's cap is 1 MiB by default
        torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 40_000
    ref, ddp = DDP(plain, **buckets), DDP(base, **buckets)
    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = optimize_ddp
    be = remat_torch.backend(budget=budget, inductor=inductor, time_limit_s=5)
    step = torch.compile(ddp, backend=be)
    ids, labels = _batch(rank, 0)
    resident = _resident_bytes(list(base.parameters()) + list(base.buffers()) + [ids, labels])
    diffs, scale, rises, plans = _train_compiled_beside(step, ref, be, rank)
    rec = {"rank": rank, "diffs": diffs, "grad_scale": scale, "rises": rises, "resident": resident,
           "plans": plans, "overhead_bytes": rdist.comm_overhead_bytes(base, "ddp", world)}
    torch._dynamo.config.optimize_ddp = True
    _write(out_dir, scenario, rank, rec)


#: the compiled FSDP2 scenarios: (blocks sharded on their own, budget)
FSDP_COMPILED = {
    "fsdp-compiled": (False, 0.5),
    "fsdp-compiled-blocks": (True, 0.6),
}


def run_fsdp_compiled(rank, world, scenario, out_dir):
    """``torch.compile(model, backend=remat_torch.backend(budget, inductor=False))`` on an FSDP2-sharded model
    (``fully_shard`` on the whole model, or on each block and then the root), against the same sharding of the
    plain model in eager mode: three SGD steps, the reduced gradient shards on every step, each step's measured
    rise, the plans. FSDP2's hooks stay outside the compiled graphs (Dynamo's ``skip_fsdp_hooks``), which see
    the gathered parameters."""
    from torch.distributed.fsdp import fully_shard

    import remat_torch
    from remat_torch import distributed as rdist

    blocks, budget = FSDP_COMPILED[scenario]
    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    overhead = rdist.comm_overhead_bytes(base, "fsdp", world, blocks=base.blocks if blocks else None)
    if blocks:
        for m in (plain, base):
            for blk in m.blocks:
                fully_shard(blk)
    ref, ours = fully_shard(plain), fully_shard(base)
    torch._dynamo.reset()
    graphs0 = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    be = remat_torch.backend(budget=budget, inductor=False, method="dtr", time_limit_s=5)
    step = torch.compile(ours, backend=be)
    ids, labels = _batch(rank, 0)
    resident = _resident_bytes([_local(p) for p in ours.parameters()] + list(ours.buffers()) + [ids, labels])
    diffs, scale, rises, plans = _train_compiled_beside(step, ref, be, rank)
    # the per-rank budget this run kept (what was resident, the gathered parameters, FSDP2's buffers beyond the
    # shard, the plan's budget), turned back into the backend's by compiled_budget_bytes
    nbytes = rdist._param_bytes(plain)
    shard = resident - ids.nbytes - labels.nbytes
    per_rank = resident + nbytes + overhead - shard + plans[0]["budget_bytes"]
    back = rdist.compiled_budget_bytes(plain, per_rank, "fsdp", world, resident_bytes=resident,
                                       blocks=plain.blocks if blocks else None)
    rec = {"rank": rank, "diffs": diffs, "grad_scale": scale, "rises": rises, "resident": resident,
           "backend_budget_bytes": back, "per_rank_budget_bytes": per_rank, "input_bytes": ids.nbytes + labels.nbytes,
           "plans": plans, "overhead_bytes": overhead, "param_bytes": nbytes,
           "graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) - graphs0,
           "grad_types": sorted({type(p.grad).__name__ for p in ours.parameters()})}
    _write(out_dir, scenario, rank, rec)


def _write(out_dir, scenario, rank, rec):
    import torch.distributed as dist

    dist.barrier()
    with open(os.path.join(out_dir, f"{scenario}-rank{rank}.json"), "w") as f:
        json.dump(rec, f)


def _params(model):
    return [_local(p).detach().clone() for p in model.parameters()]


def _max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def run_dtr(rank, world, scenario, out_dir):
    """The live DTR runtime around the step of a DDP- or FSDP2-wrapped plain model, against no DTR."""
    import remat_torch
    from remat_torch.dtr import activation_peak_bytes

    if scenario.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel as wrap
    else:
        from torch.distributed.fsdp import fully_shard as wrap
    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    probe = copy.deepcopy(plain)
    ref, ours = wrap(plain), wrap(base)
    ids, labels = _batch(rank, 0)
    peak = activation_peak_bytes(lambda: probe(ids, labels).backward())
    # h_dtr_local evicts FSDP2's gathered buffers: before issue 39's fix the runtime replayed them (a rank died
    # with SIGSEGV in the all-gather, or the ranks' collectives fell out of step)
    rt = remat_torch.dtr(budget=int(0.5 * peak), heuristic="h_dtr_local" if scenario.endswith("-local") else "h_dtr")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    diffs, stats = [], []
    # two plain steps first: FSDP2 makes its buffers lazily in the first step, DDP rebuilds its buckets in the
    # second; made inside the DTR block, those long-lived buffers are the runtime's tensors and the wrappers
    # fail (FSDP2: "resize_() on an invalid python storage"; DDP: "data is not allocated yet")
    WARM = 2
    for step in range(STEPS + WARM):
        ids, labels = _batch(rank, step)
        opt_ref.zero_grad(set_to_none=True)
        ref(ids, labels).backward()
        opt.zero_grad(set_to_none=True)
        if step < WARM:
            ours(ids, labels).backward()
        else:
            with rt:
                ours(ids, labels).backward()
            stats.append({k: rt.stats[k] for k in ("peak_bytes", "evictions", "rematerializations")})
        diffs.append(_max_diff([_local(p.grad) for p in ours.parameters()],
                               [_local(p.grad) for p in ref.parameters()]))
        opt_ref.step()
        opt.step()
    rec = {"rank": rank, "diffs": diffs, "stats": stats, "budget_bytes": int(0.5 * peak),
           "grad_types": sorted({type(_local(p.grad)).__name__ for p in ours.parameters()})}
    _write(out_dir, scenario, rank, rec)


def run_fsdp_blocks(rank, world, out_dir, scenario="fsdp-blocks", gathered=None):
    """FSDP2 per block: ``fully_shard`` on each transformer block and then the root, around the plain model
    (FSDP2's own hooks gather block by block) and around the rematerialized one
    (:func:`remat_torch.distributed.fully_shard_blocks`: remat first, then shard); three SGD steps, the reduced
    gradients (each rank's shards) on every step, the rank's measured peak against the per-rank model."""
    from torch.distributed.fsdp import fully_shard

    from remat_torch import distributed as rdist
    from remat_torch import rematerialize

    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    ids, labels = _batch(rank, 0)
    rm = rematerialize(base, (ids, labels), budget=0.5, method="dtr", granularity="module", cost_model="flops")
    for blk in plain.blocks:
        fully_shard(blk)
    ref = fully_shard(plain)
    ours = rdist.fully_shard_blocks(rm, base.blocks, gathered=gathered)
    resident = _resident_bytes([_local(p) for p in ours.parameters()] + list(ours.buffers()) + [ids, labels])
    g_ref, _ = _train(ref, rank, measure=False)
    g_ours, rises = _train(ours, rank, measure=True)
    diffs = [max(float((a - b).abs().max()) for a, b in zip(ga, gb)) for ga, gb in zip(g_ours, g_ref)]
    scale = max(float(g.abs().max()) for g in g_ref[0])
    plan = (int(rm.result.budget_bytes), int(rm.predicted_peak_bytes), int(rm.extracted.graph.fixed_bytes),
            int(rm.result.schedule.compute_counts().max()), rm.result.method)
    # a batch of another shape after sharding: a new plan, traced with the blocks' FSDP2 hooks muted
    new_shape = []
    for m in (ref, ours):
        m.zero_grad(set_to_none=True)
        m(*_batch(rank, STEPS, batch=BATCH // 2)).backward()
        new_shape.append([_local(p.grad).detach().clone() for p in m.parameters()])
    rec = {"rank": rank, "diffs": diffs, "grad_scale": scale, "rises": rises, "resident": resident,
           "new_shape_diff": _max_diff(*new_shape), "num_plans": rm.num_plans,
           "budget_bytes": plan[0], "predicted_peak_bytes": plan[1], "fixed_bytes": plan[2],
           "overhead_bytes": rdist.comm_overhead_bytes(base, "fsdp", world, blocks=base.blocks, gathered=gathered),
           "overhead_whole_bytes": rdist.comm_overhead_bytes(base, "fsdp", world),
           "recomputed": plan[3], "method": plan[4],
           "sharded": sorted({type(p).__name__ for p in ours.parameters()}),
           "grad_types": sorted({type(p.grad).__name__ for p in ours.parameters()}),
           "block_bytes": [rdist._param_bytes(blk) for blk in base.blocks], "gathered": gathered}
    if gathered is not None:
        rec["gathers"] = ours._block_gather.gathers
    _write(out_dir, scenario, rank, rec)


def run_fsdp_blocks_plain(rank, world, out_dir):
    """Plain ``fully_shard`` per block of a rematerialized module (not through ``fully_shard_blocks``): refused
    with a clear error at the first step, since the plan never calls the blocks' forward."""
    from torch.distributed.fsdp import fully_shard

    from remat_core.errors import RematError
    from remat_torch import rematerialize

    torch.manual_seed(0)
    model = TinyLM()
    ids, labels = _batch(rank, 0)
    rm = rematerialize(model, (ids, labels), budget=1.0, method="checkpoint-all", granularity="module",
                       cost_model="unit")
    for blk in model.blocks:
        fully_shard(blk)
    fsdp = fully_shard(rm)
    try:
        fsdp(ids, labels).backward()
        err = None
    except RematError as exc:
        err = str(exc)
    _write(out_dir, "fsdp-blocks-plain", rank, {"rank": rank, "error": err})


def run_accelerate(rank, world, out_dir):
    """Accelerate's ``prepare`` (DDP on two ranks) and ``accelerator.backward``: three steps."""
    from accelerate import Accelerator

    from remat_torch import distributed as rdist

    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    base = TinyLM()
    plain = TinyLM()
    plain.load_state_dict(base.state_dict())
    ids, labels = _batch(rank, 0)
    rm = rdist.rematerialize_shared(base, (ids, labels), budget=0.5, method="dtr", granularity="module",
                                    cost_model="flops")
    losses = {}
    for name, model in (("plain", plain), ("remat", rm)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = acc.prepare(model, opt)
        out = []
        for step in range(STEPS):
            ids, labels = _batch(rank, step)
            opt.zero_grad()
            loss = model(ids, labels)
            acc.backward(loss)
            opt.step()
            out.append(float(loss.detach()))
        losses[name] = out
    rec = {"rank": rank, "losses": losses["remat"], "losses_ref": losses["plain"],
           "param_diff": _max_diff(_params(base), _params(plain)), "wrapped": type(model).__name__,
           "distributed_type": str(acc.distributed_type), "num_processes": acc.num_processes}
    _write(out_dir, "accelerate", rank, rec)


def run_trainer(rank, world, out_dir):
    """HF ``Trainer`` with DDP (gloo, CPU) for three steps, with and without remat."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    from hf_cases import make
    from remat_torch import distributed as rdist

    model, batch = make("gpt2")
    ref = copy.deepcopy(model)
    # plan the call Trainer makes, so that its steps use the shared plan: Trainer sets config.use_cache = False
    # when it is built (a model attribute: part of a plan's key) and passes `num_items_in_batch` (a 0-d float32
    # tensor with transformers 5: the label count over all ranks)
    model.config.use_cache = False
    batch = dict(batch, num_items_in_batch=torch.tensor(float(batch["labels"].numel() * world)))
    rm = rdist.rematerialize_shared(model, example_kwargs=batch, budget=0.5, method="dtr",
                                    granularity="module")
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 64, (16, 32), generator=torch.Generator()
                                                                 .manual_seed(0))]
    losses = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in (("remat", rm), ("plain", ref)):
            args = TrainingArguments(output_dir=os.path.join(tmp, name), max_steps=STEPS, report_to=[],
                                     use_cpu=True, ddp_backend="gloo", per_device_train_batch_size=4,
                                     save_strategy="no", logging_steps=1, learning_rate=1e-3, seed=0,
                                     dataloader_num_workers=0, disable_tqdm=True)
            trainer = Trainer(model=m, args=args, train_dataset=data)
            trainer.train()
            losses[name] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
            if name == "remat":
                wrapped = type(trainer.model_wrapped).__name__
                rec_world = trainer.args.world_size
                solves = int(rm.solves)
                steps = trainer.state.global_step
    rec = {"rank": rank, "losses": losses["remat"], "losses_ref": losses["plain"],
           "param_diff": _max_diff(_params(model), _params(ref)), "wrapped": wrapped, "world_size": rec_world,
           "solves": solves, "global_step": steps}
    _write(out_dir, "trainer", rank, rec)


def _die_with_parent():
    """Ask Linux to kill this process when its parent dies (``PR_SET_PDEATHSIG``), so that no rank outlives
    the test or benchmark that started it, however that one ends; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _entry(rank, world, scenario, out_dir, port):
    import torch.distributed as dist

    _die_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        for name in scenario.split(","):
            if name in ("ddp", "fsdp"):
                run_wrapped(rank, world, name, out_dir)
            elif name in DDP_COMPILED:
                run_ddp_compiled(rank, world, name, out_dir)
            elif name in FSDP_COMPILED:
                run_fsdp_compiled(rank, world, name, out_dir)
            elif name in ("ddp-dtr", "fsdp-dtr", "fsdp-dtr-local"):
                run_dtr(rank, world, name, out_dir)
            elif name == "fsdp-blocks":
                run_fsdp_blocks(rank, world, out_dir)
            elif name == "fsdp-blocks-on-use":
                run_fsdp_blocks(rank, world, out_dir, name, gathered=1)
            elif name == "fsdp-blocks-plain":
                run_fsdp_blocks_plain(rank, world, out_dir)
            elif name == "accelerate":
                run_accelerate(rank, world, out_dir)
            elif name == "trainer":
                run_trainer(rank, world, out_dir)
            else:
                raise SystemExit(f"unknown scenario {name!r}")
    finally:
        dist.destroy_process_group()


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    _die_with_parent()
    scenario, out_dir = argv[1], argv[2]
    world = 2
    torch.multiprocessing.spawn(_entry, args=(world, scenario, out_dir, _free_port()), nprocs=world, join=True)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", ".."), here, os.path.join(here, "..")]
    main(sys.argv)
