"""Hugging Face models under a memory budget: remat_torch (eager-executed and compiled) against HF
checkpointing and torch.compile's own ``activation_memory_budget``.

Run: ``.venv/bin/python benchmarks/bench_torch_models.py [--quick] [--device cuda]``

GPT-2, BERT, Llama, Qwen2, ViT and T5 (``benchmarks/_hf_models.py``: random
weights, each returning its own loss; sizes in ``SIZES``, chosen so that an
eager step takes 0.2-1 s on one CPU thread). For every model, every method
and setting (a *config*) is one worker process:

* **eager** and **HF checkpointing** (``activation_checkpointing_enable``
  every 1 and every 2 layers);
* **torch.compile** (Inductor) with ``torch._functorch.config.activation_memory_budget``
  at ``--compile-budgets``; the worker checks that compile's partitioner ran
  (a partitioner object that counts its calls);
* **ours**: ``rematerialize(..., method="auto", granularity="auto")`` at
  ``--fractions`` of activation memory, executed op by op by remat_torch;
* **ours compiled**: ``torch.compile(model, backend=remat_torch.backend(budget=f))``
  at ``--ours-compiled-budgets``.

For ours and ours compiled the fractions go down until one is infeasible; then
one more worker plans at the smallest budget the error names (in bytes, 1%
above), and the series stops: "from 1.0 down to our smallest plan".

Fairness. Each worker is a fresh process with a fresh, empty Inductor/Triton
cache directory (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``) and one
compile thread, so *time to first step* (from the untouched model to the end
of its first training step: tracing, planning, compiling, any compile-time
check) is a cold start for every config alike. The workers of one model are
started one after another (their first steps never overlap), stay alive, and
are then timed in interleaved rounds: the parent asks each worker in turn for
one step (order rotated every round), so a drift of the machine's speed falls
on every config alike. Step time is the median over rounds.

Memory: one meter for every config (CPU: :class:`remat_torch.meter.AllocatorMeter`;
CUDA: ``torch.cuda.max_memory_allocated``) over one step after a warm-up
step, gradients set to ``None`` before it, plus the bytes resident before the
step (parameters, buffers, inputs).

Ctrl-C (or SIGTERM) stops the workers (each also ends itself within a second
when the parent dies) and removes the cache directories.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import torch  # noqa: E402
from torch._inductor.custom_graph_pass import CustomPartitionerFn  # noqa: E402

MiB = 2 ** 20

#: per model: layers, hidden, seq, batch; eager steps of 0.2-1 s on one thread of this 2-core CPU
SIZES = {
    "gpt2": dict(layers=2, hidden=128, seq=128, batch=12),
    "bert": dict(layers=2, hidden=128, seq=128, batch=16),
    "llama": dict(layers=2, hidden=128, seq=128, batch=12),
    "qwen2": dict(layers=2, hidden=128, seq=128, batch=12),
    "vit": dict(layers=2, hidden=128, seq=64, batch=24),
    "t5": dict(layers=2, hidden=128, seq=128, batch=8),
}
QUICK_SIZE = dict(layers=1, hidden=64, seq=32, batch=2)


# ------------------------------------------------------------------ the worker (one config, one process)

def _die_with_parent():
    """End this process when the parent dies (a thread watches the parent's pid; ``PR_SET_PDEATHSIG`` would fire
    when the parent *thread* that started the worker ends, and the parent starts workers from a thread pool)."""
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _step(model, inputs):
    model.zero_grad(set_to_none=True)
    model(*inputs).backward()


def _resident_bytes(model, inputs) -> int:
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()) + list(inputs):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _measured_peak(model, inputs, resident: int) -> int:

    _step(model, inputs)  # warm-up: one-off allocations
    model.zero_grad(set_to_none=True)
    if inputs[0].device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        model(*inputs).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base + resident
    from remat_torch.meter import AllocatorMeter

    with AllocatorMeter() as meter:
        model(*inputs).backward()
    return meter.peak_bytes + resident


def _timed_step(model, inputs) -> float:
    """One step's time: CUDA events on a GPU, the wall clock on CPU."""
    if inputs[0].device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        _step(model, inputs)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    _step(model, inputs)
    return time.perf_counter() - t0


def _hf_checkpointed(m, every_n: int):
    hf = m.hf
    if hasattr(hf, "activation_checkpointing_enable"):
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False},
                                           every_n_layers=every_n)
    elif every_n == 1:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise NotImplementedError("this transformers version checkpoints every layer only")
    m.train()
    return m


