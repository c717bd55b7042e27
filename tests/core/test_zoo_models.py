"""The Keras benchmark zoo shipped as JSON (remat_core.zoo.models)."""

import json
import os

import numpy as np
import pytest

from remat_core import Graph, Schedule, simulate
from remat_core.zoo import linear_graph
from remat_core.zoo.models import graph_from_spec, list_zoo, load_spec, zoo_graph

KERAS_MODELS = ["vgg16", "vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet"]
# published parameter counts of the keras.applications models (a check on the extraction)
PARAMS = {"vgg16": 138_357_544, "vgg19": 143_667_240, "mobilenet": 4_253_864, "resnet50": 25_636_712}


def test_list_zoo_has_every_keras_model():
    names = list_zoo()
    for m in KERAS_MODELS:
        assert f"keras_{m}" in names


@pytest.mark.parametrize("model", KERAS_MODELS)
def test_graph_scales_linearly_with_batch(model):
    spec = load_spec(model)
    m = len(spec["layers"])
    g1, g3 = zoo_graph(model, batch_size=1), zoo_graph(model, batch_size=3)
    assert g1.n == g3.n == 2 * m + 1
    assert int(g1.is_backward.sum()) == m
    np.testing.assert_array_equal(g3.memory_bytes, 3 * g1.memory_bytes)
    np.testing.assert_allclose(g3.cost, 3 * g1.cost)
    params_bytes = 8 * spec["params"]
    input_bytes = 4 * spec["input_elements"]
    assert g1.fixed_bytes == params_bytes + input_bytes
    assert g3.fixed_bytes == params_bytes + 3 * input_bytes
    # every node is computed once by checkpoint-all and the peak grows with the batch
    s1 = simulate(g1, Schedule.checkpoint_all(g1))
    s3 = simulate(g3, Schedule.checkpoint_all(g3))
    assert s3.peak_memory_bytes > s1.peak_memory_bytes
    assert s1.total_cost == pytest.approx(float(g1.cost.sum()))
    meta = g1.meta
    assert meta["n_forward"] == m and g1.names[meta["loss"]] == "loss"
    assert meta["batch_size"] == 1


@pytest.mark.parametrize("model", list(PARAMS))
def test_parameter_counts_match_keras_applications(model):
    assert load_spec(model)["params"] == PARAMS[model]


def test_vgg16_flops_match_the_published_count():
    # VGG16 at 224x224: about 15.47 G multiply-accumulates per image
    spec = load_spec("vgg16")
    assert sum(x["flops"] for x in spec["layers"]) == pytest.approx(15.47e9, rel=0.01)
    assert zoo_graph("vgg16").n == 45


def _toy_spec():
    # a -> b -> d, a -> c -> d  (diamond), output d
    return {"format": "remat-zoo-model", "version": 1, "name": "toy", "params": 5, "input_elements": 2,
            "bytes_per_element": 4, "outputs": ["d"],
            "layers": [{"name": "a", "deps": [], "flops": 1, "output_elements": 3},
                       {"name": "b", "deps": ["a"], "flops": 2, "output_elements": 1},
                       {"name": "c", "deps": ["a"], "flops": 3, "output_elements": 2},
                       {"name": "d", "deps": ["b", "c"], "flops": 4, "output_elements": 1}]}


def _inputs(g, name):
    return sorted(g.names[i] for i in g.deps[g.index(name)])


def test_checkmate_rule_dependencies():
    g = graph_from_spec(_toy_spec(), batch_size=2, rule="checkmate")
    assert _inputs(g, "loss") == ["d"]
    assert _inputs(g, "grad/d") == ["d", "loss"]
    assert _inputs(g, "grad/b") == ["b", "d", "grad/d"]
    assert _inputs(g, "grad/a") == ["a", "b", "c", "grad/b", "grad/c"]
    assert g.cost[g.index("grad/c")] == 2 * 2 * 3  # batch 2, backward = 2 x forward
    assert g.memory_bytes[g.index("grad/a")] == g.memory_bytes[g.index("a")] == 2 * 4 * 3


def test_autodiff_rule_dependencies():
    g = graph_from_spec(_toy_spec(), rule="autodiff")
    assert _inputs(g, "grad/d") == ["b", "c", "d", "loss"]
    assert _inputs(g, "grad/a") == ["a", "grad/b", "grad/c"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`batch_size`"):
        zoo_graph("vgg16", batch_size=0)
    with pytest.raises(ValueError, match="`rule`"):
        zoo_graph("vgg16", rule="magic")
    with pytest.raises(ValueError, match="unknown zoo graph 'nope'.*keras_vgg16"):
        zoo_graph("nope")
    bad = _toy_spec()
    bad["layers"][1]["deps"] = ["zz"]
    with pytest.raises(ValueError, match="unknown layer 'zz'"):
        graph_from_spec(bad)


def test_short_and_case_insensitive_names():
    assert zoo_graph("VGG16") == zoo_graph("keras_vgg16") == zoo_graph("vgg16")


def test_fixed_batch_graphs_in_plain_format(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_ZOO_DIR", str(tmp_path))
    g = linear_graph(3).replace(name="tiny", meta={"batch_size": 8})
    g.save(tmp_path / "torch_tiny.json")
    with open(tmp_path / "keras_toy.json", "w") as f:
        json.dump(_toy_spec(), f)
    assert list_zoo() == ["keras_toy", "torch_tiny"]
    assert zoo_graph("torch_tiny") == g
    assert zoo_graph("tiny", batch_size=8) == g
    with pytest.raises(ValueError, match="fixed-batch"):
        zoo_graph("tiny", batch_size=4)
    assert zoo_graph("toy", batch_size=2).n == 9


def test_shipped_files_are_what_the_loader_expects():
    from remat_core.zoo.models import DATA_DIR

    for m in KERAS_MODELS:
        with open(os.path.join(DATA_DIR, f"keras_{m}.json")) as f:
            data = json.load(f)
        assert data["format"] == "remat-zoo-model" and data["name"] == m
        assert isinstance(zoo_graph(m), Graph)


def test_vgg19_hard_lower_bound_is_grad_block1_conv1():
    """The memory ceiling of VGG19 (what every max-batch method hits at 16 GB).

    The largest single computation is grad/block1_conv1: it reads block1_conv1, block1_conv2 and
    grad/block1_conv2 and writes one more 224x224x64 value, 4 x 12,845,056 bytes per example; the fixed
    bytes are the parameters twice (weights + gradients) and the input batch.
    """
    spec = load_spec("vgg19")
    g = zoo_graph("vgg19", batch_size=1)
    k = g.index("grad/block1_conv1")
    assert sorted(g.names[i] for i in g.deps[k]) == ["block1_conv1", "block1_conv2", "grad/block1_conv2"]
    per_example = 4 * 4 * 224 * 224 * 64
    assert int(g.memory_bytes[k]) + sum(int(g.memory_bytes[i]) for i in g.deps[k]) == per_example
    for b in (1, 285, 286):
        gb = zoo_graph("vgg19", batch_size=b)
        assert gb.min_budget_lower_bound_bytes() == 8 * spec["params"] + b * (4 * spec["input_elements"] + per_example)
    assert zoo_graph("vgg19", batch_size=285).min_budget_lower_bound_bytes() <= 16 * 10**9
    assert zoo_graph("vgg19", batch_size=286).min_budget_lower_bound_bytes() > 16 * 10**9
