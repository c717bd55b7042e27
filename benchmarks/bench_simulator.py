"""Simulator kernel timing: reference (pure Python) vs numba vs native C++ on the eight real graphs.

Each graph is simulated with its checkpoint-all schedule. Both kernels run in
the same process, interleaved, and each timing is the best of several repeats
(the machine is noisy; the best is the least disturbed). The numba kernel is
compiled (and its on-disk cache warmed) before timing.

    python benchmarks/bench_simulator.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import DTR_GRAPHS, command_line, dtr_graph_path, machine_line, save_json, table, write_section  # noqa: E402

from remat_core import Schedule, load_dtr_dag, simulate  # noqa: E402


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows, raw = [], []
    for name in DTR_GRAPHS:
        g = load_dtr_dag(dtr_graph_path(name))
        s = Schedule.checkpoint_all(g)
        a = simulate(g, s, kernel="numba")  # compile / load cache
        b = simulate(g, s, kernel="reference")
        c = simulate(g, s, kernel="native")
        assert a.step_memory_bytes.tolist() == b.step_memory_bytes.tolist() == c.step_memory_bytes.tolist()
        t_nb = best_time(lambda: simulate(g, s, timeline=False, kernel="numba"), args.repeats * 4)
        t_nat = best_time(lambda: simulate(g, s, timeline=False, kernel="native"), args.repeats * 4)
        t_ref = best_time(lambda: simulate(g, s, timeline=False, kernel="reference"), args.repeats)
        kept = len(s.csr[3])
        rows.append([name, g.n, kept, f"{t_ref * 1e3:.2f}", f"{t_nb * 1e3:.3f}", f"{t_ref / t_nb:.0f}x",
                     f"{t_nat * 1e3:.3f}", f"{t_ref / t_nat:.0f}x", f"{a.peak_memory_bytes / 2**30:.3f}"])
        raw.append(dict(graph=name, nodes=g.n, kept_entries=kept, reference_s=t_ref, numba_s=t_nb, native_s=t_nat,
                        speedup_numba=t_ref / t_nb, speedup_native=t_ref / t_nat, peak_bytes=a.peak_memory_bytes))
        print(rows[-1], flush=True)
    save_json("simulator", raw)
    md = [
        "## Simulator kernels (issue 2)",
        "",
        f"`{command_line()}` on {machine_line()}.",
        "",
        "Checkpoint-all schedule of each real graph; `simulate(..., timeline=False)` end to end (validation,",
        "kernel, cost), best of repeats, both kernels in the same run. Targets: numba >= 50x the reference",
        "and < 1 s on LSTM (5239 nodes).",
        "",
        table(["graph", "nodes", "S entries", "reference ms", "numba ms", "numba speed-up", "native ms",
               "native speed-up", "peak GiB"], rows),
    ]
    write_section("simulator", "\n".join(md))


if __name__ == "__main__":
    main()