class CheckedMinCut(CustomPartitionerFn):
    """compile's own partitioner (``activation_memory_budget`` as set), counting its calls: a worker whose
    partitioner never ran reused compiled code from somewhere and is refused. Module level: Inductor pickles
    its settings, this object included, for its cache key."""

    def __init__(self, budget: float):
        self.calls = 0
        self.budget = budget
        self.seen: list = []  # activation_memory_budget in force at each call

    def __call__(self, gm, joint_inputs, **kwargs):
        import torch._functorch.config as fconfig
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        self.calls += 1
        self.seen.append(fconfig.activation_memory_budget)
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    def uuid(self):
        return f"checked-min-cut-{self.budget}-{os.getpid()}"


def _compile_with_budget(m, budget: float):
    """torch.compile (Inductor) at ``activation_memory_budget=budget``: (compiled model, its partitioner, the
    config patch to hold during the first step)."""
    import torch._functorch.config as fconfig
    from torch._inductor.compile_fx import compile_fx

    part = CheckedMinCut(budget)

    def be(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches={"custom_partitioner_fn": part})

    return torch.compile(m, backend=be), part, fconfig.patch(activation_memory_budget=budget)


def _setup_and_first_step(spec, m, inputs) -> tuple:
    """Make config ``spec`` of model ``m`` and run its first step: (model to time, info for the table)."""
    kind, budget = spec["kind"], spec.get("budget")
    info: dict = {}
    if kind == "eager":
        _step(m, inputs)
        return m, info
    if kind == "hf":
        m = _hf_checkpointed(m, budget)
        _step(m, inputs)
        return m, info
    if kind == "compile":
        cm, part, patch = _compile_with_budget(m, budget)
        with patch:  # forward and backward both compile inside the first step
            _step(cm, inputs)
        if part.calls == 0:
            raise RuntimeError(f"compile's partitioner did not run at budget {budget} (compiled code was reused)")
        if any(b != budget for b in part.seen):
            raise RuntimeError(f"compile's partitioner ran at activation_memory_budget {part.seen}, not {budget}")
        info["graphs"] = part.calls
        return cm, info
    if kind == "ours":
        from remat_torch import rematerialize

        rm = rematerialize(m, inputs, budget=budget, method="auto", granularity="auto",
                           cost_model=spec["cost_model"], workspace="measure", time_limit_s=spec["time_limit"])
        _step(rm, inputs)
        res = rm.result
        info.update(predicted=int(rm.executor.peak_bytes), solver=f"{res.method} ({res.status.value})",
                    recomputed=int((res.schedule.compute_counts() - 1).sum()), nodes=rm.extracted.graph.n,
                    granularity=rm.extracted.granularity)
        return rm, info
    if kind == "ours-compiled":
        from remat_torch import backend

        be = backend(budget, time_limit_s=spec["time_limit"])
        cm = torch.compile(m, backend=be)
        _step(cm, inputs)  # traces, plans, compiles, checks the compiled step's peak
        plans = be.partitioner.plans
        if not plans:
            raise RuntimeError("remat's partitioner did not run")
        p = plans[-1]
        info.update(predicted_above=int(p.predicted_peak_bytes), checked_above=p.measured_peak_bytes,
                    solver=f"{p.source}, {p.attempts} compile(s)", plan_s=p.plan_time_s,
                    recomputed=p.n_recomputed, graphs=len(plans))
        return cm, info
    raise ValueError(f"unknown config kind {kind!r}")


