"""Run every ``benchmarks/bench_*.py`` with ``--quick`` (what ``make bench`` does).

Each script rewrites its own section of ``benchmarks/README.md``. Extra
arguments are passed to every script; ``--full`` drops ``--quick``;
``--experiments`` also runs the MILP-tuning experiments,
``benchmarks/experiments/bench_*.py`` (see that folder's README).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    full = "--full" in argv
    experiments = "--experiments" in argv
    extra = [a for a in argv if a not in ("--full", "--experiments")]
    scripts = sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    if experiments:
        scripts += sorted(glob.glob(os.path.join(HERE, "experiments", "bench_*.py")))
    failed = []
    for script in scripts:
        cmd = [sys.executable, script] + ([] if full else ["--quick"]) + extra
        print(f"== {' '.join(os.path.relpath(c, os.path.dirname(HERE)) if c == script else c for c in cmd)}",
              flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=os.path.dirname(HERE))
        print(f"== {os.path.relpath(script, HERE)}: exit {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(os.path.relpath(script, HERE))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
