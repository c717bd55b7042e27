"""Remat alone, offloading alone and both, simulated with a 16 and a 32 GB/s host link (issue 38).

For each graph (four Keras zoo models at a fixed batch, and the eight shared
DTR graphs) and each budget (a fraction of activation memory), three plans,
each judged by :func:`remat_core.host.simulate_host` (time = compute + the
stalls where a copy is not hidden; copies of ``bytes / bandwidth`` seconds on
one copy stream):

* **remat alone**: ``dtr`` (the simulated DTR heuristic; within 0.5 % of
  ``lp-rounding`` on the zoo models at 0.5 and fast on the 5,000-node graphs);
* **offload alone**: ``save_on_cpu``'s plan (every value saved for the backward
  copied to the host when it is computed and back before its first backward
  reader, both synchronously): one device peak, one time per bandwidth;
* **joint**: :func:`remat_core.host.solve_offload` — the remat plans of the
  sweep at this budget and the next three above it, and checkpoint-all, each
  with offloads added until it fits, ``save_on_cpu``'s plan, and DTR with
  swapping on graphs of at most 600 nodes; the fastest one that fits.

Costs are reported as time / (the cost of computing every node once). FLOP
graphs run at ``remat_core.host.DEFAULT_FLOPS_PER_S`` (20 TFLOP/s); the DTR
graphs' costs are measured nanoseconds.

Then the largest batch of each zoo model whose plan fits 16 GB (parameters,
gradients and the input batch included) at a time of at most one extra
forward pass (Checkmate's eq. 10), for each of the three; there remat alone is
``auto`` (30 s limit), and the joint search starts from auto's plans.

Usage::

    .venv/bin/python benchmarks/bench_offload.py            # everything (about 10 minutes on 2 loaded cores)
    .venv/bin/python benchmarks/bench_offload.py --quick    # the zoo models only, fewer budgets
    .venv/bin/python benchmarks/bench_offload.py --max-batch-only   # redo the maximum batch search
    .venv/bin/python benchmarks/bench_offload.py --partial   # whole vs partial offloading, POFO on chains
    .venv/bin/python benchmarks/bench_offload.py --report-only
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import _report  # noqa: E402

from remat_core import Schedule, checkpoint_all_peak_bytes, load_dtr_dag, make_plan, solve  # noqa: E402
from remat_core.batch import batch_size_upper_bound, forward_pass_cost_cap  # noqa: E402
from remat_core.host import (cost_per_second, offload_all_plan, remat_bases, simulate_host, solve_offload,  # noqa: E402
                             state_floor_bytes, zoo_state_layout)
from remat_core.host.greedy import offload_to_budget, plan_from_sequence  # noqa: E402
from remat_core.units import min_budget_bytes  # noqa: E402
from remat_core.zoo import zoo_graph  # noqa: E402

ZOO = [("VGG19", "keras_vgg19", 32), ("U-Net", "keras_unet", 8), ("MobileNet", "keras_mobilenet", 64),
       ("ResNet50", "keras_resnet50", 32)]
# budgets: the smallest any plan can have (a node's inputs, output and workspace with the fixed bytes) plus these
# shares of the way up to checkpoint-all's peak
SPANS = [1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.05, 0.02, 0.0]
QUICK_SPANS = [1.0, 0.6, 0.3, 0.1, 0.0]
BANDWIDTHS = [16e9, 32e9]
REMAT = "dtr"
# the maximum batch search compares with the strongest remat alone that stays fast: `auto` (dtr fails at 16 GB on
# ResNet50 above batch 684 where auto fits up to about 830), and the joint search starts from auto's plans too
BATCH_REMAT = "auto"
BATCH_OPTIONS = {"time_limit_s": 30.0}
MAX_BASES = 4
BATCH_BUDGET = 16 * 10 ** 9
SECTION = "offload"


def sweep_graph(label: str, g, spans) -> dict:
    compute = float(g.cost.sum())
    top = checkpoint_all_peak_bytes(g)
    floor = min_budget_bytes(g)[0]
    budgets = [floor + int(s * (top - floor)) for s in spans]
    fracs = [(b - g.fixed_bytes) / (top - g.fixed_bytes) for b in budgets]
    t0 = time.perf_counter()
    remat = [solve(g, b, method=REMAT) for b in budgets]
    # planned once, used by every cell; dtr's run recorded as events is its plan (its schedule is the stage form)
    plans = [None if not r.success else plan_from_sequence(g, r.sequence) if r.sequence is not None
             else make_plan(g, r.schedule) for r in remat]
    offall = offload_all_plan(g)
    rows = []
    for bw in BANDWIDTHS:
        off = simulate_host(g, offall, bw)
        for i, (sp, f, b) in enumerate(zip(spans, fracs, budgets)):
            # the remat plans at this budget and the next few above it (further ones need more offloading)
            bases = [p for p, bb in sorted(zip(plans, budgets), key=lambda x: x[1])
                     if p is not None and bb >= b][:MAX_BASES]
            joint = solve_offload(g, b, method=REMAT, host_bandwidth=bw, bases=bases)
            rows.append({
                "graph": label, "n": g.n, "bandwidth": bw, "span": sp, "fraction": f, "budget_bytes": b,
                "remat": remat[i].objective / compute if remat[i].success else None,
                "offload_all": off.time / compute if off.peak_device_bytes <= b else None,
                "offload_all_peak_fraction": (off.peak_device_bytes - g.fixed_bytes) / (top - g.fixed_bytes),
                "joint": joint.objective / compute if joint.success else None,
                "joint_plan": joint.stats.get("plan"),
                "joint_stall": joint.stats.get("stall", 0.0) / compute if joint.success else None,
                "joint_recomputations": joint.stats.get("recomputations"),
                "joint_offloaded_values": joint.stats.get("offloaded_values"),
                "joint_peak_host_bytes": joint.peak_host_bytes,
            })
    print(f"{label}: {g.n} nodes, {time.perf_counter() - t0:.1f} s", flush=True)
    return {"rows": rows}


def max_batches(name: str, key: str, bw: float) -> dict:
    """Largest batch within 16 GB for the three plans: at a time of at most one extra forward pass, and at
    any time (``*_uncapped``)."""
    def fn(b):
        return zoo_graph(key, batch_size=b)

    ceiling = batch_size_upper_bound(fn, BATCH_BUDGET)

    seen: dict = {}

    def solved(label, b):
        """(fits 16 GB, time, the time cap, plan name, values offloaded), each batch solved once per plan kind."""
        if (label, b) not in seen:
            g = fn(b)
            cap = forward_pass_cost_cap(g)
            if label == "offload_all":
                s = simulate_host(g, offload_all_plan(g), bw)
                seen[label, b] = (s.peak_device_bytes <= BATCH_BUDGET, s.time, cap, "offload-all", None)
            else:
                r = (solve(g, BATCH_BUDGET, method=BATCH_REMAT, **BATCH_OPTIONS) if label == "remat" else
                     solve_offload(g, BATCH_BUDGET, method=BATCH_REMAT, host_bandwidth=bw, **BATCH_OPTIONS))
                seen[label, b] = (r.success, r.objective, cap, r.stats.get("plan"), r.stats.get("offloaded_values"))
        return seen[label, b]

    out = {"model": name, "bandwidth": bw, "ceiling": ceiling}
    for label in ("remat", "offload_all", "joint"):
        out[label] = _largest(lambda b: (lambda x: x[0] and x[1] <= x[2])(solved(label, b)), ceiling)
        out[label + "_uncapped"] = _largest(lambda b: solved(label, b)[0], ceiling)
    # what limits the joint plan just above remat alone's largest batch within the cap: the copies it needs
    # against what the copy stream moves while the step computes (bandwidth x compute time)
    above = min(ceiling, out["remat"] + max(1, out["remat"] // 64))
    if above > out["remat"]:
        g = fn(above)
        r = solve_offload(g, BATCH_BUDGET, method=BATCH_REMAT, host_bandwidth=bw, **BATCH_OPTIONS)
        compute_s = float(g.cost.sum()) / cost_per_second(g)
        out["above"] = {"batch": above, "fits": bool(r.success),
                        "time_over_cap": r.objective / forward_pass_cost_cap(g) if r.success else None,
                        "plan": r.stats.get("plan"), "offloaded_values": r.stats.get("offloaded_values"),
                        "copied_bytes": r.stats.get("copied_bytes"), "movable_bytes": bw * compute_s,
                        "stall_over_compute": r.stats.get("stall", 0.0) / float(g.cost.sum()) if r.success else None}
    for which in ("joint", "joint_uncapped"):   # what the joint plan is at its largest batch
        if out[which]:
            _, t, cap, plan_name, offloaded = solved("joint", out[which])
            out[which + "_plan"] = plan_name
            out[which + "_offloaded_values"] = offloaded
            out[which + "_time_over_cap"] = t / cap
    print(f"max batch {name} at {bw / 1e9:g} GB/s: {out}", flush=True)
    return out


def state_max_batches(entries: list, key: str, resolution: float = 0.01) -> None:
    """Adds to the saved maximum-batch entries of one zoo model (one per bandwidth) the joint plan whose offloads
    may also move the training state (parameters, gradients, input batch; :mod:`remat_core.host.state`): the
    largest batch within 16 GB at a time of at most one extra forward pass (``joint_state``), searched by
    galloping and bisection from remat alone's largest batch up to the state ceiling (the largest batch whose
    state floor, :func:`remat_core.host.state_floor_bytes`, is within 16 GB) to ``resolution`` of the batch (each probe
    takes minutes on the loaded machine): the value is a batch that passes, with the next one that failed in
    ``joint_state_failed_at``. ``joint_state_ceiling_fits``: whether a plan fits at the state ceiling at any
    time."""
    def fn(b):
        return zoo_graph(key, batch_size=b)

    def floor_fits(b):
        g = fn(b)
        return state_floor_bytes(g, zoo_state_layout(g)) <= BATCH_BUDGET

    ceiling = _largest(floor_fits, 1 << 16)
    bases: dict = {}
    seen: dict = {}

    def solved(b, bw):
        """(fits, time over the cap, the result) of the joint plan with the state layout, solved once."""
        if (b, bw) not in seen:
            g = fn(b)
            if b not in bases:   # the remat plans the search starts from do not depend on the bandwidth
                bases[b] = remat_bases(g, BATCH_BUDGET, BATCH_REMAT, **BATCH_OPTIONS)
            t0 = time.perf_counter()
            r = solve_offload(g, BATCH_BUDGET, method=BATCH_REMAT, host_bandwidth=bw, bases=bases[b],
                              state_layout=zoo_state_layout(g))
            over = r.objective / forward_pass_cost_cap(g) if r.success else None
            seen[b, bw] = (bool(r.success), over, r)
            print(f"  {key} b={b} {bw / 1e9:g} GB/s: {r!r} over cap {over}, {time.perf_counter() - t0:.0f} s",
                  flush=True)
        return seen[b, bw]

    def search(passes, lo: int) -> tuple:
        """(a batch in [lo, ceiling] that passes, the smallest larger one that failed or None): the ceiling, else
        steps of 1, 2, 4, ... above lo (taken to pass; checked when it is the answer: 0 if it does not) until one
        fails, then bisection to ``resolution`` x lo."""
        if passes(ceiling):
            return ceiling, None
        hi, step = ceiling, 1
        while lo + step < hi and passes(lo + step):
            lo, step = lo + step, 2 * step
        hi = min(hi, lo + step)
        while hi - lo > max(1, int(lo * resolution)):
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if passes(mid) else (lo, mid)
        return (lo if passes(lo) else 0), hi

    for m in entries:
        bw = m["bandwidth"]
        m["state_ceiling"] = ceiling
        m["joint_state"], m["joint_state_failed_at"] = search(
            lambda b: solved(b, bw)[0] and solved(b, bw)[1] <= 1.0, m["remat"])
        m["joint_state_ceiling_fits"] = solved(ceiling, bw)[0]
        m["joint_state_ceiling_over_cap"] = solved(ceiling, bw)[1]
        for which in ("joint_state",):
            if m[which]:
                _, over, r = solved(m[which], bw)
                m[which + "_detail"] = {
                    "time_over_cap": over, "plan": r.stats.get("plan"),
                    "state_blocks_moved": r.stats.get("state_blocks_moved"),
                    "offloaded_values": r.stats.get("offloaded_values"), "copied_bytes": r.stats.get("copied_bytes"),
                    "peak_host_bytes": r.peak_host_bytes, "peak_device_bytes": r.peak_memory_bytes,
                    "stall_over_compute": r.stats.get("stall", 0.0) / r.stats["compute_cost"]}
        print(f"state max batch {m['model']} at {bw / 1e9:g} GB/s: {m['joint_state']} (failed at "
              f"{m['joint_state_failed_at']}; ceiling {ceiling}, fits there: {m['joint_state_ceiling_fits']})",
              flush=True)


def _largest(passes, ceiling: int) -> int:
    lo, hi, b = 0, None, 1
    while hi is None:
        if not passes(b):
            hi = b
        elif b >= ceiling:
            return b
        else:
            lo, b = b, min(2 * b, ceiling)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo


def render(rows: list, meta: dict) -> str:
    def cell(x):
        return "—" if x is None else f"{x:.3f}"

    lines = [
        "## offload",
        "",
        "Remat alone, offloading alone (`save_on_cpu`'s plan) and the joint plan of `remat_core.host`, simulated "
        "(`remat_core.host.simulate_host`: one copy stream overlapping compute, copies of bytes / bandwidth). "
        "Cost = simulated time / cost of computing every node once; — = no plan fits. "
        f"Remat is `{REMAT}`; FLOP graphs run at 20 TFLOP/s. No GPU was used: every number "
        "is simulated.",
        "",
        f"Command: `{meta['command']}`; {meta['machine']}; {meta['elapsed_s']:.0f} s"
        + (f"; maximum batch: `{meta['max_batch_command']}`, {meta['max_batch_elapsed_s']:.0f} s"
           if meta.get("max_batch_command") else "") + ".",
        "",
        "![cost against budget](results/offload.png)",
        "",
    ]
    for bw in BANDWIDTHS:
        sub = [r for r in rows if r["bandwidth"] == bw]
        sp = sorted({r["span"] for r in sub}, reverse=True)
        graphs = list(dict.fromkeys(r["graph"] for r in sub))
        lines += [f"### {bw / 1e9:g} GB/s: remat / save_on_cpu / **joint**", "",
                  "Columns: budget = floor + s x (checkpoint-all peak - floor), where the floor is the smallest "
                  "budget any plan can have (the largest node's inputs, output and workspace with the fixed bytes); "
                  "the budget as a fraction of activation memory is in each cell's second line.", ""]
        table = []
        for gname in graphs:
            bys = {r["span"]: r for r in sub if r["graph"] == gname}
            table.append([gname] + [f"{cell(bys[x]['remat'])} / {cell(bys[x]['offload_all'])} / "
                                    f"**{cell(bys[x]['joint'])}**<br>({bys[x]['fraction']:.2f})" for x in sp])
        lines += [_report.table(["graph"] + [f"s={x:g}" for x in sp], table), ""]
        worse = [r for r in sub if r["joint"] is not None and any(
            r[k] is not None and r["joint"] > r[k] + 1e-9 for k in ("remat", "offload_all"))]
        only = [r for r in sub if r["joint"] is not None and r["remat"] is None and r["offload_all"] is None]
        better = [r for r in sub if r["joint"] is not None and all(
            r[k] is None or r["joint"] < r[k] - 1e-9 for k in ("remat", "offload_all"))]
        lines += [f"Joint above the better of the two: {len(worse)} of {len(sub)} cells. Joint strictly below "
                  f"both (or the only plan): {len(better)} cells, of which {len(only)} where neither alone fits.",
                  ""]
    mb = meta.get("max_batch") or []
    if mb:
        lines += ["### Maximum batch at 16 GB", "",
                  f"Remat alone is `{BATCH_REMAT}` here (30 s limit) and the joint search starts from its plans. "
                  "Each cell: the largest batch whose plan fits 16 GB at a time of at most one extra forward pass "
                  "(Checkmate's eq. 10) / at any time. The ceiling is the batch above which the largest node's "
                  "inputs, output and workspace alone exceed 16 GB: no plan of any kind fits beyond it.", "",
                  _report.table(["model", "GB/s", "remat alone", "save_on_cpu", "joint", "ceiling"],
                                [[m["model"], f"{m['bandwidth'] / 1e9:g}",
                                  *[f"{m[k]} / {m.get(k + '_uncapped', '?')}" for k in ("remat", "offload_all", "joint")],
                                  m["ceiling"]] for m in mb]), ""]
        lines += ["The joint plan at its largest batch: " + "; ".join(
            f"{m['model']} {m['bandwidth'] / 1e9:g} GB/s: {m.get('joint_plan')} ({m.get('joint_offloaded_values')} "
            f"values offloaded) | {m.get('joint_uncapped_plan')} ({m.get('joint_uncapped_offloaded_values')})"
            for m in mb if m.get("joint_plan") is not None and m["joint"] > m["remat"]
            or m.get("joint_uncapped", 0) > m.get("remat_uncapped", 0)) + ". The searches double the batch "
            "and then bisect, which assumes that a batch fits whenever a larger one does; the joint plan's time "
            "is not monotone in the batch (its remat plans come from a heuristic at several budgets), so a "
            "smaller batch may not fit within the cap.", ""]
        nothing = [f"{m['model']} {m['bandwidth'] / 1e9:g} GB/s" for m in mb
                   if m["joint"] > m["remat"] and m.get("joint_offloaded_values") == 0]
        if nothing:
            lines += [f"Where the joint plan offloads nothing at its largest batch within the cap "
                      f"({', '.join(nothing)}), the larger batch comes from the remat method's plan for a budget "
                      f"above 16 GB that peaks within 16 GB (`{BATCH_REMAT}` is a heuristic: at 16 GB itself it finds "
                      f"none), not from offloading.", ""]
        above = [m for m in mb if m.get("above")]
        if above:
            lines += ["Just above remat alone's largest batch within the cap (its batch + 1/64), the joint plan: "
                      + "; ".join(
                          f"{m['model']} {m['bandwidth'] / 1e9:g} GB/s b={m['above']['batch']}: "
                          + (f"{m['above']['time_over_cap']:.2f}x the cap, {m['above']['plan']}, "
                             f"{m['above']['offloaded_values']} values offloaded, "
                             f"{m['above']['copied_bytes'] / 1e9:.1f} GB copied vs "
                             f"{m['above']['movable_bytes'] / 1e9:.1f} GB the copy stream moves while the step "
                             f"computes, stalls {m['above']['stall_over_compute']:.2f}x compute"
                             if m["above"]["fits"] else "no plan fits")
                          for m in above) + ".", ""]
        st = [m for m in mb if "joint_state" in m]
        if st:
            lines += ["#### With the training state on the host", "",
                      "The joint plan whose offloads may also move the parameters, their gradients and the input "
                      "batch (`solve_offload(..., state_layout=zoo_state_layout(g))`, `remat_core.host.state`): a "
                      "layer's weights lie on the host between steps and are fetched before its forward and "
                      "backward nodes, its gradient is saved to the host after its backward node (the optimizer "
                      "step of those layers runs on the host, as in ZeRO-Offload), and the input batch may leave "
                      "the device between its readers. The state ceiling is the largest batch whose *state "
                      "floor* (the resident bytes plus the largest node's inputs, output, workspace and its own "
                      "weights, gradient and input) is within 16 GB. Searched from remat alone's largest batch: the "
                      "state ceiling first, then bisection (runs with the search of steps of 1, 2, 4, ... above it "
                      "first say so in `offload.json`, `state_search`) to the resolution of the last column (each "
                      "probe takes about a minute on the loaded machine); a cell is a batch whose plan fits 16 GB "
                      "within the time cap, and the smallest larger batch tried that did not.", "",
                      _report.table(["model", "GB/s", "remat alone", "joint (activations)", "joint + state",
                                     "time / cap", "state blocks moved", "host peak GB", "first failing",
                                     "ceiling", "state ceiling", "resolution"],
                                    [[m["model"], f"{m['bandwidth'] / 1e9:g}", m["remat"], m["joint"],
                                      f"**{m['joint_state']}**",
                                      f"{m['joint_state_detail']['time_over_cap']:.3f}"
                                      if m.get("joint_state_detail") else "—",
                                      (m.get("joint_state_detail") or {}).get("state_blocks_moved", "—"),
                                      f"{m['joint_state_detail']['peak_host_bytes'] / 1e9:.2f}"
                                      if m.get("joint_state_detail") else "—",
                                      m.get("joint_state_failed_at") or "—", m["ceiling"], m["state_ceiling"],
                                      "1 example" if not m.get("state_resolution", 0.01) else
                                      f"{m.get('state_resolution', 0.01):.0%}"]
                                     for m in st]), ""]
            for bw in BANDWIDTHS:
                sub = [m for m in st if m["bandwidth"] == bw]
                larger = [m["model"] for m in sub if m["joint_state"] > m["remat"]]
                lines += [f"At {bw / 1e9:g} GB/s, with the state on the host, the joint plan has a larger maximum "
                          f"batch than remat alone within the time cap on {len(larger)} of {len(sub)} models "
                          f"({', '.join(larger) or 'none'}).", ""]
            cmds = meta.get("state_commands") or {}
            if cmds:
                lines += ["Commands: " + "; ".join(f"{k}: `{v['command']}`, {v['elapsed_s']:.0f} s"
                                                   for k, v in cmds.items()) + ".", ""]
        models = list(dict.fromkeys(m["model"] for m in mb))
        for bw in BANDWIDTHS:
            sub = {m["model"]: m for m in mb if m["bandwidth"] == bw}
            capped = [x for x in models if x in sub and sub[x]["joint"] > sub[x]["remat"]]
            anytime = [x for x in models if x in sub and sub[x].get("joint_uncapped", 0) > sub[x].get("remat_uncapped", 0)]
            ceiling = [x for x in models if x in sub and sub[x]["remat"] >= sub[x]["ceiling"]]
            lines += [f"At {bw / 1e9:g} GB/s the joint plan has a larger maximum batch than remat alone on "
                      f"{len(capped)} of {len(models)} models within the time cap ({', '.join(capped) or 'none'}) "
                      f"and on {len(anytime)} at any time ({', '.join(anytime) or 'none'}); remat alone already "
                      f"reaches the ceiling on {len(ceiling)} ({', '.join(ceiling) or 'none'}).", ""]
    if meta.get("partial"):
        lines += render_partial(meta["partial"])
    lines += ["What the joint plan is at each cell (`joint_plan`), its stalls, recomputations, offloaded values "
              "and host peak are in `results/offload.json`."]
    return "\n".join(lines)


#: --partial: heterogeneous chains (sizes in MB, costs in ms) whose backward reads each stage's input
PARTIAL_CHAINS = [(20, seed) for seed in range(4)]
PARTIAL_FRACTIONS = (0.25, 0.5, 0.75)
PARTIAL_BUDGETS = (0.25, 0.3, 0.4, 0.5, 0.7)


def partial_chain(n: int, seed: int):
    """A chain training graph of ``n`` stages: values of 50-300 MB, forward 1-10 ms, backward twice that, every
    backward node reading its stage's input (as a convolution's weight gradient does)."""
    import random

    from remat_core import Graph, Node

    rng = random.Random(seed)
    fwd = [rng.randint(1, 10) for _ in range(n)]
    nodes = [Node(f"f{j}", cost=float(fwd[j]), memory_bytes=rng.randint(50, 300) * 10**6,
                  deps=(f"f{j - 1}",) if j else ()) for j in range(n)]
    nodes.append(Node("loss", cost=0.1, memory_bytes=4, deps=(f"f{n - 1}",)))
    for j in range(n - 1, -1, -1):
        deps = ["loss" if j == n - 1 else f"b{j + 1}", f"f{j}"] + ([f"f{j - 1}"] if j else [])
        nodes.append(Node(f"b{j}", cost=2.0 * fwd[j], memory_bytes=rng.randint(50, 300) * 10**6, is_backward=True,
                          deps=tuple(deps)))
    return Graph(nodes, name=f"chain{n}-s{seed}", meta={"cost_unit": "ms"})


def partial_sweep() -> dict:
    """POFO with whole offloads against POFO that may also offload a chunk of a value (the best of
    ``PARTIAL_FRACTIONS``), on :func:`partial_chain` graphs, each plan judged by the simulator."""
    from remat_core.host import pofo_plan, pofo_solve

    rows = []
    for n, seed in PARTIAL_CHAINS:
        g = partial_chain(n, seed)
        top = checkpoint_all_peak_bytes(g)
        once = float(g.cost.sum())
        for bw in BANDWIDTHS:
            for frac in PARTIAL_BUDGETS:
                budget = g.fixed_bytes + int(frac * (top - g.fixed_bytes))
                row = {"graph": g.name, "bandwidth": bw, "budget_fraction": frac}
                labels, _ = pofo_solve(g, budget, bw)
                sim = simulate_host(g, pofo_plan(g, labels), bw) if labels else None
                row["whole"] = sim.time / once if sim and sim.peak_device_bytes <= budget else None
                best = None
                for f in PARTIAL_FRACTIONS:
                    lp, _ = pofo_solve(g, budget, bw, partial=f)
                    if lp is None:
                        continue
                    sp = simulate_host(g, pofo_plan(g, lp, partial=f), bw)
                    if sp.peak_device_bytes <= budget and (best is None or sp.time / once < best[0]):
                        best = (sp.time / once, f, lp.count("P"))
                row["partial"], row["fraction"], row["chunked_values"] = best if best else (None, None, 0)
                rows.append(row)
                print(row, file=sys.stderr, flush=True)
    greedy = []   # the greedy of the joint search, from checkpoint-all, on the zoo models
    for label, key, batch in ZOO:
        g = zoo_graph(key, batch_size=batch)
        top = checkpoint_all_peak_bytes(g)
        once = float(g.cost.sum())
        base = make_plan(g, Schedule.checkpoint_all(g), hoist=True)
        for bw in BANDWIDTHS:
            for frac in (0.3, 0.5, 0.7):
                budget = g.fixed_bytes + int(frac * (top - g.fixed_bytes))
                row = {"model": f"{label} (b={batch})", "bandwidth": bw, "budget_fraction": frac}
                for name, flag in (("whole", False), ("partial", True)):
                    plan = offload_to_budget(g, base, budget, bw, partial=flag)
                    sim = simulate_host(g, plan, bw) if plan is not None else None
                    row[name] = sim.time / once if sim is not None else None
                    if flag:
                        row["chunked_values"] = plan.num_partial_offloads if plan is not None else 0
                greedy.append(row)
                print(row, file=sys.stderr, flush=True)
    return {"rows": rows, "greedy": greedy, "command": _report.command_line(), "machine": _report.machine_line()}


def render_partial(part: dict) -> list[str]:
    rows = part["rows"]

    def fmt(x):
        return "—" if x is None else f"{x:.3f}"

    lines = ["### Partial offloading (POFO on chains)", "",
             "Time / (compute once) of the POFO plan with whole values offloaded and with a chunk of a value "
             "offloaded too (label `P`, the best of fractions "
             f"{', '.join(str(f) for f in PARTIAL_FRACTIONS)}), on chains of 20 stages with values of 50-300 MB, "
             "forward 1-10 ms, backward twice that, every backward reading its stage's input "
             "(`partial_chain` in the script); budget as a fraction of activation memory. Simulated.", "",
             _report.table(["graph", "GB/s", "budget", "whole", "with chunks", "fraction", "values chunked"],
                           [[r["graph"], f"{r['bandwidth'] / 1e9:g}", f"{r['budget_fraction']:g}", fmt(r["whole"]),
                             fmt(r["partial"]), r["fraction"] or "—", r["chunked_values"]] for r in rows]), ""]
    both = [r for r in rows if r["whole"] is not None and r["partial"] is not None]
    gains = [1 - r["partial"] / r["whole"] for r in both]
    only = sum(1 for r in rows if r["whole"] is None and r["partial"] is not None)
    lines += [f"Chunks make the plan faster in {sum(1 for x in gains if x > 1e-9)} of {len(both)} cells where both "
              f"fit (by up to {max(gains, default=0):.1%}, {sum(gains) / max(1, len(gains)):.1%} on average) and "
              f"fit {only} cells where whole offloads do not.", ""]
    greedy = part.get("greedy") or []
    if greedy:
        lines += ["The greedy of the joint search (`offload_to_budget`, from checkpoint-all) with whole values and "
                  "with chunks (`partial=True`: the bytes a stretch needs), time / (compute once) on the zoo "
                  "models (— : no plan from checkpoint-all fits):", "",
                  _report.table(["model", "GB/s", "budget", "whole", "with chunks", "values chunked"],
                                [[r["model"], f"{r['bandwidth'] / 1e9:g}", f"{r['budget_fraction']:g}",
                                  fmt(r["whole"]), fmt(r["partial"]), r["chunked_values"]] for r in greedy]), ""]
    lines += [f"Command: `{part['command']}`.", ""]
    return lines


def plot(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(graphs) / cols), cols, figsize=(16, 3.4 * math.ceil(len(graphs) / cols)),
                             squeeze=False)
    for ax, gname in zip(axes.flat, graphs):
        for bw, color in zip(BANDWIDTHS, ("tab:blue", "tab:green")):
            sub = sorted((r for r in rows if r["graph"] == gname and r["bandwidth"] == bw), key=lambda r: r["fraction"])
            xs = [r["fraction"] for r in sub]
            if bw == BANDWIDTHS[0]:
                ax.plot(xs, [r["remat"] for r in sub], "k.-", label=f"remat alone ({REMAT})")
            off = sub[0]
            ax.plot(xs, [r["offload_all"] for r in sub], "s--", color=color, alpha=0.5, ms=3,
                    label=f"save_on_cpu {bw / 1e9:g} GB/s")
            ax.axvline(off["offload_all_peak_fraction"], color=color, alpha=0.2, lw=1)
            ax.plot(xs, [r["joint"] for r in sub], "o-", color=color, ms=3, label=f"joint {bw / 1e9:g} GB/s")
        ax.set_title(gname, fontsize=9)
        ax.set_xlabel("budget (fraction of activation memory)", fontsize=7)
        ax.set_ylabel("time / compute", fontsize=7)
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(graphs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("Simulated time against device budget: remat alone, save_on_cpu, joint (vertical line: "
                 "save_on_cpu's peak)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="zoo models only, five budgets, no max batch")
    ap.add_argument("--report-only", action="store_true", help="rewrite the README section from the saved results")
    ap.add_argument("--no-max-batch", action="store_true", help="skip the maximum batch search")
    ap.add_argument("--max-batch-only", action="store_true",
                    help="redo the maximum batch search only, keeping the saved sweep")
    ap.add_argument("--state-only", action="store_true",
                    help="add the joint plan that also moves the training state to the saved maximum batch search")
    ap.add_argument("--models", default=None, help="with --state-only: a comma-separated subset of the zoo models")
    ap.add_argument("--side-file", default=None,
                    help="with --state-only: write the models' entries to results/<name>.json instead of "
                         "offload.json (for a run beside another); --merge-side <name> folds them in")
    ap.add_argument("--merge-side", default=None, help="fold the entries of results/<name>.json into offload.json")
    ap.add_argument("--resolution", type=float, default=0.01,
                    help="with --state-only: stop bisecting at this fraction of the batch (0: to one example)")
    ap.add_argument("--partial", action="store_true",
                    help="add the partial-offloading comparison on chains to the saved results")
    args = ap.parse_args()
    if args.partial:
        import json

        with open(os.path.join(_report.RESULTS, "offload.json")) as f:
            data = json.load(f)
        data["meta"]["partial"] = partial_sweep()
        _report.save_json("offload", data)
        _report.write_section(SECTION, render(data["rows"], data["meta"]))
        return
    if args.report_only:
        _report.rewrite_section_from_results("offload", SECTION, render)
        return
    if args.merge_side:
        import json

        with open(os.path.join(_report.RESULTS, args.merge_side + ".json")) as f:
            side = json.load(f)
        with open(os.path.join(_report.RESULTS, "offload.json")) as f:
            data = json.load(f)
        new = {(m["model"], m["bandwidth"]): m for m in side["max_batch"]}
        data["meta"]["max_batch"] = [new.get((m["model"], m["bandwidth"]), m) for m in data["meta"]["max_batch"]]
        data["meta"].setdefault("state_commands", {}).update(side["state_commands"])
        _report.save_json("offload", data)
        _report.write_section(SECTION, render(data["rows"], data["meta"]))
        return
    if args.state_only:
        import json

        path = os.path.join(_report.RESULTS, "offload.json")
        start = time.perf_counter()
        wanted = set(args.models.split(",")) if args.models else None
        for label, key, _ in ZOO:
            if wanted is not None and label not in wanted:
                continue
            with open(path) as f:   # re-read: each model's result is saved as soon as it is found
                data = json.load(f)
            entries = [m for m in data["meta"]["max_batch"] if m["model"] == label]
            state_max_batches(entries, key, args.resolution)
            for m in entries:
                m["state_resolution"] = args.resolution
                m["state_search"] = "ceiling, steps of 1, 2, 4, ..., bisection"
            data["meta"].setdefault("state_commands", {})[label] = {
                "command": _report.command_line(), "elapsed_s": time.perf_counter() - start,
                "machine": _report.machine_line()}
            if args.side_file:
                side_path = os.path.join(_report.RESULTS, args.side_file + ".json")
                side = json.load(open(side_path)) if os.path.exists(side_path) else {"max_batch": [],
                                                                                     "state_commands": {}}
                side["max_batch"] = [m for m in side["max_batch"] if m["model"] != label] + entries
                side["state_commands"][label] = data["meta"]["state_commands"][label]
                _report.save_json(args.side_file, side)
            else:
                _report.save_json("offload", data)
            start = time.perf_counter()
        _report.write_section(SECTION, render(data["rows"], data["meta"]))
        return
    if args.max_batch_only:
        import json

        with open(os.path.join(_report.RESULTS, "offload.json")) as f:
            data = json.load(f)
        start = time.perf_counter()
        data["meta"]["max_batch"] = [max_batches(label, key, bw) for label, key, _ in ZOO for bw in BANDWIDTHS]
        data["meta"]["max_batch_command"] = _report.command_line()
        data["meta"]["max_batch_elapsed_s"] = time.perf_counter() - start
        _report.save_json("offload", data)
        if not args.side_file:
            _report.write_section(SECTION, render(data["rows"], data["meta"]))
        return
    start = time.perf_counter()
    spans = QUICK_SPANS if args.quick else SPANS
    rows = []
    for label, key, batch in ZOO:
        rows += sweep_graph(f"{label} (b={batch})", zoo_graph(key, batch_size=batch), spans)["rows"]
    if not args.quick:
        for name in _report.DTR_GRAPHS:
            rows += sweep_graph(name, load_dtr_dag(_report.dtr_graph_path(name)), spans)["rows"]
    mb = []
    if not (args.quick or args.no_max_batch):
        mb = [max_batches(label, key, bw) for label, key, _ in ZOO for bw in BANDWIDTHS]
    meta = {"command": _report.command_line(), "machine": _report.machine_line(),
            "elapsed_s": time.perf_counter() - start, "max_batch": mb}
    _report.save_json("offload", {"meta": meta, "rows": rows})
    plot(rows, os.path.join(_report.RESULTS, "offload.png"))
    _report.write_section(SECTION, render(rows, meta))


if __name__ == "__main__":
    main()