def _infeasible(exc):
    """(smallest bytes, how they count) if ``exc`` (or what it wraps) says the budget is below every plan."""
    from remat_core.errors import BudgetInfeasibleError
    from remat_torch import CompiledBudgetError

    err = exc
    while err is not None:
        if isinstance(err, BudgetInfeasibleError):
            return err.min_budget_bytes
        if isinstance(err, CompiledBudgetError):
            return err.smallest_bytes
        err = getattr(err, "inner_exception", None) or err.__cause__ or err.__context__
    return None


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the C++ compiler runs Inductor spawns)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def worker(spec: dict) -> None:
    """One config in this process: build, first step, peak; then one timed step per ``step`` line on stdin.

    Replies are JSON lines on the original stdout; everything the libraries print goes to ``spec["log"]``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    logfd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)

    def send(**msg):
        reply.write(json.dumps(msg) + "\n")

    from _hf_models import make_model

    torch.set_num_threads(spec["threads"])
    m, inputs = make_model(spec["model"], dropout=spec["dropout"], **spec["size"])
    m, inputs = m.to(spec["device"]), tuple(x.to(spec["device"]) for x in inputs)
    resident = _resident_bytes(m, inputs)
    t0, cpu0 = time.perf_counter(), _cpu_s()
    try:
        model, info = _setup_and_first_step(spec, m, inputs)
    except Exception as exc:
        smallest = _infeasible(exc)
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        send(status="infeasible" if smallest else "error", smallest=smallest, message=msg,
             first_s=time.perf_counter() - t0, first_cpu_s=_cpu_s() - cpu0)
        return
    first_s, first_cpu_s = time.perf_counter() - t0, _cpu_s() - cpu0
    peak = _measured_peak(model, inputs, resident)
    send(status="ready", first_s=first_s, first_cpu_s=first_cpu_s, peak=peak, resident=resident, info=info)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        send(time_s=_timed_step(model, inputs))


# ------------------------------------------------------------------ the parent

class Workers:
    """The worker processes of one run and their cache folders; ``close()`` ends and removes them all."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="remat-bench-models-")
        self.procs: list = []
        self.n = 0
        self.lock = threading.Lock()
        self.closed = False

    def start(self, spec: dict, timeout_s: float) -> tuple:
        """Start the worker of ``spec`` and wait for its first reply: (process or None, reply)."""
        with self.lock:
            if self.closed:
                return None, {"status": "error", "message": "interrupted"}
            self.n += 1
            folder = os.path.join(self.root, f"w{self.n}")
            os.makedirs(folder)
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(folder, "triton"), TORCHINDUCTOR_COMPILE_THREADS="1",
                   HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        spec = dict(spec, log=os.path.join(folder, "log.txt"))
        with self.lock:
            if self.closed:
                return None, {"status": "error", "message": "interrupted"}
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                 start_new_session=True)
            self.procs.append(p)
        msg = self._read(p, timeout_s, spec["log"])
        if msg.get("status") != "ready":
            self.stop(p)
            return None, msg
        return p, msg

    def _read(self, p, timeout_s: float, log_path: str | None = None) -> dict:
        ready, _, _ = select.select([p.stdout], [], [], timeout_s)
        line = p.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        why = f"no reply in {timeout_s:.0f} s" if not ready else f"exited with {p.poll()}"
        tail = ""
        if log_path and os.path.exists(log_path):
            with open(log_path, errors="replace") as f:
                tail = " | ".join(f.read().strip().splitlines()[-3:])[-400:]
        return {"status": "error", "message": f"worker {why}: {tail}"}

    def step(self, p, timeout_s: float) -> float:
        p.stdin.write("step\n")
        p.stdin.flush()
        msg = self._read(p, timeout_s)
        if "time_s" not in msg:
            raise RuntimeError(f"a worker failed while timed: {msg.get('message')}")
        return msg["time_s"]

    def stop(self, p):
        if p.poll() is None:
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
                p.wait()
        with self.lock:
            if p in self.procs:
                self.procs.remove(p)

    def close(self):
        with self.lock:
            self.closed = True
            procs, self.procs = list(self.procs), []
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def plan_configs(name: str, args) -> list:
    """The fixed configs of one model; the fractions of ours run as series (see :func:`run_model`)."""
    out = [{"kind": "eager", "method": "HF checkpointing", "label": "eager (no checkpointing)"}]
    for n in args.hf_every:
        out.append({"kind": "hf", "budget": n, "method": "HF checkpointing", "label": f"checkpoint every {n} layer(s)"})
    for b in args.compile_budgets:
        out.append({"kind": "compile", "budget": b, "method": "torch.compile",
                    "label": f"activation_memory_budget={b:g}"})
    return out


