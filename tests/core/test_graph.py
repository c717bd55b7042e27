import json
import math
import os

import numpy as np
import pytest

from shared_data import SHARED_DATA
from remat_core import Graph, GraphValidationError, Node, load_dtr_dag


def chain(n=3):
    return [Node(f"v{i}", cost=i + 1, memory_bytes=2 * i, deps=(f"v{i-1}",) if i else ()) for i in range(n)]


def test_nodes_in_any_order_are_stored_topologically_with_mapping():
    nodes = [Node("c", deps=("a", "b")), Node("a"), Node("b", deps=("a",))]
    g = Graph(nodes)
    assert g.names == ("a", "b", "c")
    assert g.deps == ((), (0,), (0, 1))
    assert g.users == ((1, 2), (2,), ())
    assert g.original_index.tolist() == [1, 2, 0]
    assert g.index("c") == 2


def test_already_topological_order_is_kept():
    g = Graph([Node("x"), Node("y"), Node("z", deps=("x",))])
    assert g.names == ("x", "y", "z")


def test_arrays_are_read_only_and_typed():
    g = Graph(chain())
    assert g.cost.dtype == np.float64 and g.memory_bytes.dtype == np.int64
    with pytest.raises(ValueError):
        g.cost[0] = 5


def test_mapping_nodes_and_defaults():
    g = Graph([{"name": "a"}, {"name": "b", "deps": ["a"], "workspace_bytes": 3, "is_backward": True}], fixed_bytes=7)
    assert g.workspace_bytes.tolist() == [0, 3]
    assert g.is_backward.tolist() == [False, True]
    assert g.fixed_bytes == 7
    assert g.forward_indices.tolist() == [0] and g.backward_indices.tolist() == [1]


@pytest.mark.parametrize(
    "nodes, match",
    [
        ([Node("a", deps=("b",)), Node("b", deps=("a",))], r"cycle: 'a' -> 'b' -> 'a'|cycle: 'b' -> 'a' -> 'b'"),
        ([Node("a", deps=("c",)), Node("b", deps=("a",)), Node("c", deps=("b",)), Node("d")], "cycle"),
        ([Node("a"), Node("a")], "duplicate node name 'a'"),
        ([Node("a", deps=("zz",))], "depends on unknown node 'zz'"),
        ([Node("a", deps=("a",))], "self-loop on node 'a'"),
        ([Node("a", cost=-1)], "cost of node 'a' must be >= 0"),
        ([Node("a", cost=math.nan)], "cost of node 'a' must be finite"),
        ([Node("a", cost=math.inf)], "cost of node 'a' must be finite"),
        ([Node("a", memory_bytes=-2)], "memory_bytes of node 'a' must be >= 0"),
        ([Node("a", memory_bytes=1.5)], "memory_bytes of node 'a' must be an integer"),
        ([Node("a", workspace_bytes=-1)], "workspace_bytes of node 'a' must be >= 0"),
        ([Node("a", cost="3")], "cost of node 'a' must be a non-negative number"),
        ([Node("a", memory_bytes=True)], "memory_bytes of node 'a' must be a non-negative number"),
        ([Node("")], "non-empty string"),
        ([Node("a", deps="b")], "sequence of names"),
        ([{"name": "a", "colour": 1}], "unknown fields"),
        ([{"cost": 1}], "has no `name`"),
        ([42], "Node objects or mappings"),
    ],
)
def test_invalid_graphs_name_the_offender(nodes, match):
    with pytest.raises(GraphValidationError, match=match):
        Graph(nodes)


def test_graph_validation_error_is_value_error():
    with pytest.raises(ValueError):
        Graph([Node("a", deps=("a",))])


@pytest.mark.parametrize("fixed", [-1, 1.5, math.nan, "x"])
def test_bad_fixed_bytes(fixed):
    with pytest.raises(GraphValidationError, match="fixed_bytes"):
        Graph([Node("a")], fixed_bytes=fixed)


def test_meta_must_be_json():
    with pytest.raises(GraphValidationError, match="meta"):
        Graph([Node("a")], meta={"x": object()})


def test_repeated_inputs_are_read_once():
    g = Graph.from_arrays([[], [0, 0]])
    assert g.deps == ((), (0,))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(deps=[[], [5]]), "unknown node position 5"),
        (dict(deps=[[], [1]]), "self-loop"),
        (dict(deps=[[1], [0]]), "cycle"),
        (dict(deps=[[], [0]], cost=[1, -1]), "cost of node '1'"),
        (dict(deps=[[], [0]], cost=[1, np.nan]), "cost of node '1'"),
        (dict(deps=[[], [0]], memory_bytes=[1, 2, 3]), "one entry per node"),
        (dict(deps=[[], [0]], memory_bytes=[1, 2.5]), "must be an integer"),
        (dict(deps=[[], [0]], names=["a"]), "`names`"),
        (dict(deps=[[], [0]], names=["a", "a"]), "duplicate node name"),
        (dict(deps=[[], [0]], is_backward=[True]), "`is_backward`"),
        (dict(deps=[[], [0]], cost=["a", "b"]), "cost of node '0' must be a non-negative number"),
    ],
)
def test_from_arrays_errors(kwargs, match):
    with pytest.raises(GraphValidationError, match=match):
        Graph.from_arrays(**kwargs)


