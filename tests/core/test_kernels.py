"""Every available kernel implementation against the reference (identical integer outputs)."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from remat_core import Schedule, UnknownMethodError, kernels, load_dtr_dag, optimal_r_given_s, simulate
from remat_core.kernels import available_kernels, get_kernel, kernel_name, use_kernel
from remat_core.zoo import linear_graph
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

    from conftest import SHARED_DATA

    path = os.path.join(SHARED_DATA, "ResNet-32_56.json")
    if not os.path.exists(path):
        pytest.skip("shared data not present")
    g = load_dtr_dag(path)
    s = Schedule.checkpoint_all(g)
    for impl in OTHERS:
        a, b = run_sim(g, s, "reference"), run_sim(g, s, impl)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
