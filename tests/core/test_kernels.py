"""Every available kernel implementation against the reference (identical integer outputs)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from remat_core import Graph, Schedule, UnknownMethodError, kernels, load_dtr_dag, optimal_r_given_s, simulate
from remat_core.kernels import available_kernels, get_kernel, kernel_name, use_kernel
from remat_core.zoo import linear_graph
from shared_data import SHARED_DATA
from strategies import dags, raw_schedules, valid_schedules

OTHERS = [k for k in available_kernels() if k != "reference"]


def test_all_three_implementations_are_built_and_ordered():
    # pip builds the native module (setup.py) and numba is a hard dependency
    assert available_kernels() == ["native", "numba", "reference"]
    assert kernel_name() == "native"


def run_sim(g, s, impl):
    dep_ptr, dep_idx, _, _ = g.csr
    return kernels.simulate(g.n, *s.csr, dep_ptr, dep_idx, g.memory_bytes, g.workspace_bytes, g.fixed_bytes,
                            kernel=impl)


@pytest.mark.parametrize("impl", OTHERS)
@given(data=st.data())
def test_simulate_identical_on_valid_schedules(impl, data):
    g = data.draw(dags(max_nodes=10))
    s = data.draw(valid_schedules(g))
    ref_info, ref_steps = run_sim(g, s, "reference")
    info, steps = run_sim(g, s, impl)
    assert info.dtype == np.int64 and steps.dtype == np.int64
    assert info.tolist() == ref_info.tolist()
    assert steps.tolist() == ref_steps.tolist()


@pytest.mark.parametrize("impl", OTHERS)
@given(data=st.data())
def test_simulate_identical_error_reports(impl, data):
    g = data.draw(dags(max_nodes=8))
    s = data.draw(raw_schedules(g))
    ref_info, _ = run_sim(g, s, "reference")
    info, _ = run_sim(g, s, impl)
    assert info[:4].tolist() == ref_info[:4].tolist()
    if ref_info[0] == 0:
        assert info.tolist() == ref_info.tolist()


@pytest.mark.parametrize("impl", OTHERS)
@given(data=st.data())
def test_r_given_s_identical(impl, data):
    g = data.draw(dags(max_nodes=10))
    n = g.n
    S = np.tril(np.array(data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))).reshape(n, n), -1)
    s = Schedule(np.eye(n, dtype=bool), S)
    dep_ptr, dep_idx, _, _ = g.csr
    ref = kernels.r_given_s(n, s.csr[2], s.csr[3], dep_ptr, dep_idx, kernel="reference")
    out = kernels.r_given_s(n, s.csr[2], s.csr[3], dep_ptr, dep_idx, kernel=impl)
    assert out[0].tolist() == ref[0].tolist() and out[1].tolist() == ref[1].tolist()


EDGE_CASES = [
    ("single node", linear_graph(1).replace(memory_bytes=np.array([0, 0, 0]))),
    ("zero sizes", linear_graph(3).replace(memory_bytes=np.zeros(7, dtype=np.int64))),
    ("huge sizes", linear_graph(3).replace(memory_bytes=np.full(7, 2**40, dtype=np.int64), fixed_bytes=2**45)),
    ("workspace", linear_graph(4).replace(workspace_bytes=np.arange(9, dtype=np.int64))),
]


@pytest.mark.parametrize("impl", OTHERS)
@pytest.mark.parametrize("label, g", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_case_table(impl, label, g):
    for s in (Schedule.checkpoint_all(g), Schedule(*_recompute_all(g.n))):
        s = optimal_r_given_s(g, s)
        a = run_sim(g, s, "reference")
        b = run_sim(g, s, impl)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def _recompute_all(n):
    return np.eye(n, dtype=bool), np.zeros((n, n), dtype=bool)


def test_env_var_and_context_manager(monkeypatch):
    g = linear_graph(3)
    s = Schedule.checkpoint_all(g)
    monkeypatch.setenv("REMAT_KERNEL", "reference")
    assert kernel_name() == "reference"
    ref = simulate(g, s)
    with use_kernel("numba"):
        assert kernel_name() == "numba"
        assert simulate(g, s).step_memory_bytes.tolist() == ref.step_memory_bytes.tolist()
    assert kernel_name() == "reference"
    monkeypatch.setenv("REMAT_KERNEL", "fortran")
    with pytest.raises(UnknownMethodError, match="'fortran' is not available; available"):
        simulate(g, s)
    with pytest.raises(UnknownMethodError, match="not available"):
        get_kernel("fortran")


def test_real_graph_identical(tmp_path):
    import os


    path = os.path.join(SHARED_DATA, "ResNet-32_56.json")
    if not os.path.exists(path):
        pytest.skip("shared data not present")
    g = load_dtr_dag(path)
    s = Schedule.checkpoint_all(g)
    for impl in OTHERS:
        a, b = run_sim(g, s, "reference"), run_sim(g, s, impl)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def _path_cut_inputs(g, data):
    """The separation kernel's inputs for the strong program of ``g`` at a drawn point with some 0/1 entries."""
    from remat_core.formulation import build_milp
    from remat_core.formulation.cuts import _path_data

    sf = build_milp(g, int(g.memory_bytes.sum() + g.workspace_bytes.max(initial=0) + g.fixed_bytes), "strong")
    vals = data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.25, 0.5, 0.1, 0.9, 0.3]),
                              min_size=sf.n_cols, max_size=sf.n_cols))
    R, S = sf.fractional(np.array(vals))
    in_ptr, in_idx, first, Rcol, Scol = _path_data(sf)
    n = g.n
    W = np.where(Scol >= 0, S, np.inf)
    cum = np.vstack([np.zeros((1, n)), np.cumsum(R, axis=0)])
    return n, in_ptr, in_idx, W, cum, first, Rcol, Scol


