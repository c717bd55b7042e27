import numpy as np
import pytest

from remat_core import Graph, GraphValidationError
from remat_core.zoo import linear_graph, random_layered_dag, random_training_graph, training_graph


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_linear_graph_structure(n):
    g = linear_graph(n)
    assert g.n == 2 * n + 1
    for k in range(1, 2 * n + 1):
        assert k - 1 in g.deps[k]
    for i in range(n):
        assert set(g.deps[2 * n - i]) == {2 * n - i - 1, i}
    assert g.names[n] == "loss"
    assert g.is_backward.tolist() == [k > n for k in range(2 * n + 1)]
    assert (g.cost == 1).all() and (g.memory_bytes == 1).all()
    assert len(g.edges) == 2 * n + n


def test_linear_graph_costs_and_errors():
    g = linear_graph(2, cost=[1, 2, 3, 4, 5], memory_bytes=7, fixed_bytes=3)
    assert g.cost.tolist() == [1, 2, 3, 4, 5] and g.fixed_bytes == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_forward"):
            linear_graph(bad)


def test_training_graph_follows_reverse_mode_rule():
    # diamond: a -> b, a -> c, (b, c) -> d
    fwd = Graph.from_arrays([[], [0], [0], [1, 2]], names=["a", "b", "c", "d"], cost=[1, 2, 3, 4])
    tg = training_graph(fwd, backward_cost_factor=2.0)
    name = lambda i: tg.names[i]  # noqa: E731
    deps = {tg.names[k]: {name(i) for i in tg.deps[k]} for k in range(tg.n)}
    assert deps["loss"] == {"d"}
    assert deps["grad/d"] == {"b", "c", "d", "loss"}
    assert deps["grad/b"] == {"a", "b", "grad/d"}
    assert deps["grad/a"] == {"a", "grad/b", "grad/c"}
    assert tg.cost[tg.index("grad/d")] == 8.0
    assert tg.is_backward.sum() == 4
    assert tg.meta["loss"] == 4 and tg.meta["grad_of"]["grad/b"] == "b"
    with pytest.raises(GraphValidationError, match="already has backward"):
        training_graph(tg)


def test_random_generators_are_seeded_and_valid():
    assert random_layered_dag(6, seed=3) == random_layered_dag(6, seed=3)
    assert random_layered_dag(6, seed=3) != random_layered_dag(6, seed=4)
    g = random_training_graph(6, seed=5)
    assert not g.is_backward[: g.meta["loss"] + 1].any() and g.is_backward[g.meta["loss"] + 1:].all()
    sinks = [k for k in range(g.n) if not g.users[k]]
    assert sinks == [g.n - 1]  # every value feeds the final gradient
    with pytest.raises(ValueError, match="skip_prob"):
        random_layered_dag(3, skip_prob=2)
    assert np.all(random_layered_dag(5, random_costs=False).cost == 1)