def run_model(name: str, args, workers: Workers, log) -> dict:
    """Every config of model ``name``: first steps (``args.jobs`` at a time), then interleaved timing."""
    from concurrent.futures import ThreadPoolExecutor

    size = QUICK_SIZE if args.quick else SIZES[name]
    common = {"model": name, "size": size, "device": args.device, "threads": args.threads,
              "dropout": not args.no_dropout, "cost_model": args.cost_model, "time_limit": args.time_limit}
    load_start = os.getloadavg()
    rows, live, lock = [], [], threading.Lock()

    def launch(cfg) -> dict:
        t0 = time.perf_counter()
        p, msg = workers.start(dict(common, **cfg), args.config_timeout)
        row = dict(cfg, model=name, status=msg["status"], first_s=msg.get("first_s"),
                   first_cpu_s=msg.get("first_cpu_s"), wall_s=time.perf_counter() - t0, peak=msg.get("peak"),
                   resident=msg.get("resident"), message=msg.get("message"), smallest=msg.get("smallest"),
                   **msg.get("info", {}))
        with lock:
            rows.append(row)
            if p is not None:
                live.append((p, row))
        if p is not None:
            log(f"{name}: {cfg['method']} {cfg['label']}: first step {row['first_s']:.1f} s "
                f"({row['first_cpu_s']:.1f} CPU s), peak {row['peak'] / MiB:.2f} MiB")
        else:
            log(f"{name}: {cfg['method']} {cfg['label']}: {msg['status']}: {msg.get('message')}")
        return row

    def series(kind, method, budgets):
        """Fractions going down until one is infeasible, then once at the smallest budget its error names."""
        for b in budgets:
            row = launch({"kind": kind, "budget": b, "method": method, "label": f"budget={b:g}", "fraction": b})
            if row["status"] == "ready":
                continue
            if row["status"] == "infeasible" and row["smallest"]:
                # ours (eager-executed): total bytes; ours compiled: bytes above the pre-step level
                at = int(row["smallest"] * 1.01)
                launch({"kind": kind, "budget": at, "method": method, "smallest_found": True,
                        "label": f"budget={at / MiB:.2f} MiB (smallest found)"})
            return

    tasks = [(series, ("ours", "ours", args.fractions))]
    if name in args.compile_models:
        tasks.insert(0, (series, ("ours-compiled", "ours compiled", args.ours_compiled_budgets)))
    tasks += [(launch, (cfg,)) for cfg in plan_configs(name, args)]
    pool = ThreadPoolExecutor(max_workers=args.jobs)  # each task starts its workers one at a time
    try:
        for fut in [pool.submit(fn, *a) for fn, a in tasks]:
            fut.result()
    except BaseException:  # Ctrl-C: end the workers first, so that no thread waits on one
        workers.close()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    order = {id(cfg): i for i, cfg in enumerate(rows)}
    kinds = ["eager", "hf", "compile", "ours", "ours-compiled"]
    rows.sort(key=lambda r: (kinds.index(r["kind"]), order[id(r)]))
    live.sort(key=lambda pr: (kinds.index(pr[1]["kind"]), order[id(pr[1])]))
    log(f"{name}: {len(live)} configs ready; timing {args.rounds} interleaved rounds")
    times = {id(row): [] for _, row in live}
    for p, row in live:  # one untimed step each after the peak's steps
        workers.step(p, args.config_timeout)
    for r in range(args.rounds):
        for p, row in live[r % len(live):] + live[:r % len(live)]:
            times[id(row)].append(workers.step(p, args.config_timeout))
    for p, row in live:
        row["time_s"] = statistics.median(times[id(row)])
        row["times_s"] = times[id(row)]
        workers.stop(p)
    eager = next((r["time_s"] for r in rows if r["kind"] == "eager" and "time_s" in r), None)
    for r in rows:
        if "time_s" in r and eager:
            r["overhead_eager"] = r["time_s"] / eager
    return {"rows": rows, "size": size, "load_start": load_start, "load_end": os.getloadavg()}


# ------------------------------------------------------------------ report

def _ours(r):
    return r["method"].startswith("ours")


def goals(rows: list) -> dict:
    """Issue 40's three goals on one model's rows (only configs that ran)."""
    ran = [r for r in rows if "time_s" in r]
    ours = [r for r in ran if _ours(r)]
    peers = [r for r in ran if not _ours(r) and r["kind"] != "eager"]
    checks = []
    for peer in peers:
        fit = [o for o in ours if o["peak"] <= peer["peak"]]
        best = min(fit, key=lambda o: o["time_s"]) if fit else None
        checks.append((peer, best, best is not None and best["time_s"] <= peer["time_s"]))
    floor_ours = min((o["peak"] for o in ours), default=None)
    floor_peers = min((p["peak"] for p in ran if not _ours(p)), default=None)
    def first(kind):  # CPU seconds: the load of other jobs on the machine does not inflate them
        return [r["first_cpu_s"] for r in ran if r["kind"] == kind]

    return {"equal_memory": checks, "floor_ours": floor_ours, "floor_peers": floor_peers,
            "first_compile": first("compile"), "first_ours_compiled": first("ours-compiled"),
            "first_ours": first("ours")}


