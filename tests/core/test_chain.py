"""Chain recognition and the chain-only methods' errors on DAGs."""

import numpy as np
import pytest

from remat_core import GraphValidationError, Graph, load_dtr_dag, solve
from remat_core.chain import as_chain, chain_reason, is_chain
from remat_core.zoo import linear_graph, random_layered_dag, random_training_graph, training_graph


@pytest.mark.parametrize("n", [1, 2, 5])
def test_linear_graph_is_chain(n):
    info = as_chain(linear_graph(n))
    assert info.n_forward == n and info.loss == n
    assert info.backward.tolist() == [2 * n - j for j in range(n)]
    assert not info.reads_input.any()


def test_training_graph_of_chain_is_chain_reading_inputs():
    fwd = Graph.from_arrays([[], [0], [1], [2]], cost=[1, 2, 3, 4], memory_bytes=[4, 3, 2, 1])
    info = as_chain(training_graph(fwd))
    assert info.n_forward == 4
    assert info.reads_input.tolist() == [False, True, True, True]


def test_dags_are_not_chains():
    g = random_training_graph(5, max_width=3, seed=1)
    assert not is_chain(g)
    assert "reads" in chain_reason(g) or "forward" in chain_reason(g) or "nodes" in chain_reason(g)
    assert not is_chain(random_layered_dag(4, seed=0))  # no backward nodes
    # a linear graph with an extra skip edge is not a chain
    g = linear_graph(3)
    deps = [list(d) for d in g.deps]
    deps[2].append(0)
    bad = Graph.from_arrays(deps, is_backward=g.is_backward)
    assert "previous node" in chain_reason(bad)


@pytest.mark.parametrize("method,alt", [("chen-sqrtn", "linearized-sqrtn"), ("chen-greedy", "linearized-greedy"),
                                        ("griewank-logn", "linearized"), ("rotor", "linearized-greedy")])
def test_chain_methods_raise_clear_error_on_dags(method, alt):
    g = random_training_graph(4, max_width=3, seed=2)
    with pytest.raises(GraphValidationError, match=method) as exc:
        solve(g, 10**9, method=method)
    assert alt in str(exc.value)


def test_dtr_graph_is_not_chain_and_says_why():
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "dtr_dags", "U-Net_6.json")
    if not os.path.exists(path):
        pytest.skip("shared DTR graphs not available")
    reason = chain_reason(load_dtr_dag(path))
    assert "must be forward" in reason and "backward nodes" in reason
    assert "is_backward is all false" in chain_reason(load_dtr_dag(path, infer_backward=False))
