"""Path inequality separation per kernel, and what it does to the portfolio's short branch-and-cut, in one run.

Branch-and-cut separates the path inequalities
(:func:`remat_core.formulation.cuts.path_inequalities`) at every node, up to
five rounds each, so the separation's speed is part of every node's. Its
dynamic program is a kernel (:func:`remat_core.kernels.path_cuts`) with
three implementations: ``reference`` (numpy, vectorized over stages and
start values: the code that ran at every node up to commit 2a7d0f1, now the
kernel's specification; its per-program arrays, the column maps and first
readers, are now built once per program instead of at every call, which the
reference column does not pay either), ``numba`` and ``native`` (C++, the
default). Per instance (the graphs of
section *lp-presolve*), at the strong program's root LP point:

* milliseconds of one ``path_inequalities(sf, x, 200)`` call with each
  kernel (median of ``RUNS`` calls, the kernels alternating; all three return
  the same rows, asserted);
* the portfolio's short branch-and-cut (as ``race`` runs it: from the rounded
  root point or else RENS, cover rows in, 0.5 s at most) with the reference
  kernel and with the native one, alternating, ``RUNS`` runs each: median
  seconds, status and nodes.

    python benchmarks/experiments/bench_path_separation.py           # 21 instances, about 2 minutes
    python benchmarks/experiments/bench_path_separation.py --quick   # three instances, printed only
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: _report, and the instances of bench_ilp*.py

from _report import EXPERIMENTS_README, EXPERIMENTS_RESULTS  # noqa: E402
from _report import command_line, machine_line, quick_arguments, save_json, table, write_section  # noqa: E402
from bench_lp_presolve import cases  # noqa: E402

from remat_core import kernels  # noqa: E402
from remat_core.formulation import build_milp  # noqa: E402
from remat_core.formulation.cuts import path_inequalities  # noqa: E402
from remat_core.solvers import ilp as ilp_module  # noqa: E402
from remat_core.solvers.backends.highs import solve as highs_solve  # noqa: E402
from remat_core.solvers.branch_and_cut import branch_and_cut  # noqa: E402
from remat_core.solvers.portfolio import _QUICK_S  # noqa: E402

RUNS = 7
KERNELS = ("reference", "numba", "native")


class _forced_path_kernel:
    """Within the block, ``kernels.path_cuts`` runs ``name`` (the other kernels keep the default)."""

    def __init__(self, name: str):
        self.name, self.saved = name, None

    def __enter__(self):
        self.saved = kernels.path_cuts
        saved, name = self.saved, self.name
        kernels.path_cuts = lambda *a, **kw: saved(*a, kernel=name)
        return self

    def __exit__(self, *exc):
        kernels.path_cuts = self.saved


def separation_ms(sf, x) -> dict:
    times = {k: [] for k in KERNELS}
    rows = {}
    for k in KERNELS:   # compile (numba) and check the three agree
        with _forced_path_kernel(k):
            rows[k] = path_inequalities(sf, x, 200)
    ref_rows, ref_viol = rows["reference"]
    for k in KERNELS[1:]:
        r, v = rows[k]
        assert r.shape == ref_rows.shape and (r != ref_rows).nnz == 0 and np.array_equal(v, ref_viol), k
    for _ in range(RUNS):
        for k in KERNELS:
            with _forced_path_kernel(k):
                t0 = time.perf_counter()
                path_inequalities(sf, x, 200)
                times[k].append(time.perf_counter() - t0)
    return {"rows": int(ref_rows.shape[0]), **{k: float(np.median(v)) * 1e3 for k, v in times.items()}}


def short_search(g, budget) -> dict:
    sf = build_milp(g, budget, "strong")
    strong, _bound, stats = ilp_module._strengthen(sf, "highs", None, None)
    schedule, _cost = ilp_module._rounded(g, strong, stats["x"], budget)
    if schedule is None:
        schedule, _cost, _info = ilp_module._rens(g, strong, stats["x"], budget, ilp_module._RENS_TIME_S, None)
    if schedule is None:
        return {}
    start = strong.encode(schedule)
    out = {k: {"times_s": []} for k in ("reference", "native")}
    for _ in range(RUNS):
        for k in ("reference", "native"):
            with _forced_path_kernel(k):
                res = branch_and_cut(strong, start=start, time_limit_s=_QUICK_S, mip_rel_gap=1e-4, cover_rows=True)
            out[k]["times_s"].append(res.stats["time_s"])
            out[k].update(status=res.stats["backend_status"].replace("branch-and-cut: ", ""), nodes=res.stats["nodes"])
    for k in out:
        out[k]["time_s"] = float(np.median(out[k]["times_s"]))
    return out


def main() -> None:
    args = quick_arguments(__doc__, "three instances, print only")
    raw = []
    for label, g, budget in cases(args.quick):
        sf = build_milp(g, budget, "strong")
        lp = highs_solve(sf.c, sf.A, sf.row_lo, sf.row_hi, sf.col_lo, sf.col_hi, np.zeros(sf.n_cols, np.int32))
        row = {"instance": label, "nodes": g.n, **separation_ms(sf, lp.x)}
        if g.n <= ilp_module._CUTS_MAX_NODES:
            row["short_search"] = short_search(g, budget)
        raw.append(row)
        q = row.get("short_search") or {}
        print(f"{label}: separation " + ", ".join(f"{k} {row[k]:.3f} ms" for k in KERNELS)
              + (f"; short search {q['reference']['time_s'] * 1e3:.1f} ms -> {q['native']['time_s'] * 1e3:.1f} ms"
                 if q else ""), flush=True)
    if args.quick:
        return
    meta = {"command": command_line(), "machine": machine_line()}
    save_json("path_separation", {"meta": meta, "rows": raw}, folder=EXPERIMENTS_RESULTS)

    def search_cell(q, k):
        return f"{q[k]['time_s'] * 1e3:.1f} ({q[k]['status']}, {q[k]['nodes']} nodes)" if q else "-"

    rows = [[r["instance"], r["nodes"], r["rows"]] + [f"{r[k]:.3f}" for k in KERNELS]
            + [f"{r['reference'] / r['native']:.1f}x",
               search_cell(r.get("short_search"), "reference"), search_cell(r.get("short_search"), "native"),
               f"{r['short_search']['reference']['time_s'] / r['short_search']['native']['time_s']:.2f}x"
               if r.get("short_search") else "-"] for r in raw]
    sep = [r["reference"] / r["native"] for r in raw]
    both = [r["short_search"] for r in raw if r.get("short_search")
            and r["short_search"]["reference"]["status"] == r["short_search"]["native"]["status"] == "optimal"]
    write_section("path-separation", "\n".join([
        "## Path inequality separation: the kernels, and the short branch-and-cut (issue 3)",
        "",
        f"Command: `{meta['command']}`  ",
        f"{meta['machine']}  ",
        f"*rows*: violated path inequalities at the strong program's root LP point (at most 200 kept); "
        f"milliseconds of one `path_inequalities(sf, x, 200)` call per kernel (median of {RUNS}, alternating; "
        f"identical rows asserted). *reference* is the numpy code every node ran up to commit 2a7d0f1 (without "
        f"the per-program arrays it then rebuilt at every call, now built once per program). Short "
        f"search: the portfolio's branch-and-cut before the race (cover rows, {_QUICK_S} s at most) from the "
        f"rounded root point or RENS, ms (median of {RUNS}, alternating), with the reference and the native "
        f"separation.",
        "",
        table(["instance", "nodes", "rows", "reference ms", "numba ms", "native ms", "reference / native",
               "short search, reference", "short search, native", "ratio"], rows),
        "",
        f"Separation: native {min(sep):.1f}x to {max(sep):.1f}x faster than the reference. Short searches that "
        f"proved the optimum with both: {len(both)}; the native one was faster on "
        f"{sum(q['reference']['time_s'] > q['native']['time_s'] for q in both)} of them, by "
        + (f"{min(q['reference']['time_s'] / q['native']['time_s'] for q in both):.2f}x to "
           f"{max(q['reference']['time_s'] / q['native']['time_s'] for q in both):.2f}x." if both else "-."),
    ]), readme=EXPERIMENTS_README)


if __name__ == "__main__":
    main()
