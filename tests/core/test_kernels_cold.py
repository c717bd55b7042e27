"""A cold numba cache (no native module, a fresh tree) is compiled by a child process, never inside a timed call:
meanwhile the default kernel is the reference, so a solve keeps its time limit and returns a schedule (issue 37:
a 60 s limit gave NO_SOLUTION after 142 s while numba compiled). Deterministic: a stub numba module, a fake child
and a fake clock; the real compile is one slow test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from remat_core import kernels, simulate, solve
from remat_core.units import resolve_budget
from remat_core.zoo import random_training_graph


class _Child:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


@pytest.fixture
def cold(monkeypatch):
    """No native module; numba's cache cold until ``state["cached"]``; every numba kernel call recorded (each
    would be a compile of seconds to minutes); children recorded; the recheck clock in ``state["now"]``."""
    state = {"cached": False, "calls": [], "children": [], "now": 0.0, "child_code": None}

    def kernel(name):
        return lambda *a: state["calls"].append(name) or getattr(kernels.get_kernel("reference"), name)(*a)

    stub = types.SimpleNamespace(__name__="remat_core.kernels._numba", cached=lambda: state["cached"],
                                 **{k: kernel(k) for k in ("simulate", "r_given_s", "path_cuts", "dtr",
                                                           "dtr_sequence")})

    def start():
        state["children"].append(_Child(state["child_code"]))
        return state["children"][-1]

    monkeypatch.delenv("REMAT_KERNEL", raising=False)
    monkeypatch.setitem(kernels._loaded, "native", None)
    monkeypatch.setitem(kernels._loaded, "numba", stub)
    monkeypatch.setattr(kernels, "_preferred", [])
    monkeypatch.setattr(kernels, "_numba_state", {})
    monkeypatch.setattr(kernels, "_start_compile", start)
    monkeypatch.setattr(kernels, "time", types.SimpleNamespace(monotonic=lambda: state["now"]))
    return state


def test_a_solve_with_a_cold_cache_runs_the_reference_and_returns_a_schedule(cold):
    g = random_training_graph(10, 3, seed=1)
    budget = resolve_budget(g, 0.6)
    res = solve(g, budget, method="auto", time_limit_s=30)
    assert res.success and res.peak_memory_bytes <= budget
    assert simulate(g, res.schedule).peak_memory_bytes <= budget
    assert cold["calls"] == []                     # nothing compiled in this process
    assert len(cold["children"]) == 1              # one child compiles, however many kernel calls
    assert kernels.numba_compile_status() == "compiling" and kernels.kernel_name() == "reference"

    # the child filled the cache: numba from the next recheck on
    cold["cached"] = True
    assert kernels.kernel_name() == "reference"    # not read again before COLD_RECHECK_S
    cold["now"] += kernels.COLD_RECHECK_S
    assert kernels.kernel_name() == "numba" and kernels.numba_compile_status() == "warm"
    again = solve(g, budget, method="auto", time_limit_s=30)
    assert again.success and cold["calls"] and len(cold["children"]) == 1


def test_a_child_that_ends_with_the_cache_cold_leaves_this_process_on_the_reference(cold):
    cold["child_code"] = 1
    assert kernels.kernel_name() == "reference"
    for _ in range(3):
        cold["now"] += kernels.COLD_RECHECK_S
        assert kernels.kernel_name() == "reference"
    assert len(cold["children"]) == 1 and kernels.numba_compile_status() == "gave up"


def test_an_explicit_choice_of_numba_is_kept(cold, monkeypatch):
    with kernels.use_kernel("numba"):
        assert kernels.kernel_name() == "numba"
    monkeypatch.setenv("REMAT_KERNEL", "numba")
    assert kernels.kernel_name() == "numba"
    assert cold["children"] == []


def test_the_sequence_kernel_skips_a_cold_numba_behind_the_native_module(cold, monkeypatch):
    """The native module has no ``dtr_sequence``: its calls went to numba, compiling it inside the call."""
    native = types.SimpleNamespace(__name__="remat_core.kernels._native")
    monkeypatch.setitem(kernels._loaded, "native", native)
    g = random_training_graph(4, 3, seed=0)
    dep_ptr, dep_idx, user_ptr, user_idx = g.csr
    args = (g.n, dep_ptr, dep_idx, user_ptr, user_idx, g.memory_bytes, g.workspace_bytes, g.cost, g.fixed_bytes,
            10**12, np.arange(g.n), 0, 0, 1e9)
    out = kernels.dtr_sequence(*args)
    assert cold["calls"] == [] and len(cold["children"]) == 1
    cold["cached"] = True
    cold["now"] += kernels.COLD_RECHECK_S
    again = kernels.dtr_sequence(*args)
    assert cold["calls"] == ["dtr_sequence"]
    assert out[0].tolist() == again[0].tolist() and out[3] == again[3]


@pytest.mark.slow
def test_a_real_cold_cache_is_compiled_by_a_child_with_the_callers_signatures(tmp_path):
    """In a fresh process with an empty NUMBA_CACHE_DIR and no native module: the reference at first, one child
    compiles, then numba loads every kernel from the cache, and auto, ilp and DTR's sequence runs compile nothing
    more (``_numba._signatures`` are the types the core's callers pass)."""
    script = textwrap.dedent("""
        import time
        from remat_core import kernels, solve
        from remat_core.kernels import _numba
        from remat_core.units import resolve_budget
        from remat_core.zoo import random_training_graph
        kernels._loaded["native"] = None
        assert kernels.kernel_name() == "reference", kernels.kernel_name()
        assert kernels._numba_state["proc"].wait(900) == 0
        time.sleep(kernels.COLD_RECHECK_S)
        assert kernels.kernel_name() == "numba"
        def n_overloads():
            return {k: len(getattr(_numba, k)._cache._cache_file._load_index()) for k in _numba._signatures()}
        before = n_overloads()
        assert before == {k: len(v) for k, v in _numba._signatures().items()}, before
        g = random_training_graph(6, 3, seed=1)
        b = resolve_budget(g, 0.5)
        assert solve(g, b, method="auto", time_limit_s=30).success
        solve(g, b, method="ilp", time_limit_s=30)
        solve(g, b, method="dtr", order="auto")
        assert n_overloads() == before, n_overloads()
        assert all(not d.stats.cache_misses for d in (_numba.simulate, _numba.dtr)), "compiled in the parent"
        print("OK")
    """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("REMAT_KERNEL", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