def _range(xs):
    return f"{min(xs):.0f}-{max(xs):.0f} s (median {statistics.median(xs):.0f})" if xs else "none ran"


def render(results: dict, args, wall_s: float, command: str, machine: str) -> str:
    import _report

    table, eq, summary = [], [], []
    for name, res in results.items():
        for r in res["rows"]:
            notes = []
            if r.get("solver"):
                notes.append(r["solver"])
            if r.get("recomputed") is not None:
                notes.append(f"{r['recomputed']} recomputed")
            if r.get("predicted"):
                notes.append(f"predicted {r['predicted'] / MiB:.2f} MiB")
            if r.get("predicted_above") is not None:
                notes.append(f"predicted {(r['predicted_above'] + r['resident']) / MiB:.2f} MiB")
            if r.get("graphs"):
                notes.append(f"{r['graphs']} graph(s)")
            if r["status"] != "ready":
                notes.append(f"**{r['status']}**: {r['message']}")
            first = f"{r['first_cpu_s']:.1f} ({r['first_s']:.1f})" if r.get("first_s") is not None else "-"
            table.append([name, r["method"], r["label"], r["peak"] / MiB if r.get("peak") else "-",
                          r["time_s"] * 1e3 if "time_s" in r else "-", r.get("overhead_eager", "-"), first,
                          "; ".join(notes)])
        g = goals(res["rows"])
        met = sum(ok for _, _, ok in g["equal_memory"])
        for peer, best, ok in g["equal_memory"]:
            eq.append([name, f"{peer['method']}: {peer['label']}", peer["peak"] / MiB, peer["overhead_eager"],
                       f"{best['method']}: {best['label']}" if best else "none of ours at or below this peak",
                       best["peak"] / MiB if best else "-", best["overhead_eager"] if best else "-",
                       "met" if ok else "missed"])
        below = (g["floor_ours"] is not None and g["floor_peers"] is not None and g["floor_ours"] < g["floor_peers"])
        first_ok = (bool(g["first_compile"]) and bool(g["first_ours_compiled"])
                    and statistics.median(g["first_ours_compiled"]) <= statistics.median(g["first_compile"]))
        first_verdict = "met" if first_ok else ("missed" if g["first_ours_compiled"] else "not measured")
        summary.append([
            name, f"{met} of {len(g['equal_memory'])}",
            (f"{'met' if below else 'missed'}: ours {g['floor_ours'] / MiB:.2f} vs peers "
             f"{g['floor_peers'] / MiB:.2f} MiB") if g["floor_ours"] and g["floor_peers"] else "-",
            f"{first_verdict}: ours compiled {_range(g['first_ours_compiled'])}; "
            f"compile {_range(g['first_compile'])}; ours eager-executed {_range(g['first_ours'])}",
            f"{res['load_start'][0]:.1f} / {res['load_end'][0]:.1f}"])
    sizes = "; ".join(f"{n} {r['size']['layers']} layers, width {r['size']['hidden']}, batch {r['size']['batch']} x "
                      f"{r['size']['seq']}" for n, r in results.items())
    return "\n".join([
        f"## torch-models{_suffix(args.device, '-')}" + (f" ({args.device_name})" if args.device == "cuda" else ""),
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}; {args.threads} intra-op thread(s), device {args.device}; run time "
        f"{wall_s:.0f} s. The machine was shared with other jobs: the load average (1 min) at the start and end "
        "of each model is in the last table. Compare ratios within a model, measured in this one run.",
        "",
        f"Models (`benchmarks/_hf_models.py`, random weights, own loss, eager attention, dropout "
        f"{'off' if args.no_dropout else 'as configured'}): {sizes}. Every config is a worker process of its own "
        "with empty Inductor/Triton cache folders (cold: *first step* is the time from the untouched model to the end "
        "of its first training step, including tracing, planning, compiling and any compile-time check). *Peak*: "
        "the allocator meter over one step plus the parameters, buffers and inputs resident before it. *Step / "
        f"eager*: median of {args.rounds} interleaved rounds (one step of each worker in turn, order rotated).",
        "",
        _report.table(["model", "method", "setting", "measured peak MiB", "step ms", "step / eager",
                       "first step CPU s (wall s)", "notes"], table),
        "",
        "### Issue 40's goals",
        "",
        "*Equal memory*: for each peer point (HF checkpointing, torch.compile), our fastest config at or below its "
        "peak must take at most its step time. *Memory no peer reaches*: our smallest measured peak below every "
        "peer's. *First step*: the median over ours-compiled configs at most the median over torch.compile's, in CPU "
        "seconds of the worker and the compiler processes it ran (wall seconds depend on the machine's load, and "
        f"{args.jobs} configs made their first steps at a time).",
        "",
        _report.table(["model", "equal memory: met", "memory no peer reaches", "time to first step",
                       "load avg start / end"], summary),
        "",
        _report.table(["model", "peer", "its peak MiB", "its step / eager", "our fastest at or below",
                       "our peak MiB", "our step / eager", "goal"], eq),
        "",
        f"![measured peak vs step time](results/torch_models{_suffix(args.device, '_')}.png)",
    ])


