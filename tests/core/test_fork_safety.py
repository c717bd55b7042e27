"""A process forked after a HiGHS solve in its parent solves within its time limit (the ``make demo`` hang)."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("highspy")

# The parent solves a MILP with a pool of two HiGHS threads, forks, and the child solves again with a 2 s
# limit. Before the fork hook, the child handed a task to a worker thread that only the parent had and
# waited for it forever; the parent kills it after 100 s and exits 3.
_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np, scipy.sparse as sp
    from remat_core.solvers.backends import solve_arrays

    rng = np.random.default_rng(0)
    n, m = 300, 40
    c = -rng.integers(1, 100, n).astype(float)
    A = sp.csr_matrix(rng.integers(0, 50, (m, n)).astype(float))

    def run():
        return solve_arrays("highs", c, A, np.full(m, -np.inf), np.full(m, 500.0), np.zeros(n), np.ones(n),
                            np.ones(n, np.int32), time_limit_s=2.0, threads=2)

    run()
    pid = os.fork()
    if pid == 0:
        out = run()
        os._exit(0 if out.x is not None else 4)
    for _ in range(1000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            sys.exit(os.waitstatus_to_exitcode(status))
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit(3)
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_child_forked_after_a_parallel_highs_solve_solves_again():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode} (3: the child hung)\n{proc.stderr[-2000:]}"