def test_from_arrays_matches_node_constructor():
    a = Graph(chain(4), fixed_bytes=3)
    b = Graph.from_arrays([[], [0], [1], [2]], cost=[1, 2, 3, 4], memory_bytes=[0, 2, 4, 6],
                          names=["v0", "v1", "v2", "v3"], fixed_bytes=3)
    assert a == b
    assert a.nodes()[2] == Node("v2", cost=3.0, memory_bytes=4, deps=("v1",))


def test_save_load_roundtrip(tmp_path):
    g = Graph.from_arrays([[2], [], [1]], cost=[1.5, 2, 3], memory_bytes=[4, 5, 6], workspace_bytes=[0, 1, 2],
                          is_backward=[True, False, False], names=["z", "x", "y"], fixed_bytes=11,
                          name="demo", meta={"k": [1, 2]})
    p = tmp_path / "g.json"
    g.save(p)
    h = Graph.load(p)
    assert h == g and h.name == "demo" and h.meta == {"k": [1, 2]}
    assert json.loads(p.read_text())["version"] == 1


def test_load_rejects_wrong_format_and_version(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"format": "other"}))
    with pytest.raises(GraphValidationError, match="not a remat graph"):
        Graph.load(p)
    p.write_text(json.dumps({"format": "remat-graph", "version": 99, "nodes": []}))
    with pytest.raises(GraphValidationError, match="version 99"):
        Graph.load(p)
    p.write_text("{nope")
    with pytest.raises(GraphValidationError, match="not valid JSON"):
        Graph.load(p)


def test_replace_and_unknown_field():
    g = Graph(chain())
    h = g.replace(cost=np.ones(3), fixed_bytes=9)
    assert h.cost.tolist() == [1, 1, 1] and h.fixed_bytes == 9 and h.deps == g.deps
    with pytest.raises(TypeError, match="unknown fields"):
        g.replace(colour=1)


def test_edges_and_csr_agree():
    g = Graph.from_arrays([[], [0], [0, 1], [2]])
    assert g.edges.tolist() == [[0, 1], [0, 2], [1, 2], [2, 3]]
    dep_ptr, dep_idx, user_ptr, user_idx = g.csr
    assert dep_ptr.tolist() == [0, 0, 1, 3, 4] and dep_idx.tolist() == [0, 0, 1, 2]
    assert user_ptr.tolist() == [0, 2, 3, 4, 4] and user_idx.tolist() == [1, 2, 2, 3]


def test_min_budget_lower_bound():
    g = Graph.from_arrays([[], [0], [0, 1]], memory_bytes=[3, 4, 5], workspace_bytes=[0, 10, 0], fixed_bytes=2)
    # node 1: 4 + 10 + 3 = 17; node 2: 5 + 3 + 4 = 12
    assert g.min_budget_lower_bound_bytes() == 2 + 17


EXPECTED_DTR = {
    "U-Net_6": 201, "ResNet-32_56": 270, "InceptionV4_64": 1170, "Transformer_10": 1310,
    "DenseNet-121_84": 1461, "Unrolled_GAN": 4506, "TreeLSTM_D.6": 4738, "LSTM_512": 5239,
}


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared/data not present")
@pytest.mark.parametrize("name, n", sorted(EXPECTED_DTR.items()))
def test_load_dtr_dag_real_graphs(name, n):
    path = os.path.join(SHARED_DATA, f"{name}.json")
    g = load_dtr_dag(path)
    raw = json.load(open(path))
    assert g.n == n
    assert g.fixed_bytes == raw["cost_ram_parameters"]
    assert g.memory_bytes.sum() == sum(x["cost_ram"] for x in raw["nodes"])
    assert len(g.edges) == sum(len(v) for v in raw["args"].values())


def test_load_dtr_dag_errors(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps({"nodes": []}))
    with pytest.raises(GraphValidationError, match="missing key 'args'"):
        load_dtr_dag(p)
    p.write_text(json.dumps({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 1}], "args": {"0": [7]}}))
    with pytest.raises(GraphValidationError, match="unknown node id 7"):
        load_dtr_dag(p)
    p.write_text(json.dumps({"nodes": [{"id": 0, "cost_cpu": -1, "cost_ram": 1}], "args": {}}))
    with pytest.raises(GraphValidationError, match=r"d.json': node 0: `cost_cpu` must be >= 0"):
        load_dtr_dag(p)


def test_infer_loss_index_recovers_known_splits():
    from remat_core import infer_loss_index
    from remat_core.zoo import linear_graph, random_training_graph

    for n in (1, 2, 7):
        g = linear_graph(n)
        assert infer_loss_index(g.replace(is_backward=np.zeros(g.n, bool))) == n
    for seed in range(40):
        g = random_training_graph(1 + seed % 9, 1 + seed % 3, seed=seed)
        assert infer_loss_index(g) == g.meta["loss"]
    assert infer_loss_index(Graph([Node("a")])) == 0


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared/data not present")
def test_load_dtr_dag_infers_the_backward_split():
    path = os.path.join(SHARED_DATA, "ResNet-32_56.json")
    g = load_dtr_dag(path)
    raw = load_dtr_dag(path, infer_backward=False)
    loss = g.meta["loss"]
    assert g.meta["backward_inferred"] and not raw.is_backward.any()
    assert not g.is_backward[: loss + 1].any() and g.is_backward[loss + 1:].all()
    assert 0.3 * g.n < loss < 0.7 * g.n
    assert g.deps == raw.deps and np.array_equal(g.cost, raw.cost)