def plot(results: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    cols = min(3, len(names))
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.9 * nrows), squeeze=False)
    style = {"ours": ("o-", "C0"), "ours compiled": ("D-", "C3"), "HF checkpointing": ("s--", "C1"),
             "torch.compile": ("^:", "C2")}
    for ax, name in zip(axes.flat, names):
        ran = [r for r in results[name]["rows"] if "time_s" in r]
        def order(r):  # each method's points joined in the order of their settings (torch.compile: 1.0 to 0.0)
            return -r["budget"] if r["kind"] == "compile" else r["budget"] if r["kind"] == "hf" else -r["peak"]

        for method, (fmt, color) in style.items():
            pts = [(r["peak"] / MiB, r["overhead_eager"]) for r in sorted(ran, key=order)
                   if r["method"] == method and r["kind"] != "eager"]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], fmt, color=color, label=method, mfc="none", ms=7)
        for r in ran:
            if r["kind"] == "eager":
                ax.plot([r["peak"] / MiB], [1.0], "k*", ms=10, label="eager")
            else:  # the setting beside its point: a budget, "min" (our smallest found), "/n" (HF every n layers)
                tag = ("min" if r.get("smallest_found") else f"/{r['budget']}" if r["kind"] == "hf"
                       else f"{r['budget']:g}")
                ax.annotate(tag, (r["peak"] / MiB, r["overhead_eager"]), fontsize=7, xytext=(4, 3),
                            textcoords="offset points", color=style[r["method"]][1])
        ax.set_title(name)
        ax.set_xlabel("measured peak (MiB)")
        ax.set_ylabel("step time / eager")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write_readme(name: str, md: str, readme: str | None = None) -> None:
    """Rewrite section ``name`` of ``readme`` (default ``benchmarks/README.md``) with ``md``, keeping its
    hand-written subsections: from the first ``### ... session N`` heading (for example ``### compiled path,
    session 3``) to the section's end."""
    import re

    import _report

    readme = readme or _report.README
    kept = ""
    if os.path.exists(readme):
        text = open(readme).read()
        sec = re.search(re.escape(f"<!-- BEGIN {name} -->") + r"(.*?)" + re.escape(f"<!-- END {name} -->"), text, re.S)
        head = re.search(r"^### [^\n]*\bsession \d+", sec.group(1), re.M) if sec else None
        if head:
            kept = sec.group(1)[head.start():].rstrip()
    _report.write_section(name, md.rstrip() + ("\n\n" + kept if kept else ""), readme=readme)


def _suffix(device: str, sep: str) -> str:
    """Names of a CUDA run's README section and files (beside the CPU ones, not over them)."""
    return f"{sep}cuda" if device == "cuda" else ""


def _floats(s: str) -> list:
    return [float(x) for x in s.split(",") if x]