@pytest.mark.parametrize("impl", OTHERS)
@settings(max_examples=150)   # equal-weight paths decide a row in about 1 draw in 15: enough draws to meet some
@given(data=st.data(), max_cuts=st.integers(1, 40))
def test_path_cuts_identical(impl, data, max_cuts):
    # every violated row, the same rows in the same order with bit-identical violations (ties broken alike);
    # a smaller max_cuts gives the first rows of that list
    g = data.draw(dags(min_nodes=2, max_nodes=9))
    args = _path_cut_inputs(g, data)
    ref = kernels.path_cuts(*args, 1e-6, 10**6, kernel="reference")
    out = kernels.path_cuts(*args, 1e-6, 10**6, kernel=impl)
    assert out[0].dtype == np.float64 and out[1].dtype == np.int64 and out[2].dtype == np.int64
    assert out[0].tobytes() == ref[0].tobytes()
    assert out[1].tolist() == ref[1].tolist() and out[2].tolist() == ref[2].tolist()
    viol, ptr, idx = kernels.path_cuts(*args, 1e-6, max_cuts, kernel=impl)
    k = min(max_cuts, len(ref[0]))
    assert viol.tobytes() == ref[0][:k].tobytes() and ptr.tolist() == ref[1][:k + 1].tolist()
    assert idx.tolist() == ref[2][:ref[1][k]].tolist()


def test_path_cuts_reference_against_brute_force():
    # every violated row the reference reports is a real path whose left-hand side is 1 - violation, and
    # no (stage, ancestor, value) triple it leaves out has a cheaper path (enumerated on a small DAG)
    import itertools

    g = Graph.from_arrays([[], [0], [0, 1], [1, 2], [3], [2, 4]], cost=[1] * 6, memory_bytes=[1] * 6)
    rng = np.random.default_rng(3)
    n = g.n
    W = np.where(np.tril(np.ones((n, n), dtype=bool), -1), rng.choice([0.0, 0.1, 0.3, 0.6], size=(n, n)), np.inf)
    R = rng.choice([0.0, 0.0, 0.2], size=(n, n))
    cum = np.vstack([np.zeros((1, n)), np.cumsum(R, axis=0)])
    in_ptr, in_idx, _, _ = g.csr
    inputs = [in_idx[in_ptr[k]:in_ptr[k + 1]].tolist() for k in range(n)]
    readers = [[k for k in range(n) if i in inputs[k]] for i in range(n)]
    first = np.array([[min([k for k in readers[v] if k >= s], default=n) for v in range(n)] for s in range(n)])
    ids = np.arange(n * n, dtype=np.int64).reshape(n, n)
    Rcol, Scol = ids, ids + n * n
    viol, ptr, idx = kernels.path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, 1e-6, 10**6,
                                       kernel="reference")

    def paths(a, v):   # every path a -> v, as node lists
        if a == v:
            yield [a]
        for z in inputs[v]:
            for p in paths(a, z):
                yield p + [v]

    expected = {}
    for s, a, v in itertools.product(range(n), range(n), range(n)):
        if a >= s or first[s, v] >= n:
            continue
        best = min((sum(W[s, b] for b in p) for p in paths(a, v)), default=np.inf)
        lhs = cum[first[s, v] + 1, a] - cum[s, a] + best
        if lhs < 1 - 1e-6:
            expected[(s, a, v)] = 1 - lhs
    assert len(viol) == len(expected) > 0
    assert list(viol) == sorted(viol, reverse=True)
    x = np.concatenate([R.ravel(), np.where(np.isfinite(W), W, 0).ravel()])
    got = set()
    for r in range(len(viol)):
        cols = idx[ptr[r]:ptr[r + 1]]
        s_part = cols[cols >= n * n] - n * n
        s, v = int(s_part[0] // n), int(s_part[0] % n)          # the path is listed from v back to a
        a = int(s_part[-1] % n)
        assert np.isclose(1 - x[cols].sum(), viol[r]) and np.isclose(viol[r], expected[(s, a, v)])
        got.add((s, a, v))
    assert got == set(expected)


def test_the_default_kernel_imports_no_other():
    # the portfolio's child process pays every import before its first node; numba's alone is ~0.13 s
    import os
    import subprocess
    import sys

    if kernel_name() != "native" or os.environ.get("REMAT_KERNEL"):
        pytest.skip("the native module is not the default here")
    code = ("import sys; from remat_core import Schedule, simulate; from remat_core.zoo import linear_graph; "
            "g = linear_graph(3); simulate(g, Schedule.checkpoint_all(g)); print(sorted(m for m in sys.modules "
            "if m.startswith('remat_core.kernels.') or m == 'numba'))")
    env = {k: v for k, v in os.environ.items() if k != "REMAT_KERNEL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "['remat_core.kernels._native', 'remat_core.kernels._native_ext']"
