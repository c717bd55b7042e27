"""Extraction: joint graph -> remat_core.Graph (structure, memory, buffers, errors, cost models)."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))

from torch_cases import MODELS, make_case  # noqa: E402

from remat_torch import UnsupportedModelError, extract_graph  # noqa: E402
from remat_torch.profile import node_costs  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), torch.randn(3, 4)


def test_mlp_graph_memory_from_tensor_sizes():
    net, x = mlp()
    eg = extract_graph(net, x, granularity="op")
    g = eg.graph
    assert eg.n_forward == g.meta["n_forward"] == int((~g.is_backward).sum())
    # forward nodes first
    assert not g.is_backward[: eg.n_forward].any() and g.is_backward[eg.n_forward:].all()
    ops = [grp.ops for grp in eg.groups]
    relu = next(k for k, o in enumerate(ops) if "aten.relu.default" in o)
    first = next(k for k, o in enumerate(ops) if "aten.addmm.default" in o)
    assert g.memory_bytes[first] == 3 * 8 * 4  # float32 activation of Linear(4, 8)
    assert g.memory_bytes[relu] == 3 * 8 * 4
    # the model output is fixed memory (handed to the user), not a node's bytes
    last_fwd = eg.n_forward - 1
    assert g.memory_bytes[last_fwd] == 0
    params = sum(p.numel() * 4 for p in net.parameters())
    inputs_tangents = 3 * 4 * 4 + 3 * 2 * 4
    assert g.fixed_bytes == params + inputs_tangents + 3 * 2 * 4  # parameters, input, tangent, output
    # gradients are the bytes of the nodes that compute them, all read by the last node (kept to the end)
    assert g.names[-1].endswith("<gradients>") and g.memory_bytes[-1] == 0 and not eg.groups[-1].ops
    producers = [int(k) for k in g.deps[g.n - 1]]
    assert sum(int(g.memory_bytes[k]) for k in producers) == params
    assert all(eg.groups[k].joint_outputs for k in producers)


def test_views_are_counted_once():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(6, 6)

        def forward(self, x):
            y = torch.relu(self.a(x))
            v = y.view(2, 3, 6).transpose(1, 2)  # views of y: no new memory
            return (v * v).sum(dim=1)

    torch.manual_seed(0)
    eg = extract_graph(Net(), torch.randn(6, 6), granularity="op")
    relu = next(k for k, grp in enumerate(eg.groups) if "aten.relu.default" in grp.ops)
    # the view (run as a reshape, see extract._views_as_reshapes) joins its base
    assert "aten.reshape.default" in eg.groups[relu].ops
    assert eg.graph.memory_bytes[relu] == 6 * 6 * 4
    assert not any(grp.ops in (("aten.view.default",), ("aten.reshape.default",)) for grp in eg.groups)


def test_batchnorm_buffers_are_explicit_mutations():
    model, (x,) = make_case("cnn")
    eg = extract_graph(model, x, granularity="module")
    names = [eg.buffer_names[j] for j in eg.mutated_buffers]
    assert names == eg.buffer_names  # running_mean, running_var, num_batches_tracked of every BN
    assert any(n.endswith("running_mean") for n in names)
    # a buffer update comes from a forward node
    n_mut = len(eg.mutated_buffers)
    owners = [(k, j) for k, grp in enumerate(eg.groups) for _, j in grp.joint_outputs if j < n_mut]
    # (a `<kept>` holder that the backward reads the statistics from exposes them too)
    assert {j for _, j in owners} == set(range(n_mut)) and all(k < eg.n_forward for k, _ in owners)


def test_model_is_not_modified_and_rng_untouched():
    model, (x,) = make_case("cnn")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(5)
    extract_graph(model, x)
    after_rng = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), after_rng)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("name", MODELS)
def test_granularities_nest(name):
    model, inputs = make_case(name)
    eg_op = extract_graph(model, inputs, granularity="op")
    eg_mod = extract_graph(model, inputs, granularity="module")
    top = [n for n, _ in model.named_children()]
    eg_blk = extract_graph(model, inputs, granularity="block", blocks=top)
    assert eg_op.graph.n >= eg_mod.graph.n >= eg_blk.graph.n
    for eg in (eg_op, eg_mod, eg_blk):
        g = eg.graph
        assert g.n > 0 and 0 < eg.n_forward < g.n
        assert not g.is_backward[: eg.n_forward].any()
        assert g.fixed_bytes >= sum(p.numel() * p.element_size() for p in model.parameters())
    # the same ops, only grouped differently
    count = lambda eg: sorted(o for grp in eg.groups for o in grp.ops if not o.startswith("aten.t.") and "view" not in o)  # noqa: E731
    assert len(count(eg_op)) == len(count(eg_mod)) == len(count(eg_blk))


def test_block_granularity_accepts_modules_and_names():
    model, (x,) = make_case("resnet")
    eg1 = extract_graph(model, x, granularity="block", blocks=[model.layers[0], model.layers[1]])
    eg2 = extract_graph(model, x, granularity="block", blocks=["layers.0", "layers.1"])
    assert eg1.graph.n == eg2.graph.n
    scopes = {grp.scope for grp in eg1.groups}
    assert not any(s.startswith("layers.0.") for s in scopes)  # inner modules are folded into the block


def test_data_dependent_control_flow_is_named():
    class DD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y * 2 if y.sum() > 0 else y

    with pytest.raises(UnsupportedModelError, match="data-dependent control flow"):
        extract_graph(DD(), torch.randn(2, 4))


def test_bad_arguments():
    net, x = mlp()
    with pytest.raises(ValueError, match="`granularity`"):
        extract_graph(net, x, granularity="layer")
    with pytest.raises(ValueError, match="`cost_model`"):
        extract_graph(net, x, cost_model="seconds")
    with pytest.raises(ValueError, match="`blocks`"):
        extract_graph(net, x, granularity="block")
    with pytest.raises(ValueError, match="unknown submodule"):
        extract_graph(net, x, granularity="block", blocks=["nope"])
    with pytest.raises(TypeError, match="`model`"):
        extract_graph(lambda z: z, x)
    with pytest.raises(TypeError, match="example_inputs"):
        extract_graph(net, [x, object()])


def test_no_parameter_needs_grad():
    net, x = mlp()
    for p in net.parameters():
        p.requires_grad_(False)
    with pytest.raises(UnsupportedModelError, match="require"):
        extract_graph(net, x)


def test_cost_models():
    model, (x,) = make_case("cnn")
    eg = extract_graph(model, x, granularity="module", cost_model="flops")
    assert eg.graph.meta["cost_unit"] == "flop"
    conv = [k for k, grp in enumerate(eg.groups) if "aten.convolution.default" in grp.ops]
    relu = [k for k, grp in enumerate(eg.groups) if grp.ops and grp.ops[0] == "aten.relu.default"]
    assert conv and relu
    # a 3x3 convolution costs far more than a ReLU of the same output
    assert eg.graph.cost[conv].min() > 10 * eg.graph.cost[relu].max()
    unit = extract_graph(model, x, cost_model="unit")
    assert np.array_equal(unit.graph.cost, np.ones(unit.graph.n))
    prof, unit_name = node_costs(eg, model, (x,), "profile", warmup=1, repeats=2)
    assert unit_name == "s" and (prof > 0).all() and prof.shape == (eg.graph.n,)
    with pytest.raises(ValueError, match="`repeats`"):
        node_costs(eg, model, (x,), "profile", repeats=0)


def test_graph_roundtrips_through_json(tmp_path):
    from remat_core import Graph

    model, (x,) = make_case("transformer")
    g = extract_graph(model, x, cost_model="flops").graph
    g.save(tmp_path / "g.json")
    assert Graph.load(tmp_path / "g.json") == g