def parse_args(argv=None):
    from _hf_models import MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke test (~2 min): GPT-2 at 1 layer, width 64, batch 2 x 32; eager, HF every layer, "
                         "compile at 0.5, ours at 0.5 (then its smallest), ours compiled at 1.0; 2 rounds; results "
                         "in --out (default: the temp folder), README untouched")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--fractions", default="1.0,0.7,0.5,0.3,0.15",
                    help="ours (eager-executed): fractions of activation memory, going down")
    ap.add_argument("--compile-models", default=",".join(MODELS),
                    help="models run under torch.compile and ours compiled")
    ap.add_argument("--compile-budgets", default="1.0,0.5,0.3,0.1,0.0")
    ap.add_argument("--ours-compiled-budgets", default="1.0,0.7,0.5,0.3,0.1",
                    help="fractions for remat_torch.backend, going down")
    ap.add_argument("--hf-every", default="1,2", help="HF checkpointing every n layers")
    ap.add_argument("--time-limit", type=float, default=10.0, help="our solver's time limit per plan (s)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (peaks: max_memory_allocated; times: CUDA events)")
    ap.add_argument("--no-dropout", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cost-model", default="profile", help="node costs for our solver: profile (measured) or flops")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config-timeout", type=float, default=1200.0,
                    help="seconds a worker may take for its first step (then it counts as failed)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="configs making their first step at once (timing rounds always run one step at a time)")
    ap.add_argument("--out", help="folder of torch_models.json/.png (default benchmarks/results)")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite benchmarks/README.md")
    ap.add_argument("--report-only", metavar="JSON",
                    help="rewrite the README section and plot from saved torch_models.json files (comma-separated: "
                         "runs made side by side, their models merged)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker or args.report_only:
        return args
    if args.quick:
        args.models, args.compile_models, args.rounds = "gpt2", "gpt2", 2
        args.fractions, args.compile_budgets, args.ours_compiled_budgets, args.hf_every = "0.5", "0.5", "1.0", "1"
        args.out = args.out or tempfile.gettempdir()
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in SIZES]
    if unknown:
        ap.error(f"--models: unknown {unknown}; choose from {list(SIZES)}")
    args.compile_models = [m for m in args.compile_models.split(",") if m]
    args.fractions, args.compile_budgets = _floats(args.fractions), _floats(args.compile_budgets)
    args.ours_compiled_budgets = _floats(args.ours_compiled_budgets)
    args.hf_every = [int(n) for n in args.hf_every.split(",") if n]
    args.device_name = None
    if args.device == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: no CUDA device is available")
        args.device_name = torch.cuda.get_device_name()
    elif args.device != "cpu":
        ap.error(f"--device: cpu or cuda; got {args.device!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    import _report

    if args.report_only:  # one saved run, or several run side by side (their models merged, in order)
        runs = []
        for path in args.report_only.split(","):
            with open(path) as f:
                runs.append(json.load(f))
        results = {k: v for run in runs for k, v in run["results"].items()}
        dev = runs[0]["args"]["device"]
        plot(results, os.path.join(_report.RESULTS, f"torch_models{_suffix(dev, '_')}.png"))
        md = render(results, argparse.Namespace(**runs[0]["args"]), max(r.get("wall_s", 0.0) for r in runs),
                    "` and, at the same time, `".join(r["command"] for r in runs), runs[0]["machine"])
        _write_readme(f"torch-models{_suffix(dev, '-')}", md)
        print(md)
        return 0
    started = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - started:6.0f} s] {msg}", flush=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    workers = Workers()
    results = {}
    out = args.out or _report.RESULTS
    try:
        for name in args.models:
            log(f"{name}: load average {os.getloadavg()[0]:.1f}")
            results[name] = run_model(name, args, workers, log)
            # after every model: a run stopped later still leaves the models it finished (--report-only reads them)
            _report.save_json(f"torch_models{_suffix(args.device, '_')}",
                              {"machine": _report.machine_line(), "command": _report.command_line(),
                               "args": vars(args), "results": results, "wall_s": time.perf_counter() - started},
                              folder=out)
    except KeyboardInterrupt:
        log(f"interrupted: workers stopped, cache folders removed; the models finished ({', '.join(results) or 'none'})"
            " are in the JSON, no plot or README written (--report-only makes them)")
        return 130
    finally:
        workers.close()
    wall = time.perf_counter() - started
    png = os.path.join(out, f"torch_models{_suffix(args.device, '_')}.png")
    plot(results, png)
    md = render(results, args, wall, _report.command_line(), _report.machine_line())
    if not args.quick and not args.no_readme and not args.out:
        _write_readme(f"torch-models{_suffix(args.device, '-')}", md)
    print(md)
    log(f"done; plot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
